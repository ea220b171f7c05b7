//! Frame splitting: the size-prefixed envelope around every request and response.
//!
//! ```text
//! +----------------+---------------------------+
//! | size: int32 BE | size bytes: header + body |
//! +----------------+---------------------------+
//! ```
//!
//! The size is checked against the caller's maximum before any buffer is sized from it,
//! so a forged or negative prefix never allocates.

use bytes::{Buf, Bytes, BytesMut};

/// What the bytes buffered so far hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framed {
    /// Not a whole frame yet: at least `needed` more bytes must arrive.
    NeedMore {
        /// Bytes still missing (at least this many).
        needed: usize,
    },
    /// One whole frame (header and body, without the size prefix).
    Frame(Bytes),
    /// The size prefix is larger than the allowed maximum.
    TooLarge {
        /// The claimed size.
        size: usize,
        /// The maximum in force.
        max: usize,
    },
    /// The size prefix is negative.
    Negative {
        /// The claimed size.
        size: i32,
    },
}

/// Inspects `buf` without consuming it: how long the next frame is, if known.
pub fn peek_frame(buf: &[u8], max: usize) -> Framed {
    let Some(prefix) = buf.get(..4) else {
        return Framed::NeedMore {
            needed: 4 - buf.len(),
        };
    };
    let size = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if size < 0 {
        return Framed::Negative { size };
    }
    let size = size as usize;
    if size > max {
        return Framed::TooLarge { size, max };
    }
    let have = buf.len() - 4;
    if have < size {
        return Framed::NeedMore {
            needed: size - have,
        };
    }
    // The caller splits; a zero-copy `Bytes` is only made in `split_frame`.
    Framed::Frame(Bytes::new())
}

/// Takes the next whole frame off the front of `buf`, leaving partial data in place.
///
/// On [`Framed::Frame`] the frame's bytes are removed from `buf` (without copying); on
/// every other outcome `buf` is untouched.
pub fn split_frame(buf: &mut BytesMut, max: usize) -> Framed {
    match peek_frame(buf, max) {
        Framed::Frame(_) => {
            let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            buf.advance(4);
            Framed::Frame(buf.split_to(size).freeze())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_distinct() {
        assert_eq!(peek_frame(&[], 10), Framed::NeedMore { needed: 4 });
        assert_eq!(peek_frame(&[0, 0], 10), Framed::NeedMore { needed: 2 });
        assert_eq!(
            peek_frame(&[0, 0, 0, 3, 1], 10),
            Framed::NeedMore { needed: 2 }
        );
        assert_eq!(
            peek_frame(&[0, 0, 0, 11], 10),
            Framed::TooLarge { size: 11, max: 10 }
        );
        assert_eq!(
            peek_frame(&[0xff, 0xff, 0xff, 0xfe], 10),
            Framed::Negative { size: -2 }
        );
        assert_eq!(
            peek_frame(&[0x7f, 0xff, 0xff, 0xff], usize::MAX),
            Framed::NeedMore {
                needed: i32::MAX as usize
            }
        );
    }

    #[test]
    fn split_takes_one_frame_and_keeps_the_rest() {
        let mut buf = BytesMut::from(&[0, 0, 0, 2, 7, 8, 0, 0, 0, 1][..]);
        assert_eq!(
            split_frame(&mut buf, 100),
            Framed::Frame(Bytes::from_static(&[7, 8]))
        );
        assert_eq!(&buf[..], &[0, 0, 0, 1]);
        assert_eq!(split_frame(&mut buf, 100), Framed::NeedMore { needed: 1 });
        assert_eq!(&buf[..], &[0, 0, 0, 1]);
        let mut empty = BytesMut::from(&[0, 0, 0, 0][..]);
        assert_eq!(split_frame(&mut empty, 0), Framed::Frame(Bytes::new()));
    }
}

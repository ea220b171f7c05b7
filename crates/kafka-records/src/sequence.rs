//! A run of batches back to back, as in the `records` field of a Produce partition or a
//! Fetch response partition.
//!
//! ```text
//! [batch][batch]...[batch][partial batch?]
//!  each batch: baseOffset i64, batchLength i32, then batchLength bytes
//! ```
//!
//! A Fetch response may end in a partial batch: the broker cuts at `max_bytes` and the
//! client asks again from the last whole batch. That tail is reported as
//! [`BatchSequence::truncated_tail`], not as corruption. A Produce request must hold
//! exactly one whole batch; that is the caller's check
//! (`batches.len() == 1 && truncated_tail == 0`).

use bytes::Bytes;

use crate::batch::{RecordBatch, peek_total_len};
use crate::{DecodeLimits, Result};

/// Whole batches and the size of the partial batch after them.
#[derive(Clone, Debug, Default)]
pub struct BatchSequence {
    /// The whole batches, in order, CRC-verified.
    pub batches: Vec<RecordBatch>,
    /// Bytes after the last whole batch: a partial batch, or 0.
    pub truncated_tail: usize,
}

/// Decodes every whole batch of `input` and reports the partial tail.
///
/// A whole batch that fails to decode (bad CRC, magic, codec, limits) is an error; a
/// batch that does not fit in the rest of the input is the tail. A `batchLength` too
/// small to be a batch is an error wherever it occurs.
pub fn decode_batches(input: &Bytes, limits: &DecodeLimits) -> Result<BatchSequence> {
    let mut iter = Batches::new(input.clone(), *limits);
    let mut batches = Vec::new();
    for batch in iter.by_ref() {
        batches.push(batch?);
    }
    Ok(BatchSequence {
        batches,
        truncated_tail: iter.truncated_tail(),
    })
}

/// Iterator over the whole batches of a sequence; see [`decode_batches`].
#[derive(Clone, Debug)]
pub struct Batches {
    input: Bytes,
    pos: usize,
    limits: DecodeLimits,
    done: bool,
}

impl Batches {
    /// Iterates the batches of `input`.
    pub fn new(input: Bytes, limits: DecodeLimits) -> Self {
        Self {
            input,
            pos: 0,
            limits,
            done: false,
        }
    }

    /// Bytes not consumed as whole batches. Once the iterator has returned `None`, this is
    /// the partial batch at the end (0 when the input ended on a batch boundary).
    pub fn truncated_tail(&self) -> usize {
        self.input.len() - self.pos
    }
}

impl Iterator for Batches {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = &self.input[self.pos..];
        let total = match peek_total_len(rest) {
            Ok(Some(total)) if total <= rest.len() => total,
            Ok(_) => {
                self.done = true;
                return None;
            }
            Err(e) => {
                self.done = true;
                return Some(Err(e));
            }
        };
        let batch = self.input.slice(self.pos..self.pos + total);
        match RecordBatch::decode(&batch, &self.limits) {
            Ok(batch) => {
                self.pos += total;
                Some(Ok(batch))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Batches {}

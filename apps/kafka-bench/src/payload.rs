//! Record values: text-like bytes, different from record to record.
//!
//! Identical values would let every codec shrink a batch to almost nothing and flatter the
//! compressed runs; random bytes would not compress at all. Values are windows into one
//! pool of pseudo-random lowercase words, so they compress about as well as log lines.

/// Bytes the windows are taken from; larger than any batch, so consecutive records differ.
const POOL: usize = 1 << 20;

/// A pool of text and the record size to cut from it.
#[derive(Debug, Clone)]
pub struct Payloads {
    pool: Vec<u8>,
    size: usize,
}

impl Payloads {
    pub fn new(size: usize, seed: u64) -> Self {
        let mut state = seed | 1;
        let mut next = move || {
            // xorshift64: deterministic, dependency-free, plenty for filler text
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut pool = Vec::with_capacity(POOL + size);
        while pool.len() < POOL + size {
            let r = next();
            let word_len = 2 + (r % 9) as usize;
            for i in 0..word_len {
                pool.push(b'a' + ((r >> (8 + 5 * i)) % 26) as u8);
            }
            pool.push(if r % 13 == 0 { b'\n' } else { b' ' });
        }
        Payloads { pool, size }
    }

    /// The value of record `n`.
    pub fn get(&self, n: u64) -> &[u8] {
        // 4099 is prime and not a divisor of the pool size: windows start at varied offsets
        let start = (n.wrapping_mul(4099) % POOL as u64) as usize;
        &self.pool[start..start + self.size]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn windows_have_the_size_and_differ() {
        let p = Payloads::new(100, 7);
        assert_eq!(p.get(0).len(), 100);
        assert_eq!(p.get(u64::MAX).len(), 100);
        assert_ne!(p.get(0), p.get(1));
    }
}

//! The OS CSPRNG as the engine's [`Entropy`], drawn a block at a time.

use engine::Entropy;

/// The OS CSPRNG as the engine's entropy source, drawn
/// [`ENTROPY_BLOCK`] bytes at a time: an id or a secret then costs a copy
/// instead of a `getrandom` system call (a text turn makes about nine).
/// Bytes are handed out once and zeroed as they leave the block.
pub struct OsEntropy {
    block: Box<[u8; ENTROPY_BLOCK]>,
    /// Bytes of `block` already handed out.
    used: usize,
}

/// Bytes drawn from the OS per `getrandom` call.
const ENTROPY_BLOCK: usize = 512;

impl OsEntropy {
    pub fn new() -> Self {
        OsEntropy {
            block: Box::new([0; ENTROPY_BLOCK]),
            used: ENTROPY_BLOCK,
        }
    }
}

impl Default for OsEntropy {
    fn default() -> Self {
        OsEntropy::new()
    }
}

impl Entropy for OsEntropy {
    fn fill(&mut self, buf: &mut [u8]) {
        let mut out = buf;
        while !out.is_empty() {
            if self.used == ENTROPY_BLOCK {
                // An unavailable OS RNG is unrecoverable: never fall back
                // to a weaker source for key material.
                getrandom::getrandom(&mut self.block[..])
                    .expect("OS random number generator unavailable");
                self.used = 0;
            }
            let n = out.len().min(ENTROPY_BLOCK - self.used);
            let taken = &mut self.block[self.used..self.used + n];
            out[..n].copy_from_slice(taken);
            taken.fill(0);
            self.used += n;
            out = &mut out[n..];
        }
    }
}

#[cfg(test)]
mod entropy_tests {
    use super::*;

    /// Requests of every size across block boundaries are filled whole,
    /// never repeat bytes, and leave nothing they took in the block.
    #[test]
    fn os_entropy_fills_across_blocks_and_zeroes_what_it_hands_out() {
        let mut e = OsEntropy::new();
        let mut seen = Vec::new();
        for len in [1, 16, 24, 500, ENTROPY_BLOCK, 3 * ENTROPY_BLOCK + 7, 0] {
            let mut buf = vec![0u8; len];
            e.fill(&mut buf);
            seen.extend_from_slice(&buf);
            assert!(e.block[..e.used].iter().all(|&b| b == 0));
        }
        // 16-byte windows of OS randomness do not repeat.
        let windows: std::collections::HashSet<&[u8]> = seen.chunks_exact(16).collect();
        assert_eq!(windows.len(), seen.len() / 16);
    }
}

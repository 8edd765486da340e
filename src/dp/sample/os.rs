//! The production source of randomness: the operating system's CSPRNG.

use std::convert::Infallible;

use rand::rand_core::block::{BlockRng, Generator};
use rand::rngs::SysRng;
use rand::{TryCryptoRng, TryRng};

/// Words fetched from the OS per system call (4 KiB).
const BLOCK_WORDS: usize = 1024;

#[derive(Debug)]
struct OsBlocks;

impl Generator for OsBlocks {
    type Output = [u32; BLOCK_WORDS];

    fn generate(&mut self, output: &mut Self::Output) {
        let mut bytes = [0u8; BLOCK_WORDS * 4];
        // getrandom(2) does not fail on a running Linux system once the
        // kernel pool is initialised; if it ever did, no noise may be drawn,
        // and the release's blocking task aborts with this message.
        SysRng
            .try_fill_bytes(&mut bytes)
            .expect("the operating system's CSPRNG failed");
        for (word, chunk) in output.iter_mut().zip(bytes.chunks_exact(4)) {
            *word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
    }

    fn drop(&mut self, output: &mut Self::Output) {
        // Leftover words are noise not yet used: do not leave them behind.
        output.fill(0);
    }
}

/// Random bits straight from the OS CSPRNG (getrandom), buffered in 4 KiB
/// blocks so that a release of many coordinates costs a few system calls,
/// not one per word. Create one per release; never seed it.
#[derive(Debug)]
pub struct OsNoise(BlockRng<OsBlocks>);

impl OsNoise {
    /// A fresh buffer; the first draw reads from the OS.
    pub fn new() -> Self {
        OsNoise(BlockRng::new(OsBlocks))
    }
}

impl Default for OsNoise {
    fn default() -> Self {
        Self::new()
    }
}

impl TryRng for OsNoise {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        Ok(self.0.next_word())
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        Ok(self.0.next_u64_from_u32())
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), Infallible> {
        // Word by word: the samplers ask for a few bytes at a time, where
        // BlockRng's general-purpose copy is several times slower.
        for chunk in dest.chunks_mut(4) {
            let word = self.0.next_word().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        Ok(())
    }
}

impl TryCryptoRng for OsNoise {}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn os_noise_yields_distinct_words_across_block_boundaries() {
        let mut noise = OsNoise::new();
        let words: Vec<u64> = (0..3 * BLOCK_WORDS).map(|_| noise.next_u64()).collect();
        let mut sorted = words.clone();
        sorted.sort_unstable();
        sorted.dedup();
        // 3072 64-bit draws collide with probability below 2^-40.
        assert_eq!(sorted.len(), words.len());
        let mut bytes = [0u8; 10_000];
        noise.fill_bytes(&mut bytes);
        let ones: u32 = bytes.iter().map(|byte| byte.count_ones()).sum();
        // Binomial(80000, 1/2): mean 40000, sd ≈ 141; ±1500 is over 10 sd.
        assert!((38_500..41_500).contains(&ones), "{ones} one-bits");
    }
}

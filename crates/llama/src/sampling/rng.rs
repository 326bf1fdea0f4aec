//! The random source of the sampling chain: the 32-bit Mersenne Twister
//! (MT19937), the generator llama.cpp's samplers use, so that a seed gives the
//! same stream of draws here as there.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// The seed value that asks for a fresh random seed (`LLAMA_DEFAULT_SEED`).
pub const DEFAULT_SEED: u32 = 0xFFFF_FFFF;

/// Words of MT19937 state.
const N: usize = 624;
/// The middle word of the twist.
const M: usize = 397;
/// The twist matrix.
const MATRIX_A: u32 = 0x9908_B0DF;
/// The multiplier of the seeding recurrence.
const INIT_MULT: u32 = 1_812_433_253;
/// 2^32 as a double: the range of one 32-bit draw.
const TWO_POW_32: f64 = 4_294_967_296.0;

/// The 32-bit Mersenne Twister (MT19937), as specified for C++'s `std::mt19937`.
#[derive(Clone)]
pub struct Mt19937 {
    state: [u32; N],
    index: usize,
}

impl std::fmt::Debug for Mt19937 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mt19937")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl Mt19937 {
    /// A generator seeded with `seed` (the `std::mt19937(seed)` constructor).
    pub fn new(seed: u32) -> Self {
        let mut rng = Self {
            state: [0; N],
            index: N,
        };
        rng.seed(seed);
        rng
    }

    /// Restarts the stream from `seed`.
    pub fn seed(&mut self, seed: u32) {
        self.state[0] = seed;
        for i in 1..N {
            let prev = self.state[i - 1];
            // `i < 624`, so the cast is exact.
            self.state[i] = INIT_MULT
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        self.index = N;
    }

    /// The next 32-bit draw.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9D2C_5680;
        y ^= (y << 15) & 0xEFC6_0000;
        y ^ (y >> 18)
    }

    /// A uniform draw in `[0, 1)` made the way GNU libstdc++'s
    /// `std::uniform_real_distribution<double>(0, 1)` makes it from this
    /// generator: two draws, the first as the low word, divided by 2^64, and a
    /// result that rounds up to 1 replaced by the largest double below 1.
    pub fn next_f64(&mut self) -> f64 {
        let lo = f64::from(self.next_u32());
        let hi = f64::from(self.next_u32());
        let r = (lo + hi * TWO_POW_32) / (TWO_POW_32 * TWO_POW_32);
        if r >= 1.0 {
            1.0 - f64::EPSILON / 2.0
        } else {
            r
        }
    }

    fn twist(&mut self) {
        for i in 0..N {
            let x = (self.state[i] & 0x8000_0000) | (self.state[(i + 1) % N] & 0x7FFF_FFFF);
            let mut xa = x >> 1;
            if x & 1 != 0 {
                xa ^= MATRIX_A;
            }
            self.state[i] = self.state[(i + M) % N] ^ xa;
        }
        self.index = 0;
    }
}

/// The seed a sampler runs with: `seed` itself, or a fresh random one when it
/// is [`DEFAULT_SEED`].
pub fn resolve_seed(seed: u32) -> u32 {
    if seed != DEFAULT_SEED {
        return seed;
    }
    // The standard library's per-process random hash keys, mixed with the
    // clock, give an unpredictable seed without a dependency.
    let mut hasher = RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    let h = hasher.finish();
    // Fold the 64-bit hash into 32 bits; the truncation is the intent.
    (h ^ (h >> 32)) as u32
}

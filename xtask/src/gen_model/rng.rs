//! A small self-contained PRNG (xoshiro256++ seeded through splitmix64) and
//! normals by the polar Box-Muller method.
//!
//! Every row of every tensor gets its own stream, derived from the seed, the
//! tensor name and the row index. The bytes of a generated model therefore
//! depend on nothing but the seed and the shape: not on the thread count, the
//! chunk size or the order in which rows are computed.

/// One step of splitmix64: advances `state` and returns a well-mixed value.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Mixes one value into a well-distributed 64-bit hash.
pub fn mix(x: u64) -> u64 {
    let mut s = x;
    splitmix64(&mut s)
}

/// FNV-1a hash of a string: a stable key for a tensor name.
pub fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// The stream key of a tensor: seed and name mixed together.
pub fn tensor_key(seed: u64, name: &str) -> u64 {
    mix(mix(seed) ^ name_hash(name))
}

/// The seed of row `row` of the tensor with key `key`.
pub fn row_seed(key: u64, row: u64) -> u64 {
    mix(key ^ mix(row))
}

/// xoshiro256++: fast, 256 bits of state, good statistical quality.
#[derive(Clone, Debug)]
pub struct Xoshiro256pp {
    s: [u64; 4],
}

impl Xoshiro256pp {
    /// A generator whose state is filled from `seed` by splitmix64 (never all zero).
    pub fn new(seed: u64) -> Xoshiro256pp {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Xoshiro256pp { s }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Two independent standard normals: the polar form of Box-Muller
    /// (Marsaglia), which needs no sine or cosine.
    pub fn normal_pair(&mut self) -> (f64, f64) {
        loop {
            let u = 2.0 * self.unit() - 1.0;
            let v = 2.0 * self.unit() - 1.0;
            let s = u * u + v * v;
            if s > 0.0 && s < 1.0 {
                let f = (-2.0 * s.ln() / s).sqrt();
                return (u * f, v * f);
            }
        }
    }

    /// Fills `out` with samples of N(mean, std²).
    pub fn fill_normal(&mut self, out: &mut [f32], mean: f32, std: f32) {
        let (mean, std) = (f64::from(mean), f64::from(std));
        let mut pairs = out.chunks_exact_mut(2);
        for p in &mut pairs {
            let (a, b) = self.normal_pair();
            p[0] = (mean + std * a) as f32;
            p[1] = (mean + std * b) as f32;
        }
        if let [last] = pairs.into_remainder() {
            *last = (mean + std * self.normal_pair().0) as f32;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_deterministic_and_distinct() {
        let a: Vec<u64> = {
            let mut r = Xoshiro256pp::new(7);
            (0..4).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Xoshiro256pp::new(7);
            (0..4).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        let k = tensor_key(1, "blk.0.attn_q.weight");
        assert_ne!(k, tensor_key(2, "blk.0.attn_q.weight"));
        assert_ne!(k, tensor_key(1, "blk.0.attn_k.weight"));
        assert_ne!(row_seed(k, 0), row_seed(k, 1));
    }

    #[test]
    fn normal_moments() {
        let mut r = Xoshiro256pp::new(3);
        let mut v = vec![0f32; 200_001];
        r.fill_normal(&mut v, 1.0, 0.5);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!((mean - 1.0).abs() < 0.005, "mean {mean}");
        assert!((var.sqrt() - 0.5).abs() < 0.005, "std {}", var.sqrt());
        assert!(v.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn unit_range() {
        let mut r = Xoshiro256pp::new(11);
        for _ in 0..10_000 {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}

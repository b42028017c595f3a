//! splitmix64: a tiny, fast, seedable PRNG. Deterministic across platforms.

/// A seeded pseudo-random generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when n == 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// True with probability `p_permille / 1000`.
    pub fn chance(&mut self, p_permille: u64) -> bool {
        self.below(1000) < p_permille
    }

    /// Roughly log-uniform in `lo..=hi` (lo ≥ 1).
    pub fn log_range(&mut self, lo: u64, hi: u64) -> u64 {
        let lo = lo.max(1);
        let bits_lo = 64 - lo.leading_zeros();
        let bits_hi = 64 - hi.max(lo).leading_zeros();
        let b = self.range(u64::from(bits_lo), u64::from(bits_hi)) as u32;
        let top = (1u64 << b).min(hi);
        let bottom = (1u64 << (b - 1)).max(lo);
        self.range(bottom.min(top), top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_bounded() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        for _ in 0..1000 {
            let v = a.range(3, 9);
            assert!((3..=9).contains(&v));
            let l = a.log_range(1, 120);
            assert!((1..=120).contains(&l));
        }
        assert_eq!(a.below(0), 0);
    }
}

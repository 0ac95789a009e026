//! Small helpers with no better home.

/// A seeded pseudo-random generator (SplitMix64): deterministic runs for `simulate --seed` and
/// `bench --seed`, uniform enough for tie-breaking and synthetic clusters.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next number (splitmix64).
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        // Multiply-shift keeps the bias below 2^-64 * bound, far under what tie-breaking notices.
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        let unit = (self.next_u64() >> 11) as f64 / ((1u64 << 53) as f64);
        unit < p
    }
}

/// The 1-based line of byte `offset` in `text` (offsets past the end count as the last line).
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Mutation fuzzing over a committed corpus (`tests/fuzz-corpus/` and the examples).
#[cfg(any(test, feature = "testing"))]
pub mod fuzz {
    use proptest::prelude::*;
    use proptest::sample::Index;

    /// One of `seeds` with up to eight edits: a cut, a piece of itself repeated, or a piece of
    /// another seed spliced in, each at most 64 bytes at a random place (UTF-8 broken by a cut
    /// is replaced, so the parsers see text).
    pub fn mutated(seeds: &'static [&'static str]) -> impl Strategy<Value = String> {
        let edit = (
            0..3u8,
            any::<Index>(),
            any::<Index>(),
            0..64usize,
            any::<Index>(),
        );
        (any::<Index>(), proptest::collection::vec(edit, 0..8)).prop_map(move |(seed, edits)| {
            let mut text = seeds[seed.index(seeds.len())].as_bytes().to_vec();
            for (op, at, from, len, donor) in edits {
                let at = at.index(text.len() + 1);
                let end = (at + len).min(text.len());
                match op {
                    0 => {
                        text.drain(at..end);
                    }
                    1 => {
                        let piece = text[at..end].to_vec();
                        text.splice(at..at, piece);
                    }
                    _ => {
                        let donor = seeds[donor.index(seeds.len())].as_bytes();
                        let start = from.index(donor.len() + 1);
                        let piece = donor[start..(start + len).min(donor.len())].to_vec();
                        text.splice(at..at, piece);
                    }
                }
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = Rng::new(7);
        let mut seen = [0u32; 5];
        for _ in 0..10_000 {
            seen[rng.below(5) as usize] += 1;
        }
        assert!(seen.iter().all(|&c| c > 1_500), "{seen:?}");
    }

    #[test]
    fn same_seed_same_sequence() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(1), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(1), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
    }
}

//! Kubernetes rules that more than one plugin (or the host) needs.

use crate::types::{LabelSelector, Labels, Taint, Toleration};
use std::hash::Hash;
use std::sync::Arc;

/// The highest node score.
pub const MAX_NODE_SCORE: i64 = 100;
/// The lowest node score.
pub const MIN_NODE_SCORE: i64 = 0;

/// True when `toleration` tolerates `taint` (Kubernetes' `Toleration.ToleratesTaint`).
///
/// An empty effect matches every effect; an empty key matches every key; `Exists` matches any value,
/// `Equal` (or an empty operator) needs equal values, and any other operator matches nothing.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if !toleration.effect.is_empty() && toleration.effect != taint.effect {
        return false;
    }
    if !toleration.key.is_empty() && toleration.key != taint.key {
        return false;
    }
    match toleration.operator.as_str() {
        "" | "Equal" => toleration.value == taint.value,
        "Exists" => true,
        _ => false,
    }
}

/// True when any of `tolerations` tolerates `taint`.
pub fn tolerated_by_any<'a>(
    tolerations: impl IntoIterator<Item = &'a Toleration>,
    taint: &Taint,
) -> bool {
    tolerations.into_iter().any(|t| tolerates(t, taint))
}

/// True when `labels` satisfy `selector` (`metav1.LabelSelectorAsSelector(...).Matches`): every
/// `matchLabels` pair is present, `In` needs the key with one of the values, `NotIn` the key absent
/// or with another value, `Exists` / `DoesNotExist` the key present / absent. An empty selector
/// matches every label set; an unknown operator (which the API server refuses) matches none.
pub fn selector_matches(selector: &LabelSelector, labels: &Labels) -> bool {
    selector
        .match_labels
        .iter()
        .all(|(key, value)| labels.get(key) == Some(value))
        && selector.match_expressions.iter().all(|requirement| {
            let value = labels.get(&requirement.key);
            match requirement.operator.as_str() {
                "In" => value.is_some_and(|v| requirement.values.iter().any(|w| w == v)),
                "NotIn" => value.is_none_or(|v| requirement.values.iter().all(|w| w != v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

/// kube-scheduler's `DefaultNormalizeScore`: scales scores so the largest becomes
/// [`MAX_NODE_SCORE`]; with `reverse`, subtracts each result from [`MAX_NODE_SCORE`]. When every
/// score is zero they stay zero, or all become [`MAX_NODE_SCORE`] with `reverse`.
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0).max(0);
    if max == 0 {
        if reverse {
            scores.fill(MAX_NODE_SCORE);
        }
        return;
    }
    for score in scores.iter_mut() {
        let scaled = MAX_NODE_SCORE * *score / max;
        *score = if reverse {
            MAX_NODE_SCORE - scaled
        } else {
            scaled
        };
    }
}

/// How many items [`for_each_in_blocks`] handles per loop iteration.
pub const BLOCK: usize = 8;

/// Calls `f(k)` for every `k` in `0..len`, in order, [`BLOCK`] calls per loop iteration. As
/// WebAssembly with call deadlines, every loop iteration checks the deadline (loads, a compare and
/// a branch): a per-node loop whose body is a few instructions pays that per node. With the body
/// repeated over a fixed-size block (LLVM unrolls the inner loop), it is paid once per block.
#[inline(always)]
pub fn for_each_in_blocks(len: usize, mut f: impl FnMut(usize)) {
    let mut start = 0;
    // Written so that `k < len` is plain to the optimizer: slices of length `len` indexed by `k`
    // need no bounds checks.
    while len - start >= BLOCK {
        for offset in 0..BLOCK {
            f(start + offset);
        }
        start += BLOCK;
    }
    for k in start..len {
        f(k);
    }
}

/// `out.extend(items.iter().map(f))`, with [`for_each_in_blocks`]'s loop.
#[inline(always)]
pub fn extend_in_blocks<T, U: Copy + Default>(
    out: &mut Vec<U>,
    items: &[T],
    mut f: impl FnMut(&T) -> U,
) {
    let start = out.len();
    out.resize(start + items.len(), U::default());
    let added = &mut out[start..];
    let items = &items[..added.len()];
    for_each_in_blocks(added.len(), |k| added[k] = f(&items[k]));
}

/// `x.round()` (half away from zero, Go's `math.Round`) without a library call: WebAssembly has
/// no such instruction, so `f64::round` is a call into a software routine in every score loop,
/// while `trunc` is one instruction. Exact for every input: `x - x.trunc()` is exact in binary
/// floating point.
#[inline]
pub fn round_half_away(x: f64) -> f64 {
    let whole = x.trunc();
    // Two compares rather than `abs` and `signum`, whose NaN handling cost a dozen instructions
    // per node as WebAssembly.
    let fraction = x - whole;
    if fraction >= 0.5 {
        whole + 1.0
    } else if fraction <= -0.5 {
        whole - 1.0
    } else {
        whole
    }
}

/// A fast hasher for the maps plugins look up per node or per pod in their hot paths (the
/// multiply-rotate hash rustc uses): several times cheaper than the standard library's SipHash
/// on short keys. It does not resist chosen collisions; a plugin's deadline bounds what a
/// crafted label set could cost.
#[derive(Clone, Copy, Default)]
pub struct FastHasher {
    hash: u64,
}

impl FastHasher {
    const FACTOR: u64 = 0x51_7c_c1_b7_27_22_0a_95;

    #[inline]
    fn mix(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(Self::FACTOR);
    }
}

impl std::hash::Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.mix(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(last));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.mix(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.mix(n as u64);
    }

    /// Folds the high half into the low one. A product's low bits depend only on its factors' low
    /// bits, and `HashMap` picks a bucket by the low bits: without the fold, names that differ
    /// only past their first eight bytes (`node-00123`, `node-04567`) fell into 916 of 8,192
    /// buckets, and each lookup walked a long probe sequence.
    fn finish(&self) -> u64 {
        self.hash ^ (self.hash >> 32)
    }
}

/// A `HashMap` with [`FastHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;

/// A `HashSet` with [`FastHasher`].
pub type FastSet<T> = std::collections::HashSet<T, std::hash::BuildHasherDefault<FastHasher>>;

/// One shared copy of each distinct value: how a plugin's mirror and the host's cache keep the
/// parts of placed pods, which a Deployment's replicas have in common. A holder takes a copy with
/// [`Interner::intern`] and gives it back with [`Interner::release`]; a copy whose last holder
/// dropped it without releasing it is swept out once the interner has doubled.
#[derive(Debug)]
pub struct Interner<T> {
    held: FastSet<Arc<T>>,
    /// Sweep when `held` reaches this size.
    sweep_at: usize,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            held: FastSet::default(),
            sweep_at: FIRST_SWEEP,
        }
    }
}

/// An [`Interner`]'s size at its first sweep.
const FIRST_SWEEP: usize = 1024;

impl<T: Hash + Eq> Interner<T> {
    /// The shared copy equal to `value`, made from it if there is none.
    pub fn intern(&mut self, value: T) -> Arc<T> {
        if let Some(held) = self.held.get(&value) {
            return Arc::clone(held);
        }
        if self.held.len() >= self.sweep_at {
            self.held.retain(|held| Arc::strong_count(held) > 1);
            self.sweep_at = (self.held.len() * 2).max(FIRST_SWEEP);
        }
        let value = Arc::new(value);
        self.held.insert(Arc::clone(&value));
        value
    }

    /// Gives back a copy [`Interner::intern`] returned: the interner forgets it with its last
    /// holder.
    pub fn release(&mut self, value: Arc<T>) {
        // The interner's own reference and this one: no other holder is left.
        if Arc::strong_count(&value) == 2 {
            self.held.remove(&*value);
        }
    }

    /// How many distinct values it holds.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// Counts per key in one dense list, found by key through a [`FastMap`] index. Walking every
/// counted key, which pod-aware plugins do for each pod they schedule, then reads a vector,
/// where walking a hash map scans its control bytes (four at a time as WebAssembly, sixteen
/// natively). A key is absent rather than at zero. Each entry also carries `E`, a plugin's cache
/// for its key, made with `E::default()` when the key is first counted.
#[derive(Clone, Debug)]
pub struct DenseCounts<K, E = ()> {
    /// Key → position in `entries`.
    index: FastMap<K, usize>,
    entries: Vec<(K, u32, E)>,
}

impl<K, E> Default for DenseCounts<K, E> {
    fn default() -> Self {
        DenseCounts {
            index: FastMap::default(),
            entries: Vec::new(),
        }
    }
}

impl<K: std::hash::Hash + Eq + Clone, E: Default> DenseCounts<K, E> {
    /// Counts one more (`up`) or one less at `key`; a key counted down to zero is dropped, and
    /// counting down an absent key does nothing.
    pub fn add<Q>(&mut self, key: &Q, up: bool)
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let Some(&at) = self.index.get(key) else {
            if up {
                self.index.insert(key.to_owned(), self.entries.len());
                self.entries.push((key.to_owned(), 1, E::default()));
            }
            return;
        };
        let count = &mut self.entries[at].1;
        if up {
            *count += 1;
            return;
        }
        *count -= 1;
        if *count == 0 {
            self.index.remove(key);
            self.entries.swap_remove(at);
            if let Some((moved, _, _)) = self.entries.get(at) {
                *self
                    .index
                    .get_mut::<K>(moved)
                    .expect("every entry is indexed") = at;
            }
        }
    }

    /// The count at `key`, if any.
    pub fn get<Q>(&self, key: &Q) -> Option<u32>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.index.get(key).map(|&at| self.entries[at].1)
    }

    /// Whether `key` is counted.
    pub fn contains<Q>(&self, key: &Q) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.index.contains_key(key)
    }

    /// How many keys are counted.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is counted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every counted key with its count and its cache, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, u32, &E)> {
        self.entries
            .iter()
            .map(|(key, count, extra)| (key, *count, extra))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interner_shares_equal_values_forgets_released_ones_and_sweeps_dropped_ones() {
        let mut interner = Interner::default();
        let first = interner.intern("web".to_string());
        let second = interner.intern("web".to_string());
        assert!(Arc::ptr_eq(&first, &second), "equal values share one copy");
        let other = interner.intern("db".to_string());
        assert_eq!(interner.len(), 2);
        interner.release(first);
        assert_eq!(interner.len(), 2, "the second holder keeps web");
        interner.release(second);
        assert_eq!(interner.len(), 1, "web leaves with its last holder");
        // Copies dropped without being released stay until the interner reaches its sweep size.
        for n in 0..FIRST_SWEEP - 1 {
            drop(interner.intern(n.to_string()));
        }
        assert_eq!(interner.len(), FIRST_SWEEP);
        let kept = interner.intern("kept".to_string());
        assert_eq!(
            interner.len(),
            2,
            "db and the new value are left after the sweep"
        );
        assert_eq!(*kept, "kept");
        interner.release(other);
        interner.release(kept);
        assert!(interner.is_empty());
    }

    #[test]
    fn dense_counts_follow_adds_and_removals_like_a_map() {
        let mut walk = crate::testing::Walk(3);
        let mut counts: DenseCounts<String> = DenseCounts::default();
        let mut model: std::collections::HashMap<String, u32> = Default::default();
        for step in 0..20_000 {
            let key = format!("host-{}", walk.below(40));
            let held = model.get(&key).copied().unwrap_or(0);
            // Mostly removals of counted keys, some of absent ones (which change nothing).
            let up = walk.below(2) == 0;
            counts.add(key.as_str(), up);
            if up {
                *model.entry(key.clone()).or_default() += 1;
            } else if held == 1 {
                model.remove(&key);
            } else if held > 1 {
                model.insert(key.clone(), held - 1);
            }
            assert_eq!(
                counts.get(key.as_str()),
                model.get(&key).copied(),
                "step {step}"
            );
            assert_eq!(counts.contains(key.as_str()), model.contains_key(&key));
            if step % 97 == 0 {
                let listed: std::collections::HashMap<String, u32> =
                    counts.iter().map(|(k, n, _)| (k.clone(), n)).collect();
                assert_eq!(listed, model, "step {step}");
                assert_eq!(counts.len(), model.len());
            }
        }
    }

    #[test]
    fn blocks_visit_every_index_once_in_order() {
        for len in 0..=3 * BLOCK + 1 {
            let mut seen = Vec::new();
            for_each_in_blocks(len, |k| seen.push(k));
            assert_eq!(seen, (0..len).collect::<Vec<_>>(), "{len} items");
            let items: Vec<usize> = (0..len).collect();
            let mut out = vec![usize::MAX];
            extend_in_blocks(&mut out, &items, |&i| i * 2);
            let expected: Vec<usize> = std::iter::once(usize::MAX)
                .chain(items.iter().map(|i| i * 2))
                .collect();
            assert_eq!(out, expected, "{len} items after one already there");
        }
    }

    #[test]
    fn round_half_away_equals_f64_round() {
        let cases = [
            0.0,
            -0.0,
            0.3,
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            0.49999999999999994,
            -0.49999999999999994,
            4503599627370495.5,
            4503599627370497.0,
            1e300,
            -1e300,
            123.456,
            -7.5,
            f64::MIN_POSITIVE,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        for x in cases {
            assert_eq!(round_half_away(x).to_bits(), x.round().to_bits(), "{x}");
        }
        assert!(round_half_away(f64::NAN).is_nan());
        // Scores are sums of count * ln(n) plus small integers: many values near .5 boundaries.
        for i in 0..100_000 {
            let x = f64::from(i) * 0.125 + (f64::from(i % 97) + 2.0).ln() - 50.0;
            assert_eq!(round_half_away(x).to_bits(), x.round().to_bits(), "{x}");
        }
    }

    #[test]
    fn fast_map_spreads_node_names_over_its_buckets() {
        use std::hash::BuildHasher;
        let build = std::hash::BuildHasherDefault::<FastHasher>::default();
        let buckets = 1u64 << 13;
        let distinct: FastSet<u64> = (0..5_000)
            .map(|i| build.hash_one(format!("node-{i:06}")) & (buckets - 1))
            .collect();
        // 5,000 keys thrown at random into 8,192 buckets land in about 3,700 distinct ones.
        assert!(
            distinct.len() > 3_000,
            "{} distinct buckets",
            distinct.len()
        );
        let tags: FastSet<u64> = (0..5_000)
            .map(|i| build.hash_one(format!("node-{i:06}")) >> 57)
            .collect();
        assert_eq!(tags.len(), 128, "every 7-bit tag is used");
    }
    use crate::testing::toleration;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect: effect.into(),
        }
    }

    #[test]
    fn toleration_matching_follows_kubernetes() {
        let gpu = taint("gpu", "true", "NoSchedule");
        let cases = [
            (
                "equal key, value and effect",
                toleration("gpu", "Equal", "true", "NoSchedule"),
                true,
            ),
            (
                "empty operator means Equal",
                toleration("gpu", "", "true", "NoSchedule"),
                true,
            ),
            (
                "different value",
                toleration("gpu", "Equal", "false", "NoSchedule"),
                false,
            ),
            (
                "Exists ignores the value",
                toleration("gpu", "Exists", "", "NoSchedule"),
                true,
            ),
            (
                "empty effect matches every effect",
                toleration("gpu", "Exists", "", ""),
                true,
            ),
            (
                "other effect",
                toleration("gpu", "Exists", "", "NoExecute"),
                false,
            ),
            (
                "empty key with Exists matches every taint",
                toleration("", "Exists", "", ""),
                true,
            ),
            ("other key", toleration("tpu", "Exists", "", ""), false),
            (
                "unknown operator",
                toleration("gpu", "Matches", "true", ""),
                false,
            ),
        ];
        for (name, tol, expected) in cases {
            assert_eq!(tolerates(&tol, &gpu), expected, "{name}");
        }
    }

    #[test]
    fn label_selectors_follow_kubernetes() {
        use crate::types::LabelSelectorRequirement;
        let labels = Labels::new([
            ("app".to_string(), "web".to_string()),
            ("tier".into(), "1".into()),
        ]);
        let requirement = |key: &str, operator: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: values.iter().map(|v| v.to_string()).collect(),
        };
        let selector =
            |pairs: &[(&str, &str)], expressions: Vec<LabelSelectorRequirement>| LabelSelector {
                match_labels: Labels::new(
                    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())),
                ),
                match_expressions: expressions,
            };
        let cases = [
            (
                "empty selector matches everything",
                selector(&[], vec![]),
                true,
            ),
            (
                "matchLabels pair present",
                selector(&[("app", "web")], vec![]),
                true,
            ),
            (
                "matchLabels pair with another value",
                selector(&[("app", "db")], vec![]),
                false,
            ),
            (
                "In with the value",
                selector(&[], vec![requirement("app", "In", &["db", "web"])]),
                true,
            ),
            (
                "In without the key",
                selector(&[], vec![requirement("zone", "In", &["a"])]),
                false,
            ),
            (
                "NotIn with another value",
                selector(&[], vec![requirement("app", "NotIn", &["db"])]),
                true,
            ),
            (
                "NotIn with the value",
                selector(&[], vec![requirement("app", "NotIn", &["web"])]),
                false,
            ),
            (
                "NotIn without the key",
                selector(&[], vec![requirement("zone", "NotIn", &["a"])]),
                true,
            ),
            (
                "Exists",
                selector(&[], vec![requirement("tier", "Exists", &[])]),
                true,
            ),
            (
                "DoesNotExist on a present key",
                selector(&[], vec![requirement("tier", "DoesNotExist", &[])]),
                false,
            ),
            (
                "every part must hold",
                selector(&[("app", "web")], vec![requirement("tier", "In", &["2"])]),
                false,
            ),
            (
                "unknown operator",
                selector(&[], vec![requirement("app", "Gt", &["1"])]),
                false,
            ),
        ];
        for (name, selector, expected) in cases {
            assert_eq!(selector_matches(&selector, &labels), expected, "{name}");
        }
    }

    #[test]
    fn default_normalize_scales_and_reverses() {
        let mut scores = [0, 2, 4];
        default_normalize(&mut scores, false);
        assert_eq!(scores, [0, 50, 100]);
        let mut scores = [0, 2, 4];
        default_normalize(&mut scores, true);
        assert_eq!(scores, [100, 50, 0]);
        let mut zeros = [0, 0];
        default_normalize(&mut zeros, true);
        assert_eq!(zeros, [100, 100]);
        let mut zeros = [0, 0];
        default_normalize(&mut zeros, false);
        assert_eq!(zeros, [0, 0]);
        let mut thirds = [1, 3];
        default_normalize(&mut thirds, false);
        assert_eq!(thirds, [33, 100], "integer division truncates like Go");
    }
}

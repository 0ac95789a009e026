//! Indexes over the pods of the mirror by label, for plugins that keep counts of the pods a
//! selector matches (InterPodAffinity, PodTopologySpread): a placed pod needs checking only
//! against the selectors it can match, and a new selector only against the pods that can match it.

use crate::helpers::{FastMap, FastSet};

use crate::{ExistingPodRef, LabelSelector, Labels, NodeInfo, Nodes, PodId};

/// A label pair every pod matching `selector` has (a `matchLabels` pair, or an `In` requirement
/// with one value): only pods with it need checking against the selector.
pub fn anchor(selector: Option<&LabelSelector>) -> Option<(&str, &str)> {
    let selector = selector?;
    if let Some(pair) = selector.match_labels.iter().next() {
        return Some(pair);
    }
    selector
        .match_expressions
        .iter()
        .find(|r| r.operator == "In" && r.values.len() == 1)
        .map(|r| (r.key.as_str(), r.values[0].as_str()))
}

/// Entries filed under the label pair (an [`anchor`]) every pod they can match has, the others
/// apart: the entries a pod may match are those of its own labels' pairs and the unanchored
/// ones. Found by borrowed strings, so a pod's labels need no copying to look them up.
pub struct ByAnchor<T> {
    unanchored: T,
    anchored: FastMap<String, FastMap<String, T>>,
}

impl<T: Default> Default for ByAnchor<T> {
    fn default() -> Self {
        ByAnchor {
            unanchored: T::default(),
            anchored: FastMap::default(),
        }
    }
}

impl<T: Default> ByAnchor<T> {
    /// The entry of `anchor` (the unanchored one for `None`), made empty if missing.
    pub fn entry(&mut self, anchor: Option<(&str, &str)>) -> &mut T {
        let Some((key, value)) = anchor else {
            return &mut self.unanchored;
        };
        if !self.anchored.contains_key(key) {
            self.anchored.insert(key.to_string(), FastMap::default());
        }
        let values = self.anchored.get_mut(key).expect("inserted above");
        if !values.contains_key(value) {
            values.insert(value.to_string(), T::default());
        }
        values.get_mut(value).expect("inserted above")
    }

    /// Changes the entry of `anchor`, if there is one, and drops it once `is_empty` says so.
    pub fn update(
        &mut self,
        anchor: Option<(&str, &str)>,
        change: impl FnOnce(&mut T),
        is_empty: impl Fn(&T) -> bool,
    ) {
        let Some((key, value)) = anchor else {
            change(&mut self.unanchored);
            return;
        };
        let Some(values) = self.anchored.get_mut(key) else {
            return;
        };
        if let Some(entry) = values.get_mut(value) {
            change(entry);
            if is_empty(entry) {
                values.remove(value);
            }
        }
        if values.is_empty() {
            self.anchored.remove(key);
        }
    }

    /// The entries a pod with `labels` may match.
    pub fn matching<'a>(&'a self, labels: &'a Labels) -> impl Iterator<Item = &'a T> {
        std::iter::once(&self.unanchored).chain(
            labels
                .iter()
                .filter_map(|(key, value)| self.anchored.get(key)?.get(value)),
        )
    }

    /// Every entry.
    pub fn all(&self) -> impl Iterator<Item = &T> {
        std::iter::once(&self.unanchored).chain(self.anchored.values().flat_map(|v| v.values()))
    }
}

/// The placed pods by label: what a term's selector requires narrows the pods a new tally has to
/// look at from all of them to those with the label.
#[derive(Default)]
pub struct PodsByLabel {
    by_pair: FastMap<String, FastMap<String, FastSet<PodId>>>,
}

impl PodsByLabel {
    /// Files pod `id` under its labels (`up`) or takes it out.
    pub fn apply(&mut self, id: PodId, labels: &Labels, up: bool) {
        for (key, value) in labels.iter() {
            if up {
                if !self.by_pair.contains_key(key) {
                    self.by_pair.insert(key.to_string(), FastMap::default());
                }
                let values = self.by_pair.get_mut(key).expect("inserted above");
                match values.get_mut(value) {
                    Some(ids) => {
                        ids.insert(id);
                    }
                    None => {
                        values.insert(value.to_string(), FastSet::from_iter([id]));
                    }
                }
            } else if let Some(values) = self.by_pair.get_mut(key) {
                if let Some(ids) = values.get_mut(value) {
                    ids.remove(&id);
                    if ids.is_empty() {
                        values.remove(value);
                    }
                }
                if values.is_empty() {
                    self.by_pair.remove(key);
                }
            }
        }
    }

    /// The pods with label `key` = `value`.
    pub fn with_label(&self, key: &str, value: &str) -> Vec<PodId> {
        self.by_pair
            .get(key)
            .and_then(|values| values.get(value))
            .map_or_else(Vec::new, |ids| ids.iter().copied().collect())
    }

    /// The pods that can match `selector`, when it requires a label value (a `matchLabels` pair
    /// or an `In` requirement); `None` when any pod can.
    pub fn candidates(&self, selector: &LabelSelector) -> Option<Vec<PodId>> {
        let values_of = |key: &str| self.by_pair.get(key);
        if let Some((key, value)) = selector.match_labels.iter().next() {
            let ids = values_of(key).and_then(|values| values.get(value));
            return Some(ids.map_or_else(Vec::new, |ids| ids.iter().copied().collect()));
        }
        let requirement = selector
            .match_expressions
            .iter()
            .find(|r| r.operator == "In")?;
        let values = values_of(&requirement.key);
        Some(
            requirement
                .values
                .iter()
                .filter_map(|value| values.and_then(|v| v.get(value)))
                .flatten()
                .copied()
                .collect(),
        )
    }
}

/// Calls `each` with every pod of the mirror among `candidates`, or with every pod when `None`
/// (what [`PodsByLabel::candidates`] says of a selector that requires no label value), and the
/// node it is on: how a new count starts from the pods already placed.
pub fn for_each_candidate<'a>(
    nodes: &'a Nodes,
    candidates: Option<Vec<PodId>>,
    mut each: impl FnMut(ExistingPodRef<'a>, Option<&'a NodeInfo>),
) {
    let mut visit = |pod: ExistingPodRef<'a>| each(pod, nodes.get(pod.node));
    match candidates {
        Some(ids) => ids
            .iter()
            .filter_map(|&id| nodes.pod(id))
            .for_each(&mut visit),
        None => nodes.pods().for_each(|(_, pod)| visit(pod)),
    }
}

/// Puts `entry` into `slots`: in a new slot while fewer than `capacity` are taken, else in place of
/// the least recently used entry (by `used`) not used in the current round `now`. The slot is filed
/// in `by_anchor` under the entry's `anchor` (and the evicted entry's slot taken out of its own);
/// the evicted entry is returned for the caller to take out of its other indexes. How a plugin
/// bounds the selectors it keeps counted (the entries asked for in the current pod's cycle stay).
pub fn place_least_recently_used<T>(
    slots: &mut Vec<T>,
    by_anchor: &mut ByAnchor<Vec<usize>>,
    capacity: usize,
    now: u64,
    used: impl Fn(&T) -> u64,
    anchor: impl Fn(&T) -> Option<(&str, &str)>,
    entry: T,
) -> (usize, Option<T>) {
    let evictable = (slots.len() >= capacity)
        .then(|| {
            (0..slots.len())
                .filter(|&s| used(&slots[s]) != now)
                .min_by_key(|&s| used(&slots[s]))
        })
        .flatten();
    let (slot, evicted) = match evictable {
        Some(slot) => (slot, Some(std::mem::replace(&mut slots[slot], entry))),
        None => {
            slots.push(entry);
            (slots.len() - 1, None)
        }
    };
    if let Some(old) = &evicted {
        by_anchor.update(
            anchor(old),
            |filed| filed.retain(|&s| s != slot),
            Vec::is_empty,
        );
    }
    by_anchor.entry(anchor(&slots[slot])).push(slot);
    (slot, evicted)
}

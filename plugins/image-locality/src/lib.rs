//! ImageLocality: prefers nodes that already hold the images of the pod's containers, the more
//! so for large images, and less for images that most nodes hold anyway.

#![warn(missing_docs)]

use std::collections::HashMap;

use wasched_sdk::helpers::MAX_NODE_SCORE;
use wasched_sdk::{NodeId, NodeInfo, Nodes, Plugin, Pod, PodParts, PodPlan, ScorePlugin};

/// The name used in configs and messages.
pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
/// Below this sum of scaled image sizes a node scores 0 (kube-scheduler's `minThreshold`).
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, the sum at which a node scores 100 (kube-scheduler's `maxContainerThreshold`).
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// An image name as the nodes report it: its size and the nodes that hold it (kube-scheduler's
/// `ImageStateSummary`).
struct ImageState {
    name: String,
    size: i64,
    nodes: Vec<NodeId>,
}

/// The plugin: an index of the nodes' images, and the current pod's sums per node.
#[derive(Default)]
pub struct ImageLocality {
    index: ImageIndex,
    /// Per node id: the scaled sizes of the pod's images the node holds.
    sums: Vec<i64>,
    /// The ids whose sums the pod may have made other than 0 (with repeats): a pod's images are
    /// held by some nodes, so its start does not go over every node.
    summed: Vec<NodeId>,
    /// The pod's images the nodes hold, by normalized name, with their scaled sizes.
    held: Vec<(String, i64)>,
    /// Init containers and containers of the current pod.
    containers: i64,
}

/// Every image name of every node, each node counted once per name, kept up to date with the
/// nodes that change (kube-scheduler's cache does the same per node event): a kubelet reports
/// each pulled image, and in a busy cluster some node's list changes between any two pods.
///
/// A name's size is the one the first node holding it reported, kept while any node holds it, as
/// kube-scheduler keeps the size it saw first.
#[derive(Default)]
struct ImageIndex {
    /// The mirror generation the index is at; `None` before the first pod.
    generation: Option<u64>,
    ids: HashMap<String, u32>,
    /// By image id; an id whose name no node holds any more is in `free`.
    states: Vec<ImageState>,
    free: Vec<u32>,
    /// Per node id: the images it is counted in, each with its position in the image's `nodes`.
    of_node: Vec<Vec<(u32, u32)>>,
    /// How many times the index was made over every node (for tests).
    rebuilt: u64,
}

impl ImageIndex {
    fn state(&self, name: &str) -> Option<&ImageState> {
        self.ids.get(name).map(|&id| &self.states[id as usize])
    }

    /// Brings the index to the mirror's generation: the nodes changed since are counted out and
    /// in again, or, when those cannot be told, every node is.
    fn catch_up(&mut self, nodes: &Nodes) {
        let generation = nodes.generation();
        let changed = self.generation.and_then(|since| nodes.changed_since(since));
        match changed {
            Some(changed) => {
                for id in changed {
                    self.count_out(id);
                    self.count_in(id, nodes.get(id));
                }
            }
            None => {
                *self = ImageIndex {
                    rebuilt: self.rebuilt + 1,
                    ..ImageIndex::default()
                };
                for id in nodes.ids() {
                    self.count_in(id, nodes.get(id));
                }
            }
        }
        self.generation = Some(generation);
    }

    fn count_in(&mut self, id: NodeId, node: Option<&NodeInfo>) {
        let Some(node) = node else { return };
        if self.of_node.len() <= id as usize {
            self.of_node.resize_with(id as usize + 1, Vec::new);
        }
        let mut counted = std::mem::take(&mut self.of_node[id as usize]);
        for image in &node.images {
            for name in &image.names {
                let image_id = match self.ids.get(name) {
                    Some(&image_id) => image_id,
                    None => {
                        let state = ImageState {
                            name: name.clone(),
                            size: image.size_bytes,
                            nodes: Vec::new(),
                        };
                        let image_id = match self.free.pop() {
                            Some(free) => {
                                self.states[free as usize] = state;
                                free
                            }
                            None => {
                                self.states.push(state);
                                self.states.len() as u32 - 1
                            }
                        };
                        self.ids.insert(name.clone(), image_id);
                        image_id
                    }
                };
                if counted
                    .iter()
                    .any(|&(counted_id, _)| counted_id == image_id)
                {
                    continue;
                }
                let holders = &mut self.states[image_id as usize].nodes;
                counted.push((image_id, holders.len() as u32));
                holders.push(id);
            }
        }
        self.of_node[id as usize] = counted;
    }

    fn count_out(&mut self, id: NodeId) {
        let Some(counted) = self.of_node.get_mut(id as usize) else {
            return;
        };
        let counted = std::mem::take(counted);
        for &(image_id, position) in &counted {
            let state = &mut self.states[image_id as usize];
            state.nodes.swap_remove(position as usize);
            if let Some(&moved) = state.nodes.get(position as usize) {
                let entry = self.of_node[moved as usize]
                    .iter_mut()
                    .find(|(counted_id, _)| *counted_id == image_id)
                    .expect("a holder counts the image");
                entry.1 = position;
            } else if state.nodes.is_empty() {
                self.ids.remove(&state.name);
                state.name = String::new();
                self.free.push(image_id);
            }
        }
    }
}

/// The name the container runtime reports for `image`: `:latest` added when it has neither a
/// tag nor a digest (kube-scheduler's `normalizedImageName`, which is all the normalizing it
/// does: `nginx` does not match a node's `docker.io/library/nginx:latest`).
pub fn normalized_image_name(image: &str) -> String {
    let last_colon = image.rfind(':').map_or(-1, |i| i as isize);
    let last_slash = image.rfind('/').map_or(-1, |i| i as isize);
    if last_colon <= last_slash {
        format!("{image}:latest")
    } else {
        image.to_string()
    }
}

/// The node's score from the summed scaled sizes: clamped to the thresholds, scaled to 0..=100
/// (kube-scheduler's `calculatePriority`).
fn priority(sum: i64, containers: i64) -> i64 {
    let max_threshold = MAX_CONTAINER_THRESHOLD * containers;
    let sum = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else {
        sum.min(max_threshold)
    };
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max_threshold - MIN_THRESHOLD)
}

impl Plugin for ImageLocality {
    const NAME: &'static str = NAME;
    const READS_POD: PodParts = PodParts::IMAGES;
    const READS_NODE_IMAGES: bool = true;
    const IDLE_WITHOUT: PodParts = PodParts::IMAGES;

    fn new(_config: &str) -> Result<Self, String> {
        Ok(ImageLocality::default())
    }

    fn prepare(&mut self, pod: &Pod, nodes: &Nodes) -> PodPlan {
        self.index.catch_up(nodes);
        let index = &self.index;
        self.containers = pod.images.len() as i64;
        for id in self.summed.drain(..) {
            self.sums[id as usize] = 0;
        }
        if self.sums.len() < nodes.id_bound() {
            self.sums.resize(nodes.id_bound(), 0);
        }
        self.held.clear();
        let total = nodes.len() as f64;
        for image in &pod.images {
            let name = normalized_image_name(image);
            let Some(state) = index.state(&name) else {
                continue;
            };
            // kube-scheduler's `scaledImageScore`: the size weighed by the share of nodes
            // holding it, so an image every node has does not pull pods together.
            let spread = state.nodes.len() as f64 / total;
            let scaled = (state.size as f64 * spread) as i64;
            for &id in &state.nodes {
                let sum = &mut self.sums[id as usize];
                if *sum == 0 {
                    self.summed.push(id);
                }
                *sum += scaled;
            }
            self.held.push((name, scaled));
        }
        PodPlan {
            // Every node below the minimum scores 0: the same as no opinion.
            score: self
                .summed
                .iter()
                .any(|&id| self.sums[id as usize] > MIN_THRESHOLD),
            ..PodPlan::default()
        }
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
        let holds = |name: &str| {
            node.images
                .iter()
                .any(|i| i.names.iter().any(|n| n == name))
        };
        let sum = self
            .held
            .iter()
            .filter(|(name, _)| holds(name))
            .map(|(_, scaled)| scaled)
            .sum();
        priority(sum, self.containers)
    }

    fn score_batch(&mut self, _pod: &Pod, _nodes: &Nodes, ids: &[NodeId], out: &mut Vec<i64>) {
        out.extend(ids.iter().map(|&id| {
            let sum = self.sums.get(id as usize).copied().unwrap_or(0);
            priority(sum, self.containers)
        }));
    }
}

wasched_sdk::export_plugin!(ImageLocality: score);

/// kube-scheduler's behaviour as a table (its `TestImageLocalityPriority`, plus init containers
/// and names that need `:latest`): run natively by this crate's tests and through the
/// WebAssembly build by the host's (`tests/e2e/plugins.rs`), which insists both builds agree.
#[cfg(not(target_arch = "wasm32"))]
pub fn cases() -> Vec<wasched_sdk::testing::Case> {
    use wasched_sdk::testing::{node, pod, Case};
    use wasched_sdk::NodeImage;

    let holding = |name: &str, images: &[(&[&str], i64)]| NodeInfo {
        images: images
            .iter()
            .map(|(names, size_mb)| NodeImage {
                names: names.iter().map(|n| n.to_string()).collect(),
                size_bytes: size_mb * MB,
            })
            .collect(),
        ..node(name)
    };
    let running = |images: &[&str]| Pod {
        images: images.iter().map(|i| i.to_string()).collect(),
        ..pod("p")
    };
    let node_40_300_2000 = |name| {
        holding(
            name,
            &[
                (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
                (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
                (&["gcr.io/2000:latest"], 2000),
            ],
        )
    };
    let node_250_10 = |name| {
        holding(
            name,
            &[
                (&["gcr.io/250:latest"], 250),
                (&["gcr.io/10:latest", "gcr.io/10:v1"], 10),
            ],
        )
    };
    let node_4000_30 = |name| {
        holding(
            name,
            &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)],
        )
    };
    let node_600_40_900 = holding(
        "node1",
        &[
            (&["gcr.io/600:latest"], 600),
            (&["gcr.io/40:latest"], 40),
            (&["gcr.io/900:latest"], 900),
        ],
    );
    let node_300_600_900 = holding(
        "node2",
        &[
            (&["gcr.io/300:latest"], 300),
            (&["gcr.io/600:latest"], 600),
            (&["gcr.io/900:latest"], 900),
        ],
    );
    let node_20_30_40 = holding(
        "node1",
        &[
            (&["gcr.io/20:latest"], 20),
            (&["gcr.io/30:latest"], 30),
            (&["gcr.io/40:latest"], 40),
        ],
    );
    vec![
        // 250M/2 on node2: 100 * (125M - 23M) / (2000M - 23M) = 5; node1's 40M/2 is below 23M.
        Case::score(
            "two images spread on two nodes, prefer the larger image one",
            running(&["gcr.io/40", "gcr.io/250"]),
            vec![node_40_300_2000("node1"), node_250_10("node2")],
            vec![0, 5],
        ),
        // 100 * ((40M + 300M)/2 - 23M) / (2000M - 23M) = 7.
        Case::score(
            "two images on one node, prefer this node",
            running(&["gcr.io/40", "gcr.io/300"]),
            vec![node_40_300_2000("node1"), node_250_10("node2")],
            vec![7, 0],
        ),
        Case::score(
            "if exceed limit, use limit",
            running(&["gcr.io/10", "gcr.io/4000"]),
            vec![node_4000_30("node1"), node_250_10("node2")],
            vec![100, 0],
        ),
        // 100 * (4000M/3 - 23M) / (2000M - 23M) = 66.
        Case::score(
            "if exceed limit, use limit (with node which has no images present)",
            running(&["gcr.io/10", "gcr.io/4000"]),
            vec![node_4000_30("node1"), node_250_10("node2"), node("node3")],
            vec![66, 0, 0],
        ),
        // node1: 100 * (600M*2/3 + 900M*2/3 - 23M) / (3000M - 23M) = 32; node2 adds 300M/3: 36.
        Case::score(
            "pod with multiple large images, node2 is preferred",
            running(&["gcr.io/300", "gcr.io/600", "gcr.io/900"]),
            vec![node_600_40_900, node_300_600_900, node("node3")],
            vec![32, 36, 0],
        ),
        // node1: 100 * (30M + 40M/2 - 23M) / (2000M - 23M) = 1; node2: 30M - 23M rounds to 0.
        Case::score(
            "pod with multiple small images",
            running(&["gcr.io/30", "gcr.io/40"]),
            vec![node_20_30_40, node_4000_30("node2")],
            vec![1, 0],
        ),
        // An init container's image counts, and so does its container in the maximum: 300M/2
        // over (2000M - 23M) for the two containers gives 100 * (150M - 23M) / 1977M = 6.
        Case::score(
            "an init container's image counts like a container's",
            running(&["gcr.io/300:v1", "app:2"]),
            vec![node_40_300_2000("node1"), node_250_10("node2")],
            vec![6, 0],
        ),
        // A pod asking for `gcr.io/40:v2` does not match a node's `gcr.io/40:v1`, nor does a
        // registry prefix the pod leaves out match: every node would score 0, which the plugin
        // says as no opinion (no score call).
        Case::score(
            "only the exact name (with :latest added) matches",
            running(&["gcr.io/40:v2", "300:v1"]),
            vec![node_40_300_2000("node1"), node_250_10("node2")],
            vec![],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::{normalized_image_name, ImageLocality, MB};
    use wasched_sdk::testing::{node, pod, Walk};
    use wasched_sdk::{Driver, NodeId, NodeImage, NodeInfo, Pod};

    #[test]
    fn answers_as_kube_scheduler() {
        wasched_sdk::testing::check::<super::ImageLocality>(&super::cases());
    }

    fn image(name: &str, size_mb: i64) -> NodeImage {
        NodeImage {
            names: vec![name.to_string()],
            size_bytes: size_mb * MB,
        }
    }

    fn holding(name: &str, images: Vec<NodeImage>) -> NodeInfo {
        NodeInfo {
            images,
            ..node(name)
        }
    }

    /// Every node's score for `pod` (empty when the plugin has no opinion).
    fn scores(driver: &mut Driver<ImageLocality>, pod: &Pod) -> Vec<i64> {
        let plan = driver.set_pod(pod.clone());
        let ids: Vec<NodeId> = driver.nodes().ids().collect();
        let mut scores = Vec::new();
        if plan.score {
            driver.score(&ids, &mut scores);
        }
        scores
    }

    #[test]
    fn images_pulled_and_removed_node_by_node_score_as_from_scratch() {
        let mut walk = Walk(7);
        let mut driver = Driver::<ImageLocality>::new("{}").unwrap();
        let pool = |k: u64| {
            // Two names an image, one size a name.
            NodeImage {
                names: vec![format!("app-{k}:v1"), format!("app-{k}@sha256:{k:04}")],
                size_bytes: (40 + 97 * k as i64 % 900) * MB,
            }
        };
        let random_node = |walk: &mut Walk, id: NodeId| {
            let images = (0..walk.below(6)).map(|_| pool(walk.below(12))).collect();
            holding(&format!("node-{id}"), images)
        };
        let mut asked = 0;
        for step in 0..1_500 {
            let id = walk.below(16) as NodeId;
            match walk.below(8) {
                0 => driver.remove_nodes(&[id]),
                1 | 2 => {
                    let node = random_node(&mut walk, id);
                    driver.upsert_nodes([(id, node)]);
                }
                _ => {
                    let pod = Pod {
                        images: (0..1 + walk.below(3))
                            .map(|_| format!("app-{}", walk.below(14)))
                            .collect(),
                        ..pod("p")
                    };
                    let kept = scores(&mut driver, &pod);
                    let mut fresh = Driver::<ImageLocality>::new("{}").unwrap();
                    let nodes = driver.nodes();
                    fresh.upsert_nodes(nodes.ids().map(|id| (id, nodes.get(id).unwrap().clone())));
                    assert_eq!(kept, scores(&mut fresh, &pod), "step {step}: {pod:?}");
                    asked += 1;
                }
            }
        }
        assert!(asked > 500);
        assert_eq!(
            driver.plugin().index.rebuilt,
            1,
            "made once, then kept up to date"
        );
    }

    /// kube-scheduler's cache keeps an image's size from the node that first reported it, for as
    /// long as any node holds it.
    #[test]
    fn an_images_size_is_the_first_reported_while_any_node_holds_it() {
        let mut driver = Driver::<ImageLocality>::new("{}").unwrap();
        let pod = Pod {
            images: vec!["app:v1".into()],
            ..pod("p")
        };
        driver.upsert_nodes([
            (0, holding("a", vec![image("app:v1", 1000)])),
            (1, node("b")),
        ]);
        // 1000M/2 = 500M: 100 * (500M - 23M) / (1000M - 23M) = 48.
        assert_eq!(scores(&mut driver, &pod), [48, 0]);
        driver.upsert_nodes([(1, holding("b", vec![image("app:v1", 200)]))]);
        assert_eq!(scores(&mut driver, &pod), [100, 100], "1000M on both");
        driver.upsert_nodes([(0, node("a"))]);
        assert_eq!(
            scores(&mut driver, &pod),
            [0, 48],
            "still 1000M, on one of two"
        );
        driver.upsert_nodes([(1, node("b"))]);
        driver.upsert_nodes([(0, holding("a", vec![image("app:v1", 200)]))]);
        // 200M/2 = 100M: 100 * (100M - 23M) / 977M = 7.
        assert_eq!(scores(&mut driver, &pod), [7, 0], "held by none in between");
    }

    /// kube-scheduler's `TestNormalizedImageName`.
    #[test]
    fn names_without_a_tag_or_digest_get_latest() {
        let digest = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945";
        for (input, output) in [
            ("root", "root:latest".to_string()),
            ("gcr.io:5000/root", "gcr.io:5000/root:latest".to_string()),
            ("root:tag", "root:tag".to_string()),
            (&format!("root@{digest}"), format!("root@{digest}")),
        ] {
            assert_eq!(normalized_image_name(input), output, "{input}");
        }
    }
}

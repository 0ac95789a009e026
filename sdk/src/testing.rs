//! Testing a plugin natively, the way the host runs it.
//!
//! [`answers`] puts one pod through a plugin over a list of nodes, as the host would: the nodes
//! into the plugin's mirror (under ids that are not positions), the pod reduced to the parts the
//! plugin declares ([`crate::Plugin::READS_POD`]), its plan, the filter and the scores in batches.
//! On the way it fails the test when the plugin's paths disagree: the batch methods against the
//! per-node ones, one batch against another split, a `FailingNodes` plan against the filter, and
//! when a normalized score leaves 0..=100. A table of [`Case`]s checks the answers; the host runs
//! the same tables through the plugin's WebAssembly build to insist both builds agree.
//!
//! ```
//! use wasched_sdk::testing::{self, node, pod, with_labels, Case};
//! use wasched_sdk::{Failure, FilterPlugin, NodeInfo, Plugin, Pod, Verdict};
//!
//! pub struct Maintenance;
//! impl Plugin for Maintenance {
//!     const NAME: &'static str = "Maintenance";
//!     fn new(_config: &str) -> Result<Self, String> {
//!         Ok(Maintenance)
//!     }
//! }
//! impl FilterPlugin for Maintenance {
//!     fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
//!         match node.labels.get("maintenance") {
//!             Some("true") => Err(Failure::unresolvable("node(s) were under maintenance")),
//!             _ => Ok(()),
//!         }
//!     }
//! }
//! wasched_sdk::export_plugin!(Maintenance: filter);
//!
//! let case = Case::filter(
//!     "a node under maintenance is ruled out",
//!     pod("p"),
//!     vec![node("ok"), with_labels(node("down"), &[("maintenance", "true")])],
//!     vec![testing::pass(), testing::unresolvable("node(s) were under maintenance")],
//! );
//! testing::check::<Maintenance>(&[case]);
//! ```

use crate::helpers::default_normalize;
use crate::{
    ClaimAllocation, Code, Driver, ExistingPod, ExistingPodParts, Exported, Failure, FilterPlan,
    FilterResults, HostPort, IdleWhen, Labels, NodeId, NodeInfo, NodeSelectorRequirement,
    NodeSelectorTerm, Normalize, Pod, PodId, PodPlan, Resources, Taint, Toleration, VolumeInfo,
};

/// One gibibyte.
pub const GI: i64 = 1 << 30;

/// A node with 4 CPUs, 8 GiB of memory, 100 GiB of ephemeral storage and room for 110 pods.
pub fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        allocatable: Resources {
            milli_cpu: 4000,
            memory: 8 * GI,
            ephemeral_storage: 100 * GI,
            pods: 110,
            scalar: Vec::new(),
        },
        ..NodeInfo::default()
    }
}

/// `node` with these labels.
pub fn with_labels(mut node: NodeInfo, labels: &[(&str, &str)]) -> NodeInfo {
    node.labels = labels.iter().copied().collect();
    node
}

/// `node` with these taints, each `(key, value, effect)`.
pub fn with_taints(mut node: NodeInfo, taints: &[(&str, &str, &str)]) -> NodeInfo {
    node.taints = taints
        .iter()
        .map(|(key, value, effect)| Taint {
            key: key.to_string(),
            value: value.to_string(),
            effect: effect.to_string(),
        })
        .collect();
    node
}

/// A seeded random walk (splitmix64) for property tests: the same seed gives the same steps.
pub struct Walk(pub u64);

impl Walk {
    /// A number in `0..bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % bound
    }

    /// One of `from`.
    pub fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }
}

/// A pod in `default` for the default scheduler, requesting nothing.
pub fn pod(name: &str) -> Pod {
    Pod {
        namespace: "default".into(),
        name: name.into(),
        scheduler_name: "default-scheduler".into(),
        ..Pod::default()
    }
}

/// A pod requesting only CPU (scoring sees the same request).
pub fn cpu_pod(name: &str, milli_cpu: i64) -> Pod {
    let requests = Resources {
        milli_cpu,
        ..Resources::default()
    };
    Pod {
        requests: requests.clone(),
        non_zero_requests: requests,
        ..pod(name)
    }
}

/// A pod requesting `milli_cpu` and `memory` bytes (scoring sees the same requests).
pub fn requesting(milli_cpu: i64, memory: i64) -> Pod {
    let requests = Resources {
        milli_cpu,
        memory,
        ..Resources::default()
    };
    Pod {
        requests: requests.clone(),
        non_zero_requests: requests,
        ..pod("p")
    }
}

/// `node` with `pods` pods requesting `milli_cpu` and `memory` bytes in all.
pub fn with_usage(mut node: NodeInfo, milli_cpu: i64, memory: i64, pods: u32) -> NodeInfo {
    for requested in [
        &mut node.usage.requested,
        &mut node.usage.non_zero_requested,
    ] {
        requested.milli_cpu = milli_cpu;
        requested.memory = memory;
    }
    node.usage.pod_count = pods;
    node
}

/// A node named `name` for property tests of resource scoring: allocatable cpu and memory drawn
/// from none to large, and pods requesting from nothing to more than any node has.
pub fn random_resource_node(walk: &mut Walk, name: &str) -> NodeInfo {
    let mut n = node(name);
    n.allocatable.milli_cpu = [0, 1000, 4000, 64_000][walk.below(4) as usize];
    n.allocatable.memory = [0, GI, 8 * GI, 256 * GI][walk.below(4) as usize];
    let cpu = walk.below(70_000) as i64;
    let memory = walk.below(300) as i64 * GI;
    with_usage(n, cpu, memory, 1)
}

/// `pod` asking for `ports` on its node, each `(host IP, protocol, port)`; an empty IP or protocol
/// is filled in as the host does (`0.0.0.0`, `TCP`).
pub fn with_host_ports(mut pod: Pod, ports: &[(&str, &str, i32)]) -> Pod {
    pod.host_ports = ports
        .iter()
        .map(|&(ip, protocol, port)| HostPort {
            host_ip: if ip.is_empty() { "0.0.0.0" } else { ip }.to_string(),
            protocol: if protocol.is_empty() { "TCP" } else { protocol }.to_string(),
            port,
        })
        .collect();
    pod.host_ports.sort();
    pod.host_ports.dedup();
    pod
}

/// A toleration without `tolerationSeconds`.
pub fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
    Toleration {
        key: key.into(),
        operator: operator.into(),
        value: value.into(),
        effect: effect.into(),
        toleration_seconds: None,
    }
}

/// A node selector requirement.
pub fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: values.iter().map(|v| v.to_string()).collect(),
    }
}

/// A node selector term of `expressions` (no fields).
pub fn term(expressions: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: expressions,
        match_fields: Vec::new(),
    }
}

/// Labels from pairs.
pub fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().copied().collect()
}

/// A node's verdict as tables write it: `None` when it passes, else the failure's code and
/// reasons.
pub type Expected = Option<(Code, Vec<String>)>;

/// A pass.
pub fn pass() -> Expected {
    None
}

/// A failure with `code` and `reasons`.
pub fn fail(code: Code, reasons: &[&str]) -> Expected {
    Some((code, reasons.iter().map(|r| r.to_string()).collect()))
}

/// A failure no change to the node's pods would help (`UnschedulableAndUnresolvable`).
pub fn unresolvable(reason: &str) -> Expected {
    fail(Code::UnschedulableAndUnresolvable, &[reason])
}

/// What a plugin made of one pod over a list of nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    /// The plan `set-pod` gave.
    pub plan: PodPlan,
    /// Per node, in the order given: the verdict the host takes. All passes when the plan was
    /// `Skip`; empty when it was `Reject`, or the plugin does not filter.
    pub verdicts: Vec<Expected>,
    /// Normalized scores per node; empty when the plugin does not score or has no opinion.
    pub scores: Vec<i64>,
    /// What PreEnqueue said of the pod: a pass lets it into the queue (also for a plugin that
    /// takes no part in PreEnqueue).
    pub pre_enqueue: Expected,
    /// What Reserve allocated for the pod's claims on the row's `reserve_on` node (empty
    /// without one).
    pub reserved: Vec<ClaimAllocation>,
    /// What the stages around the cycle answered, for the ones the row asks about.
    pub stages: Stages,
}

/// The stages around the cycle a row asks about (each `None`: not asked), and what they answer:
/// Permit and Unreserve on a node named `node`, PostFilter, and QueueSort with `queued_millis`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stages {
    /// When the pod was first queued, for QueueSort.
    pub queued_millis: i64,
    /// Permit's answer.
    pub permit: Option<crate::PermitAnswer>,
    /// The waiting pods Unreserve rejects.
    pub unreserve: Option<Vec<crate::Rejection>>,
    /// PostFilter's answer.
    pub post_filter: Option<crate::PostFilterAnswer>,
    /// QueueSort's key.
    pub queue_key: Option<crate::QueueKey>,
}

impl Stages {
    /// The same questions, each answered by the calls given (called only for the stages asked).
    pub fn answered(
        &self,
        permit: impl FnOnce() -> crate::PermitAnswer,
        unreserve: impl FnOnce() -> Vec<crate::Rejection>,
        post_filter: impl FnOnce() -> crate::PostFilterAnswer,
        queue_key: impl FnOnce(i64) -> crate::QueueKey,
    ) -> Stages {
        Stages {
            queued_millis: self.queued_millis,
            permit: self.permit.as_ref().map(|_| permit()),
            unreserve: self.unreserve.as_ref().map(|_| unreserve()),
            post_filter: self.post_filter.as_ref().map(|_| post_filter()),
            queue_key: self
                .queue_key
                .as_ref()
                .map(|_| queue_key(self.queued_millis)),
        }
    }
}

/// One row of a plugin's table: a pod, nodes, and what the plugin must answer.
#[derive(Debug, Clone)]
pub struct Case {
    /// What the row shows, printed when it fails.
    pub name: &'static str,
    /// The plugin's configuration as JSON.
    pub config: String,
    /// The pod.
    pub pod: Pod,
    /// The nodes.
    pub nodes: Vec<NodeInfo>,
    /// The verdict per node, when the row checks them.
    pub verdicts: Option<Vec<Expected>>,
    /// The normalized score per node, when the row checks them.
    pub scores: Option<Vec<i64>>,
    /// The filter plan, when the row checks it.
    pub plan: Option<FilterPlan>,
    /// Pods already placed, each with the position in `nodes` of its node.
    pub existing: Vec<(usize, Pod)>,
    /// Namespaces with their labels (for `namespaceSelector`s).
    pub namespaces: Vec<(String, Labels)>,
    /// PersistentVolumes in the cluster (for claims waiting for their first consumer).
    pub volumes: Vec<VolumeInfo>,
    /// The positions of the nodes that passed every filter, which are scored (`scores` has one
    /// entry per position); `None` scores every node.
    pub feasible: Option<Vec<usize>>,
    /// What PreEnqueue says of the pod, when the row checks it.
    pub pre_enqueue: Option<Expected>,
    /// The position of a node to reserve the pod on after filtering, and the claims' devices
    /// Reserve must allocate there, when the row checks them.
    pub reserve_on: Option<(usize, Vec<ClaimAllocation>)>,
    /// What the stages around the cycle answer, for those the row checks.
    pub stages: Stages,
}

impl Case {
    /// A row checking the verdicts, with the default configuration.
    pub fn filter(
        name: &'static str,
        pod: Pod,
        nodes: Vec<NodeInfo>,
        verdicts: Vec<Expected>,
    ) -> Case {
        Case {
            name,
            config: "{}".into(),
            pod,
            nodes,
            verdicts: Some(verdicts),
            scores: None,
            plan: None,
            existing: Vec::new(),
            namespaces: Vec::new(),
            volumes: Vec::new(),
            feasible: None,
            pre_enqueue: None,
            reserve_on: None,
            stages: Stages::default(),
        }
    }

    /// A row checking the normalized scores, with the default configuration.
    pub fn score(name: &'static str, pod: Pod, nodes: Vec<NodeInfo>, scores: Vec<i64>) -> Case {
        Case {
            name,
            config: "{}".into(),
            pod,
            nodes,
            verdicts: None,
            scores: Some(scores),
            plan: None,
            existing: Vec::new(),
            namespaces: Vec::new(),
            volumes: Vec::new(),
            feasible: None,
            pre_enqueue: None,
            reserve_on: None,
            stages: Stages::default(),
        }
    }

    /// A row checking what PreEnqueue says of `pod` (a pass: it may enter the queue), with the
    /// default configuration and no nodes.
    pub fn pre_enqueue(name: &'static str, pod: Pod, expected: Expected) -> Case {
        Case {
            verdicts: None,
            pre_enqueue: Some(expected),
            ..Case::filter(name, pod, Vec::new(), Vec::new())
        }
    }

    /// A row checking only what the stages around the cycle (Permit, Unreserve, PostFilter,
    /// QueueSort) answer for `pod`, with the default configuration and no nodes.
    pub fn stages(name: &'static str, pod: Pod, stages: Stages) -> Case {
        Case {
            verdicts: None,
            stages,
            ..Case::filter(name, pod, Vec::new(), Vec::new())
        }
    }

    /// This row also reserving the pod on the node at `position`, where Reserve must allocate
    /// `claims`.
    pub fn reserving(mut self, position: usize, claims: Vec<ClaimAllocation>) -> Case {
        self.reserve_on = Some((position, claims));
        self
    }

    /// This row with the cluster's PersistentVolumes.
    pub fn with_volumes(mut self, volumes: Vec<VolumeInfo>) -> Case {
        self.volumes = volumes;
        self
    }

    /// This row with the plugin configured by `config` (JSON).
    pub fn with_config(mut self, config: &str) -> Case {
        self.config = config.into();
        self
    }

    /// This row with `pods` already placed, each on the node at its position in the row's nodes.
    pub fn with_existing(mut self, pods: Vec<(usize, Pod)>) -> Case {
        self.existing = pods;
        self
    }

    /// This row with namespaces `(name, labels)`.
    pub fn with_namespaces(mut self, namespaces: &[(&str, &[(&str, &str)])]) -> Case {
        self.namespaces = namespaces
            .iter()
            .map(|(name, pairs)| (name.to_string(), labels(pairs)))
            .collect();
        self
    }

    /// The row's existing pods as a plugin reading `parts` is sent them: under ids that are not
    /// positions, on their nodes' ids ([`node_ids`]).
    pub fn existing_pods(&self, parts: ExistingPodParts) -> Vec<(PodId, ExistingPod)> {
        let ids = node_ids(self.nodes.len());
        self.existing
            .iter()
            .enumerate()
            .map(|(i, (position, pod))| {
                let node = ids[*position];
                (
                    i as PodId * 5 + 3,
                    ExistingPod::of(pod, node).with_parts(node, parts),
                )
            })
            .collect()
    }

    /// This row scoring only the nodes at `positions` (kube-scheduler's tests' `failedNodes` are
    /// the others).
    pub fn with_feasible(mut self, positions: &[usize]) -> Case {
        self.feasible = Some(positions.to_vec());
        self
    }

    /// The mirror ids of the nodes the row scores, in order.
    pub fn scored_ids(&self) -> Vec<NodeId> {
        let ids = node_ids(self.nodes.len());
        match &self.feasible {
            Some(positions) => positions.iter().map(|&p| ids[p]).collect(),
            None => ids,
        }
    }

    /// This row also checking the filter plan.
    pub fn with_plan(mut self, plan: FilterPlan) -> Case {
        self.plan = Some(plan);
        self
    }

    /// Panics, naming the row and `plugin`, when `answers` differ from what the row expects.
    pub fn assert_answered(&self, plugin: &str, answers: &Answers) {
        if let Some(verdicts) = &self.verdicts {
            assert_eq!(
                &answers.verdicts, verdicts,
                "{plugin}: {}: verdicts",
                self.name
            );
        }
        if let Some(scores) = &self.scores {
            assert_eq!(&answers.scores, scores, "{plugin}: {}: scores", self.name);
        }
        if let Some(plan) = &self.plan {
            assert_eq!(&answers.plan.filter, plan, "{plugin}: {}: plan", self.name);
        }
        if let Some((_, reserved)) = &self.reserve_on {
            assert_eq!(
                &answers.reserved, reserved,
                "{plugin}: {}: reserved",
                self.name
            );
        }
        if let Some(pre_enqueue) = &self.pre_enqueue {
            assert_eq!(
                &answers.pre_enqueue, pre_enqueue,
                "{plugin}: {}: pre-enqueue",
                self.name
            );
        }
        assert_eq!(
            answers.stages, self.stages,
            "{plugin}: {}: stages",
            self.name
        );
    }
}

/// Runs every row through `P` natively ([`answers`]) and checks its answers.
pub fn check<P: Exported>(cases: &[Case]) {
    for case in cases {
        case.assert_answered(P::NAME, &answers::<P>(case));
    }
}

/// The ids the nodes get in the mirror: not their positions, to catch a plugin indexing by
/// position.
pub fn node_ids(count: usize) -> Vec<NodeId> {
    (0..count as u32).map(|i| i * 3 + 7).collect()
}

/// The `FailingNodes` plan naming the nodes at `positions` of a table's `count` nodes (by their
/// mirror ids, see [`node_ids`]), each failing with `failure`.
pub fn failing_plan(count: usize, positions: &[usize], failure: Failure) -> FilterPlan {
    let ids = node_ids(count);
    FilterPlan::FailingNodes {
        nodes: positions.iter().map(|&p| ids[p]).collect(),
        results: FilterResults {
            verdicts: vec![1; positions.len()],
            failures: vec![failure],
        },
    }
}

/// A failure as tables write it.
pub fn verdict_of(failure: Option<&Failure>) -> Expected {
    failure.map(|f| (f.code, f.reasons.iter().map(|r| r.to_string()).collect()))
}

/// The verdicts the host takes for the nodes `ids` under `plan`, given `filter`, which runs the
/// plugin's filter over `ids` in order. Panics, naming `what`, when a `Skip` plan or a
/// `FailingNodes` plan disagrees with the filter: the host never calls the filter then, so the
/// plan must say exactly what it would.
pub fn verdicts_under_plan(
    plan: &FilterPlan,
    ids: &[NodeId],
    filter: impl FnOnce() -> Vec<Expected>,
    what: &str,
) -> Vec<Expected> {
    match plan {
        FilterPlan::Skip => {
            let filtered = filter();
            assert!(
                filtered.iter().all(Option::is_none),
                "{what}: a Skip plan, but the filter fails nodes: {filtered:?}"
            );
            vec![None; ids.len()]
        }
        FilterPlan::Run | FilterPlan::OnlyNodes(_) => filter(),
        FilterPlan::Reject(_) => Vec::new(),
        FilterPlan::FailingNodes { nodes, results } => {
            let planned: Vec<Expected> = ids
                .iter()
                .map(|id| {
                    let listed = nodes.iter().position(|n| n == id);
                    verdict_of(listed.and_then(|k| results.failure(k)))
                })
                .collect();
            assert_eq!(planned, filter(), "{what}: failing-nodes plan vs filter");
            planned
        }
    }
}

/// What `P`, configured by the case, answers for its pod over its nodes; panics when two paths of
/// the plugin disagree (see the module documentation).
pub fn answers<P: Exported>(case: &Case) -> Answers {
    let mut driver = Driver::<P>::new(&case.config).unwrap_or_else(|e| {
        panic!(
            "{}: {}: the configuration is refused: {e}",
            P::NAME,
            case.name
        )
    });
    let ids = node_ids(case.nodes.len());
    driver.upsert_nodes(ids.iter().copied().zip(case.nodes.iter().cloned()));
    if P::READS_NAMESPACES {
        driver.upsert_namespaces(case.namespaces.iter().cloned());
    }
    if P::READS_VOLUMES {
        driver.upsert_volumes(case.volumes.iter().cloned());
    }
    if !P::READS_EXISTING_PODS.is_empty() {
        driver.upsert_pods(case.existing_pods(P::READS_EXISTING_PODS));
    }
    let pre_enqueue = match P::PRE_ENQUEUE {
        true => verdict_of(
            driver
                .pre_enqueue(&case.pod.pre_enqueued(P::READS_DEVICES))
                .as_ref(),
        ),
        false => pass(),
    };
    let seen = case.pod.with_parts(P::READS_POD);
    let what = |path: &str| format!("{}: {}: {path}", P::NAME, case.name);
    if P::PLAN_IGNORES_USAGE {
        // The promise: the plan for the pod on idle nodes is the plan on the case's nodes.
        let idle = ids.iter().map(|&id| (id, crate::NodeUsage::default()));
        driver.update_usage(idle.collect::<Vec<_>>());
        let on_idle_nodes = driver.set_pod(seen.clone());
        let usage = ids
            .iter()
            .copied()
            .zip(case.nodes.iter().map(|n| n.usage.clone()));
        driver.update_usage(usage.collect::<Vec<_>>());
        let plan = driver.set_pod(seen.clone());
        assert_eq!(
            on_idle_nodes,
            plan,
            "{}",
            what("PLAN_IGNORES_USAGE, but the plan changes with the nodes' usage")
        );
    }
    let plan = driver.set_pod(seen.clone());
    if idle_for::<P>(case) {
        assert!(
            matches!(plan.filter, FilterPlan::Skip) && !plan.score,
            "{}: {plan:?}",
            what("a pod without its IDLE_WITHOUT parts is not skipped")
        );
    }

    let verdicts = if P::FILTER {
        let batched = filter_answers(&mut driver, &ids, case, &seen, &what);
        verdicts_under_plan(&plan.filter, &ids, || batched, &what("plan"))
    } else {
        Vec::new()
    };
    let scores = if P::SCORE && plan.score {
        score_answers(&mut driver, case, &seen, &what)
    } else {
        Vec::new()
    };
    let reserved = match &case.reserve_on {
        Some((position, _)) => match driver.reserve(ids[*position]) {
            Ok(reservation) => reservation.claims,
            Err(failure) => panic!("{}: {failure:?}", what("reserve")),
        },
        None => Vec::new(),
    };
    let pod = &case.pod;
    let staged = if P::READS_GROUPS {
        pod.grouped()
    } else {
        pod.staged()
    };
    let stages = case.stages.clone();
    let driver = std::cell::RefCell::new(driver);
    let stages = stages.answered(
        || driver.borrow_mut().permit(&staged, "node"),
        || driver.borrow_mut().unreserve_rejects(&staged, "node"),
        || driver.borrow_mut().post_filter(&pod.grouped()),
        |queued| driver.borrow().queue_sort(&pod.grouped(), queued),
    );
    Answers {
        plan,
        verdicts,
        scores,
        pre_enqueue,
        reserved,
        stages,
    }
}

/// Whether the host would leave the plugin out of `case`'s cycle, by [`Plugin::IDLE_WITHOUT`]
/// (the parts a plugin does not read are empty in the pod it is sent, so only the parts it reads
/// count).
fn idle_for<P: Exported>(case: &Case) -> bool {
    let placed_affinity = case
        .existing
        .iter()
        .any(|(_, p)| !p.pod_affinity.is_empty());
    IdleWhen::declared(P::IDLE_WITHOUT, P::READS_EXISTING_PODS)
        .is_some_and(|idle| idle.holds(&case.pod, placed_affinity))
}

/// The filter's verdicts on every node of `case`, in two batches, checked against the plugin's
/// one-node filter.
fn filter_answers<P: Exported>(
    driver: &mut Driver<P>,
    ids: &[NodeId],
    case: &Case,
    seen: &Pod,
    what: &dyn Fn(&str) -> String,
) -> Vec<Expected> {
    let mut results = FilterResults::default();
    let split = ids.len() / 2;
    driver.filter(&ids[..split], &mut results);
    driver.filter(&ids[split..], &mut results);
    let batched: Vec<Expected> = (0..ids.len())
        .map(|i| verdict_of(results.failure(i)))
        .collect();
    let one_by_one: Vec<Expected> = case
        .nodes
        .iter()
        .map(|node| match driver.plugin().filter_one(seen, node) {
            Ok(()) => None,
            Err(f) => verdict_of(Some(&f)),
        })
        .collect();
    assert_eq!(batched, one_by_one, "{}", what("filter_batch vs filter"));
    batched
}

/// The normalized scores of the nodes `case` scores, batched as the host batches them, checked
/// against the plugin's one-node score and the 0..=100 range.
fn score_answers<P: Exported>(
    driver: &mut Driver<P>,
    case: &Case,
    seen: &Pod,
    what: &dyn Fn(&str) -> String,
) -> Vec<i64> {
    let mut scores = Vec::new();
    let scored = case.scored_ids();
    // As the host does: a plugin normalizing its own scores gets every feasible node at once.
    if matches!(P::NORMALIZE, Normalize::Custom | Normalize::InScore) {
        driver.score(&scored, &mut scores);
    } else {
        let split = scored.len() / 2;
        driver.score(&scored[..split], &mut scores);
        driver.score(&scored[split..], &mut scores);
    }
    let one_by_one: Vec<i64> = scored
        .iter()
        .map(|&id| {
            let node = driver.nodes().get(id).expect("a node of the row");
            driver.plugin().score_one(seen, node)
        })
        .collect();
    assert_eq!(scores, one_by_one, "{}", what("score_batch vs score"));
    match P::NORMALIZE {
        Normalize::None | Normalize::InScore => {}
        Normalize::Scale => default_normalize(&mut scores, false),
        Normalize::Reverse => default_normalize(&mut scores, true),
        Normalize::Custom => driver.normalize(&mut scores),
    }
    assert!(
        scores
            .iter()
            .all(|s| (0..=crate::helpers::MAX_NODE_SCORE).contains(s)),
        "{}: {scores:?}",
        what("normalized scores outside 0..=100")
    );
    scores
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FilterPlugin, Nodes, Plugin, ScorePlugin, Verdict};

    /// Fails nodes named `bad` and scores by name length; its batch, its plan and its scores can
    /// be told to go wrong.
    struct Liar {
        batch_lies: bool,
        plan_lies: bool,
        scores_too_high: bool,
    }

    impl Plugin for Liar {
        const NAME: &'static str = "Liar";
        fn new(config: &str) -> Result<Self, String> {
            Ok(Liar {
                batch_lies: config.contains("batch"),
                plan_lies: config.contains("plan"),
                scores_too_high: config.contains("high"),
            })
        }
        fn prepare(&mut self, _pod: &Pod, nodes: &Nodes) -> PodPlan {
            let mut plan = PodPlan::default();
            if self.plan_lies {
                plan.filter = FilterPlan::FailingNodes {
                    nodes: node_ids(nodes.len()).into_iter().take(1).collect(),
                    results: FilterResults {
                        verdicts: vec![1],
                        failures: vec![Failure::unresolvable("bad")],
                    },
                };
            }
            plan
        }
    }

    impl FilterPlugin for Liar {
        fn filter(&self, _pod: &Pod, node: &NodeInfo) -> Verdict {
            match node.name.as_str() {
                "bad" => Err(Failure::unresolvable("bad")),
                _ => Ok(()),
            }
        }
        fn filter_batch(
            &mut self,
            pod: &Pod,
            nodes: &Nodes,
            ids: &[NodeId],
            out: &mut FilterResults,
        ) {
            for &id in ids {
                let verdict = self.filter(pod, nodes.get(id).expect("mirrored"));
                out.push(if self.batch_lies { Ok(()) } else { verdict });
            }
        }
    }

    impl ScorePlugin for Liar {
        fn score(&self, _pod: &Pod, node: &NodeInfo) -> i64 {
            let per_letter = if self.scores_too_high { 60 } else { 10 };
            node.name.len() as i64 * per_letter
        }
    }

    crate::export_plugin!(Liar: filter, score);

    fn case(config: &str) -> Case {
        Case::filter(
            "a good and a bad node",
            pod("p"),
            vec![node("ok"), node("bad")],
            vec![pass(), unresolvable("bad")],
        )
        .with_config(config)
    }

    #[test]
    #[should_panic(expected = "filter_batch vs filter")]
    fn a_batch_that_disagrees_with_filter_fails_the_test() {
        answers::<Liar>(&case("batch"));
    }

    #[test]
    #[should_panic(expected = "failing-nodes plan vs filter")]
    fn a_plan_that_names_the_wrong_nodes_fails_the_test() {
        answers::<Liar>(&case("plan"));
    }

    #[test]
    #[should_panic(expected = "normalized scores outside 0..=100")]
    fn scores_past_100_fail_the_test() {
        answers::<Liar>(&case("high"));
    }

    #[test]
    fn an_honest_plugin_answers_as_its_table_says() {
        let row = Case::score(
            "name lengths",
            pod("p"),
            vec![node("ok"), node("bad")],
            vec![20, 30],
        );
        check::<Liar>(&[case(""), row]);
    }

    #[test]
    #[should_panic(expected = "Liar: a good and a bad node: verdicts")]
    fn a_row_that_expects_otherwise_names_itself() {
        let mut wrong = case("");
        wrong.verdicts = Some(vec![pass(), pass()]);
        check::<Liar>(&[wrong]);
    }
}

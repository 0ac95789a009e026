//! DynamicResources' table: rows after kube-scheduler's `dynamicresources_test.go` (PreEnqueue,
//! PreFilter and Filter statuses) and the structured allocator's `allocator_test.go`
//! (`exactly` counts, `All`, `firstAvailable`, `matchAttribute`, admin access, devices other
//! claims hold, incomplete pools, CEL selectors and their errors). Each row runs natively here
//! and through the component in the host's end-to-end tests.

use wasched_sdk::testing::{fail, node, pass, pod, unresolvable, Case};
use wasched_sdk::{
    AllocationMode, AttributeValue, ClaimAllocated, ClaimAllocation, Code, Device,
    DeviceConstraint, DevicePool, DeviceRequest, DeviceResult, Failure, FilterPlan, NodeInfo,
    NodeSelectorRequirement, NodeSelectorTerm, Pod, PodClaim,
};

use crate::{REASON_CANNOT_ALLOCATE, REASON_IN_USE, REASON_NOT_AVAILABLE};

const DRIVER: &str = "gpu.example.com";
const CLASS: &str = "gpu.example.com";

fn gpu(name: &str, model: &str, memory: &str, pcie_root: &str) -> Device {
    Device {
        name: name.into(),
        attributes: vec![
            ("model".into(), AttributeValue::String(model.into())),
            (
                "resource.kubernetes.io/pcieRoot".into(),
                AttributeValue::String(pcie_root.into()),
            ),
            (
                "driverVersion".into(),
                AttributeValue::Version("1.2.3".into()),
            ),
        ],
        capacity: vec![("memory".into(), memory.into())],
        allocated: false,
    }
}

fn allocated(device: Device) -> Device {
    Device {
        allocated: true,
        ..device
    }
}

/// A node with one pool of `devices` named after the node.
fn gpu_node(name: &str, devices: Vec<Device>) -> NodeInfo {
    NodeInfo {
        device_pools: vec![DevicePool {
            driver: DRIVER.into(),
            name: name.into(),
            complete: true,
            devices,
        }],
        ..node(name)
    }
}

fn request(name: &str, count: u32) -> DeviceRequest {
    DeviceRequest {
        name: name.into(),
        class_name: CLASS.into(),
        class_found: true,
        class_selectors: vec![format!("device.driver == '{DRIVER}'")],
        mode: AllocationMode::ExactCount(count),
        ..DeviceRequest::default()
    }
}

fn selecting(mut request: DeviceRequest, expression: &str) -> DeviceRequest {
    request.selectors.push(expression.into());
    request
}

fn claim(name: &str, requests: Vec<DeviceRequest>) -> PodClaim {
    PodClaim {
        name: name.into(),
        claim_name: name.into(),
        found: true,
        requests,
        ..PodClaim::default()
    }
}

fn claiming(claims: Vec<PodClaim>) -> Pod {
    Pod {
        claims,
        ..pod("job")
    }
}

fn result(request: &str, node: &str, device: &str) -> DeviceResult {
    DeviceResult {
        request: request.into(),
        driver: DRIVER.into(),
        pool: node.into(),
        device: device.into(),
        admin_access: false,
    }
}

fn allocation(claim: &str, devices: Vec<DeviceResult>) -> ClaimAllocation {
    ClaimAllocation {
        claim: claim.into(),
        devices,
    }
}

fn error(message: &str) -> wasched_sdk::testing::Expected {
    fail(Code::Error, &[message])
}

/// The rows.
pub fn cases() -> Vec<Case> {
    let a100 = |n: &str| gpu(n, "a100", "40Gi", "pci0");
    let two_roots = gpu_node(
        "split",
        vec![
            gpu("g0", "a100", "40Gi", "pci0"),
            gpu("g1", "a100", "40Gi", "pci1"),
        ],
    );
    let one_root = gpu_node(
        "paired",
        vec![
            gpu("g0", "a100", "40Gi", "pci0"),
            gpu("g1", "a100", "40Gi", "pci0"),
        ],
    );
    let mut rows = vec![
        Case::filter("a pod without claims is not filtered", pod("web"), vec![node("plain")], vec![pass()])
            .with_plan(FilterPlan::Skip),
        Case::filter(
            "one device: a node with a free one, none, and one another claim holds",
            claiming(vec![claim("gpu", vec![request("gpu", 1)])]),
            vec![
                gpu_node("free", vec![a100("g0")]),
                node("none"),
                gpu_node("taken", vec![allocated(a100("g0"))]),
            ],
            vec![
                pass(),
                unresolvable(REASON_CANNOT_ALLOCATE),
                unresolvable(REASON_CANNOT_ALLOCATE),
            ],
        )
        .reserving(0, vec![allocation("gpu", vec![result("gpu", "free", "g0")])]),
        Case::filter(
            "a selector on the model and the memory",
            claiming(vec![claim(
                "gpu",
                vec![selecting(
                    request("gpu", 1),
                    "device.attributes['gpu.example.com'].model == 'h100' && device.capacity['gpu.example.com'].memory.compareTo(quantity('80Gi')) >= 0",
                )],
            )]),
            vec![
                gpu_node("small", vec![a100("g0")]),
                gpu_node("big", vec![a100("g0"), gpu("g1", "h100", "80Gi", "pci0")]),
            ],
            vec![unresolvable(REASON_CANNOT_ALLOCATE), pass()],
        )
        .reserving(1, vec![allocation("gpu", vec![result("gpu", "big", "g1")])]),
        Case::filter(
            "two devices on one PCIe root (matchAttribute)",
            claiming(vec![PodClaim {
                constraints: vec![DeviceConstraint {
                    requests: Vec::new(),
                    match_attribute: "resource.kubernetes.io/pcieRoot".into(),
                }],
                ..claim("pair", vec![request("gpus", 2)])
            }]),
            vec![two_roots.clone(), one_root.clone()],
            vec![unresolvable(REASON_CANNOT_ALLOCATE), pass()],
        )
        .reserving(
            1,
            vec![allocation(
                "pair",
                vec![result("gpus", "paired", "g0"), result("gpus", "paired", "g1")],
            )],
        ),
        Case::filter(
            "matchAttribute holds per node: pairs on different roots on two nodes",
            claiming(vec![PodClaim {
                constraints: vec![DeviceConstraint {
                    requests: Vec::new(),
                    match_attribute: "resource.kubernetes.io/pcieRoot".into(),
                }],
                ..claim("pair", vec![request("gpus", 2)])
            }]),
            vec![
                one_root.clone(),
                gpu_node(
                    "paired-on-pci1",
                    vec![
                        gpu("g0", "a100", "40Gi", "pci1"),
                        gpu("g1", "a100", "40Gi", "pci1"),
                    ],
                ),
            ],
            vec![pass(), pass()],
        ),
        Case::filter(
            "without the constraint two devices on two roots do",
            claiming(vec![claim("pair", vec![request("gpus", 2)])]),
            vec![two_roots.clone()],
            vec![pass()],
        ),
        Case::filter(
            "matchAttribute backtracks past a first device without a partner",
            claiming(vec![PodClaim {
                constraints: vec![DeviceConstraint {
                    requests: vec!["gpus".into()],
                    match_attribute: "resource.kubernetes.io/pcieRoot".into(),
                }],
                ..claim("pair", vec![request("gpus", 2)])
            }]),
            vec![gpu_node(
                "three",
                vec![
                    gpu("g0", "a100", "40Gi", "pci0"),
                    gpu("g1", "a100", "40Gi", "pci1"),
                    gpu("g2", "a100", "40Gi", "pci1"),
                ],
            )],
            vec![pass()],
        )
        .reserving(
            0,
            vec![allocation(
                "pair",
                vec![result("gpus", "three", "g1"), result("gpus", "three", "g2")],
            )],
        ),
        Case::filter(
            "two claims cannot take one device",
            claiming(vec![
                claim("first", vec![request("gpu", 1)]),
                claim("second", vec![request("gpu", 1)]),
            ]),
            vec![gpu_node("one", vec![a100("g0")]), one_root.clone()],
            vec![unresolvable(REASON_CANNOT_ALLOCATE), pass()],
        )
        .reserving(
            1,
            vec![
                allocation("first", vec![result("gpu", "paired", "g0")]),
                allocation("second", vec![result("gpu", "paired", "g1")]),
            ],
        ),
        Case::filter(
            "allocationMode All takes every matching device, and needs one",
            claiming(vec![claim(
                "all",
                vec![DeviceRequest {
                    mode: AllocationMode::All,
                    ..request("gpus", 0)
                }],
            )]),
            vec![one_root.clone(), node("none"), gpu_node("held", vec![allocated(a100("g0")), a100("g1")])],
            vec![
                pass(),
                unresolvable(REASON_CANNOT_ALLOCATE),
                unresolvable(REASON_CANNOT_ALLOCATE),
            ],
        )
        .reserving(
            0,
            vec![allocation(
                "all",
                vec![result("gpus", "paired", "g0"), result("gpus", "paired", "g1")],
            )],
        ),
        Case::filter(
            "All on an incomplete pool is an error, ExactCount skips the pool",
            claiming(vec![claim(
                "all",
                vec![DeviceRequest {
                    mode: AllocationMode::All,
                    ..request("gpus", 0)
                }],
            )]),
            vec![NodeInfo {
                device_pools: vec![DevicePool {
                    complete: false,
                    ..gpu_node("updating", vec![a100("g0")]).device_pools[0].clone()
                }],
                ..node("updating")
            }],
            vec![error(
                "claim default/all, request gpus: asks for all devices, but resource pool gpu.example.com/updating is currently being updated",
            )],
        ),
        Case::filter(
            "an incomplete pool's devices are not allocated",
            claiming(vec![claim("gpu", vec![request("gpu", 1)])]),
            vec![NodeInfo {
                device_pools: vec![DevicePool {
                    complete: false,
                    ..gpu_node("updating", vec![a100("g0")]).device_pools[0].clone()
                }],
                ..node("updating")
            }],
            vec![unresolvable(REASON_CANNOT_ALLOCATE)],
        ),
        Case::filter(
            "firstAvailable: the first sub-request that fits is allocated",
            claiming(vec![claim(
                "gpu",
                vec![DeviceRequest {
                    first_available: vec![
                        DeviceRequest {
                            name: "h100".into(),
                            ..selecting(
                                request("h100", 1),
                                "device.attributes['gpu.example.com'].model == 'h100'",
                            )
                        },
                        DeviceRequest {
                            name: "two-a100".into(),
                            ..request("two-a100", 2)
                        },
                    ],
                    ..DeviceRequest {
                        name: "gpu".into(),
                        ..DeviceRequest::default()
                    }
                }],
            )]),
            vec![one_root.clone(), gpu_node("single", vec![a100("g0")])],
            vec![pass(), unresolvable(REASON_CANNOT_ALLOCATE)],
        )
        .reserving(
            0,
            vec![allocation(
                "gpu",
                vec![
                    result("gpu/two-a100", "paired", "g0"),
                    result("gpu/two-a100", "paired", "g1"),
                ],
            )],
        ),
        Case::filter(
            "adminAccess takes a device another claim holds",
            claiming(vec![claim(
                "monitor",
                vec![DeviceRequest {
                    admin_access: true,
                    ..request("gpu", 1)
                }],
            )]),
            vec![gpu_node("taken", vec![allocated(a100("g0"))])],
            vec![pass()],
        )
        .reserving(
            0,
            vec![allocation(
                "monitor",
                vec![DeviceResult {
                    admin_access: true,
                    ..result("gpu", "taken", "g0")
                }],
            )],
        ),
        Case::filter(
            "the class's selectors apply too",
            claiming(vec![claim(
                "gpu",
                vec![DeviceRequest {
                    class_selectors: vec!["device.attributes['gpu.example.com'].model == 'h100'".into()],
                    ..request("gpu", 1)
                }],
            )]),
            vec![gpu_node("a100s", vec![a100("g0")])],
            vec![unresolvable(REASON_CANNOT_ALLOCATE)],
        ),
        Case::filter(
            "a selector failing at run time is an error naming the claim, selector and device",
            claiming(vec![claim(
                "gpu",
                vec![selecting(request("gpu", 1), "device.attributes['gpu.example.com'].vendor == 'x'")],
            )]),
            vec![gpu_node("n", vec![a100("g0")])],
            vec![error(
                "claim default/gpu: selector #0 on device gpu.example.com/n/g0: CEL runtime error: no such key: vendor",
            )],
        ),
        Case::filter(
            "a class selector that does not compile is an error naming the class",
            claiming(vec![claim(
                "gpu",
                vec![DeviceRequest {
                    class_selectors: vec!["device.driver ==".into()],
                    ..request("gpu", 1)
                }],
            )]),
            vec![gpu_node("n", vec![a100("g0")])],
            vec![error(&format!(
                "class gpu.example.com: selector #0: CEL compile error: {}",
                crate::cel_env::Selector::compile("device.driver ==")
                    .compile_error()
                    .unwrap_or_default()
            ))],
        ),
        Case::filter(
            "an allocated claim: only nodes its node selector names",
            claiming(vec![PodClaim {
                allocated: Some(ClaimAllocated {
                    node_selector: Some(vec![NodeSelectorTerm {
                        match_expressions: Vec::new(),
                        match_fields: vec![NodeSelectorRequirement {
                            key: "metadata.name".into(),
                            operator: "In".into(),
                            values: vec!["here".into()],
                        }],
                    }]),
                    reserved_for_pod: false,
                    reserved_count: 1,
                }),
                ..claim("shared", vec![request("gpu", 1)])
            }]),
            vec![node("here"), node("there")],
            vec![pass(), unresolvable(REASON_NOT_AVAILABLE)],
        )
        .reserving(0, Vec::new()),
        Case::filter(
            "an allocated claim reserved for as many pods as it can be",
            claiming(vec![PodClaim {
                allocated: Some(ClaimAllocated {
                    node_selector: None,
                    reserved_for_pod: false,
                    reserved_count: 256,
                }),
                ..claim("shared", vec![request("gpu", 1)])
            }]),
            vec![node("n")],
            Vec::new(),
        )
        .with_plan(FilterPlan::Reject(Failure::unresolvable(REASON_IN_USE))),
        Case::filter(
            "a request naming a class that does not exist",
            claiming(vec![claim(
                "gpu",
                vec![DeviceRequest {
                    class_found: false,
                    class_name: "missing".into(),
                    ..request("gpu", 1)
                }],
            )]),
            vec![gpu_node("n", vec![a100("g0")])],
            Vec::new(),
        )
        .with_plan(FilterPlan::Reject(Failure::unresolvable(
            "request gpu: device class missing does not exist",
        ))),
        Case::filter(
            "more devices than a claim can hold",
            claiming(vec![claim("many", vec![request("gpus", 33)])]),
            vec![gpu_node("n", vec![a100("g0")])],
            vec![error("claim default/many: number of requested devices 33 exceeds the claim limit of 32")],
        ),
    ];
    rows.extend(pre_enqueue_rows());
    rows
}

fn pre_enqueue_rows() -> Vec<Case> {
    let template = PodClaim {
        name: "gpu".into(),
        from_template: true,
        ..PodClaim::default()
    };
    vec![
        Case::pre_enqueue(
            "a template's claim not created yet keeps the pod out of the queue",
            claiming(vec![template.clone()]),
            unresolvable("pod \"default/job\": ResourceClaim not created yet"),
        ),
        Case::pre_enqueue(
            "a claim that does not exist",
            claiming(vec![PodClaim {
                found: false,
                ..claim("gone", Vec::new())
            }]),
            unresolvable("resourceclaim.resource.k8s.io \"gone\" not found"),
        ),
        Case::pre_enqueue(
            "a claim being deleted",
            claiming(vec![PodClaim {
                deleting: true,
                ..claim("old", Vec::new())
            }]),
            unresolvable("resourceclaim \"old\" is being deleted"),
        ),
        Case::pre_enqueue(
            "a template's claim made for another pod",
            claiming(vec![PodClaim {
                claim_name: "job-gpu-x".into(),
                found: true,
                owned_by_other: true,
                ..template
            }]),
            unresolvable(
                "ResourceClaim default/job-gpu-x was not created for pod default/job (pod is not owner)",
            ),
        ),
        Case::pre_enqueue(
            "claims that exist let the pod in",
            claiming(vec![claim("gpu", vec![request("gpu", 1)])]),
            pass(),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DynamicResources;

    #[test]
    fn kube_scheduler_rows() {
        wasched_sdk::testing::check::<DynamicResources>(&cases());
    }

    #[test]
    fn devices_alike_in_what_selectors_read_share_one_number_and_each_still_allocates() {
        use wasched_sdk::{Driver, FilterResults};
        let mut driver = Driver::<DynamicResources>::new("{}").unwrap();
        let h100s = selecting(
            request("gpu", 2),
            "device.attributes['gpu.example.com'].model == 'h100'",
        );
        // Forty nodes of two H100s each, in pools of their own, and one of a single H100 and an
        // A100: the H100s differ only in name and pool.
        let mut nodes: Vec<(u32, NodeInfo)> = (0..40)
            .map(|i| {
                let pool = vec![
                    gpu("gpu-0", "h100", "80Gi", "0"),
                    gpu("gpu-1", "h100", "80Gi", "0"),
                ];
                (i, gpu_node(&format!("n{i}"), pool))
            })
            .collect();
        let mixed = vec![
            gpu("gpu-0", "h100", "80Gi", "0"),
            gpu("gpu-1", "a100", "40Gi", "0"),
        ];
        nodes.push((40, gpu_node("mixed", mixed)));
        driver.upsert_nodes(nodes);
        assert_eq!(
            driver.plugin().devices.len(),
            2,
            "one number per kind of GPU"
        );
        driver.set_pod(claiming(vec![claim("gpus", vec![h100s])]));
        let ids: Vec<u32> = (0..=40).collect();
        let mut out = FilterResults::default();
        driver.filter(&ids, &mut out);
        let fits: Vec<bool> = (0..ids.len()).map(|k| out.failure(k).is_none()).collect();
        assert!(
            fits[..40].iter().all(|&f| f),
            "two H100s on each of the forty"
        );
        assert!(!fits[40], "one H100 is not two");
    }

    #[test]
    fn devices_of_nodes_long_gone_are_let_go_and_the_rest_still_allocate() {
        use wasched_sdk::{Driver, FilterResults};
        let mut driver = Driver::<DynamicResources>::new("{}").unwrap();
        let h100s = selecting(
            request("gpu", 2),
            "device.attributes['gpu.example.com'].model == 'h100'",
        );
        let job = claiming(vec![claim("gpus", vec![h100s])]);
        let h100 = |name: &str| gpu(name, "h100", "80Gi", "0");
        let a100 = |name: &str| gpu(name, "a100", "40Gi", "0");
        let fits = |driver: &mut Driver<DynamicResources>, ids: &[u32]| {
            driver.set_pod(job.clone());
            let mut out = FilterResults::default();
            driver.filter(ids, &mut out);
            (0..ids.len())
                .map(|k| out.failure(k).is_none())
                .collect::<Vec<_>>()
        };
        // The first devices numbered are A100s, and what they matched is remembered by number.
        let first = vec![a100("gpu-0"), a100("gpu-1"), a100("gpu-2")];
        driver.upsert_nodes([(1, gpu_node("first", first))]);
        assert_eq!(fits(&mut driver, &[1]), [false]);
        driver.upsert_nodes([(0, gpu_node("stays", vec![h100("gpu-0"), h100("gpu-1")]))]);
        // Node id 1 is given to a new node, with a pool of its own, again and again; its GPU
        // differs from every other (its PCIe root), so it is numbered anew.
        for i in 0..3_000 {
            let own = gpu("gpu-0", "a100", "40Gi", &format!("pci-{i}"));
            driver.upsert_nodes([(1, gpu_node(&format!("n{i}"), vec![own]))]);
            driver.set_pod(job.clone());
        }
        let devices = driver.plugin().devices.len();
        assert!(
            devices <= 2 * 3 + 1024 + 1,
            "{devices} devices kept for 3 published"
        );
        // Renumbered, the H100s that stayed took numbers the A100s matched under.
        driver.upsert_nodes([(1, gpu_node("last", vec![h100("gpu-0"), h100("gpu-1")]))]);
        assert_eq!(fits(&mut driver, &[0, 1]), [true, true]);
        driver.upsert_nodes([(1, gpu_node("a100s", vec![a100("gpu-0"), a100("gpu-1")]))]);
        assert_eq!(
            fits(&mut driver, &[0, 1]),
            [true, false],
            "an A100 is no H100"
        );
    }

    #[test]
    fn a_node_sent_again_is_matched_as_its_devices_now_are() {
        use wasched_sdk::{Driver, FilterResults};
        let mut driver = Driver::<DynamicResources>::new("{}").unwrap();
        let h100 = selecting(
            request("gpu", 1),
            "device.attributes['gpu.example.com'].model == 'h100'",
        );
        let job = claiming(vec![claim("gpu", vec![h100])]);
        let fits = |driver: &mut Driver<DynamicResources>, devices: Vec<Device>| {
            driver.upsert_nodes([(0, gpu_node("n0", devices))]);
            driver.set_pod(job.clone());
            let mut out = FilterResults::default();
            driver.filter(&[0], &mut out);
            out.failure(0).is_none()
        };
        let allocated = |mut device: Device| {
            device.allocated = true;
            device
        };
        assert!(!fits(&mut driver, vec![gpu("gpu-0", "a100", "40Gi", "0")]));
        // The same device name and place, another model: numbered as what it is now.
        assert!(fits(&mut driver, vec![gpu("gpu-0", "h100", "80Gi", "0")]));
        let h100 = || gpu("gpu-0", "h100", "80Gi", "0");
        assert!(!fits(&mut driver, vec![allocated(h100())]), "taken");
        assert!(fits(&mut driver, vec![h100()]), "freed");
        assert!(!fits(&mut driver, vec![gpu("gpu-0", "a100", "80Gi", "0")]));
    }

    #[test]
    fn answers_held_for_one_pods_claims_serve_only_pods_whose_claims_search_alike() {
        use wasched_sdk::{Driver, FilterResults};
        let mut driver = Driver::<DynamicResources>::new("{}").unwrap();
        let h100 = |count| {
            selecting(
                request("gpu", count),
                "device.attributes['gpu.example.com'].model == 'h100'",
            )
        };
        let same_root = |claim: PodClaim| PodClaim {
            constraints: vec![DeviceConstraint {
                requests: Vec::new(),
                match_attribute: "resource.kubernetes.io/pcieRoot".into(),
            }],
            ..claim
        };
        // Two H100s on two PCIe roots, one H100, one A100.
        driver.upsert_nodes([
            (
                0,
                gpu_node(
                    "two",
                    vec![
                        gpu("g0", "h100", "80Gi", "0"),
                        gpu("g1", "h100", "80Gi", "1"),
                    ],
                ),
            ),
            (1, gpu_node("one", vec![gpu("g0", "h100", "80Gi", "0")])),
            (2, gpu_node("a100", vec![gpu("g0", "a100", "40Gi", "0")])),
        ]);
        let fits = |driver: &mut Driver<DynamicResources>, claim: PodClaim| {
            driver.set_pod(claiming(vec![claim]));
            let mut out = FilterResults::default();
            driver.filter(&[0, 1, 2], &mut out);
            (0..3)
                .map(|k| match out.failure(k) {
                    None => "fits".to_string(),
                    Some(failure) => failure.reasons.join("; "),
                })
                .collect::<Vec<_>>()
        };
        let cannot = REASON_CANNOT_ALLOCATE;
        assert_eq!(
            fits(&mut driver, claim("a", vec![h100(1)])),
            ["fits", "fits", cannot]
        );
        // Another pod's claim asking the same: the answers stand, whatever its name.
        driver.set_pod(claiming(vec![claim("b", vec![h100(1)])]));
        assert_eq!(
            driver.plugin().answers.get(1),
            Some(true),
            "held for the claim's like"
        );
        assert_eq!(
            fits(&mut driver, claim("b", vec![h100(1)])),
            ["fits", "fits", cannot]
        );
        // Each differing part of a search is one the answers are not for.
        assert_eq!(
            fits(&mut driver, claim("c", vec![h100(2)])),
            ["fits", cannot, cannot]
        );
        assert_eq!(
            fits(&mut driver, same_root(claim("d", vec![h100(2)]))),
            [cannot, cannot, cannot],
            "no two H100s share a root"
        );
        assert_eq!(
            fits(&mut driver, claim("e", vec![request("gpu", 1)])),
            ["fits", "fits", "fits"],
            "any GPU"
        );
        // Errors name the claim they are for, so none is held.
        let failing = |name: &str| {
            claim(
                name,
                vec![selecting(
                    request("gpu", 1),
                    "device.attributes['gpu.example.com'].vendor == 'x'",
                )],
            )
        };
        for name in ["f", "g"] {
            let answers = fits(&mut driver, failing(name));
            assert!(
                answers
                    .iter()
                    .all(|a| a.starts_with(&format!("claim default/{name}: selector #0"))),
                "{answers:?}"
            );
        }
    }

    #[test]
    fn a_long_lived_instance_filters_as_a_fresh_look_at_each_node_would() {
        use wasched_sdk::{Driver, FilterPlugin, FilterResults};
        let mut driver = Driver::<DynamicResources>::new("{}").unwrap();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut below = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let mut nodes: Vec<NodeInfo> = Vec::new();
        let random_node = |name: String, below: &mut dyn FnMut(u64) -> u64| {
            let devices = (0..4)
                .map(|d| {
                    let model = ["a100", "h100"][below(2) as usize];
                    let device = gpu(&format!("g{d}"), model, "80Gi", &below(2).to_string());
                    if below(3) == 0 {
                        allocated(device)
                    } else {
                        device
                    }
                })
                .collect();
            gpu_node(&name, devices)
        };
        for i in 0..24 {
            nodes.push(random_node(format!("n{i}"), &mut below));
        }
        driver.upsert_nodes(
            nodes
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, n)| (i as u32, n)),
        );
        let ids: Vec<u32> = (0..nodes.len() as u32).collect();
        for step in 0..600 {
            // A few nodes' devices taken, freed or swapped between pods, as placements do.
            for _ in 0..below(3) {
                let i = below(nodes.len() as u64) as usize;
                nodes[i] = random_node(format!("n{i}"), &mut below);
                driver.upsert_nodes([(i as u32, nodes[i].clone())]);
            }
            let mut request = request("gpu", 1 + below(3) as u32);
            if below(2) == 0 {
                request = selecting(
                    request,
                    "device.attributes['gpu.example.com'].model == 'h100'",
                );
            }
            let mut claim = claim(&format!("claim-{step}"), vec![request]);
            if below(2) == 0 {
                claim.constraints.push(DeviceConstraint {
                    requests: Vec::new(),
                    match_attribute: "resource.kubernetes.io/pcieRoot".into(),
                });
            }
            let pod = claiming(vec![claim]);
            driver.set_pod(pod.clone());
            let mut out = FilterResults::default();
            driver.filter(&ids, &mut out);
            for (k, node) in nodes.iter().enumerate() {
                let fresh = driver.plugin().filter(&pod, node).err();
                assert_eq!(out.failure(k), fresh.as_ref(), "step {step}, node {k}");
            }
        }
    }
}

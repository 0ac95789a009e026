//! Pod volumes and PersistentVolume sources as VolumeRestrictions and NodeVolumeLimits read
//! them, and CSINodes.

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use wasched_sdk as sdk;

/// A volume of one of the in-tree plugins kube-scheduler's storage plugins know, named by
/// `handle`.
fn in_tree(plugin: &str, handle: &str, read_only: Option<bool>) -> sdk::PodVolume {
    sdk::PodVolume {
        plugin: plugin.to_string(),
        handle: handle.to_string(),
        read_only: read_only.unwrap_or(false),
        ..sdk::PodVolume::default()
    }
}

/// The API server's default RBD pool.
const DEFAULT_RBD_POOL: &str = "rbd";

fn rbd(
    monitors: &[String],
    pool: Option<&String>,
    image: &str,
    read_only: Option<bool>,
) -> sdk::PodVolume {
    sdk::PodVolume {
        monitors: monitors.to_vec(),
        pool: pool.map_or(DEFAULT_RBD_POOL, String::as_str).to_string(),
        ..in_tree("kubernetes.io/rbd", image, read_only)
    }
}

/// The source of an inline volume (`spec.volumes[]`); the default (no plugin) for every source
/// neither plugin counts, inline CSI volumes among them.
fn inline_source(v: &core::Volume) -> sdk::PodVolume {
    if let Some(s) = &v.gce_persistent_disk {
        in_tree("kubernetes.io/gce-pd", &s.pd_name, s.read_only)
    } else if let Some(s) = &v.aws_elastic_block_store {
        in_tree("kubernetes.io/aws-ebs", &s.volume_id, s.read_only)
    } else if let Some(s) = &v.azure_disk {
        in_tree("kubernetes.io/azure-disk", &s.disk_uri, s.read_only)
    } else if let Some(s) = &v.cinder {
        in_tree("kubernetes.io/cinder", &s.volume_id, s.read_only)
    } else if let Some(s) = &v.portworx_volume {
        in_tree("kubernetes.io/portworx-volume", &s.volume_id, s.read_only)
    } else if let Some(s) = &v.rbd {
        rbd(&s.monitors, s.pool.as_ref(), &s.image, s.read_only)
    } else if let Some(s) = &v.iscsi {
        in_tree("kubernetes.io/iscsi", &s.iqn, s.read_only)
    } else {
        sdk::PodVolume::default()
    }
}

/// A PersistentVolume's source, in the fields of a [`sdk::PodVolume`] that describe one.
pub fn persistent_volume_source(pv: &core::PersistentVolume) -> sdk::PodVolume {
    let Some(spec) = &pv.spec else {
        return sdk::PodVolume::default();
    };
    if let Some(s) = &spec.csi {
        sdk::PodVolume {
            driver: s.driver.clone(),
            ..in_tree(sdk::CSI_PLUGIN, &s.volume_handle, s.read_only)
        }
    } else if let Some(s) = &spec.gce_persistent_disk {
        in_tree("kubernetes.io/gce-pd", &s.pd_name, s.read_only)
    } else if let Some(s) = &spec.aws_elastic_block_store {
        in_tree("kubernetes.io/aws-ebs", &s.volume_id, s.read_only)
    } else if let Some(s) = &spec.azure_disk {
        in_tree("kubernetes.io/azure-disk", &s.disk_uri, s.read_only)
    } else if let Some(s) = &spec.cinder {
        in_tree("kubernetes.io/cinder", &s.volume_id, s.read_only)
    } else if let Some(s) = &spec.portworx_volume {
        in_tree("kubernetes.io/portworx-volume", &s.volume_id, s.read_only)
    } else if let Some(s) = &spec.rbd {
        rbd(&s.monitors, s.pool.as_ref(), &s.image, s.read_only)
    } else if let Some(s) = &spec.iscsi {
        in_tree("kubernetes.io/iscsi", &s.iqn, s.read_only)
    } else {
        sdk::PodVolume::default()
    }
}

/// The pod's volumes with their inline sources; claims (named as the pod and the ephemeral
/// volume controller name them) are looked up by the cache.
pub fn pod_volumes(pod: &core::Pod, spec: &core::PodSpec) -> Vec<sdk::PodVolume> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    spec.volumes
        .iter()
        .flatten()
        .map(|v| {
            let (claim_name, ephemeral) = if let Some(c) = &v.persistent_volume_claim {
                (c.claim_name.clone(), false)
            } else if v.ephemeral.is_some() {
                (format!("{pod_name}-{}", v.name), true)
            } else {
                (String::new(), false)
            };
            let source = if claim_name.is_empty() {
                inline_source(v)
            } else {
                sdk::PodVolume::default()
            };
            sdk::PodVolume {
                name: v.name.clone(),
                claim_name,
                ephemeral,
                ..source
            }
        })
        .collect()
}

/// A CSIDriver: its name and whether it publishes storage capacity (`spec.storageCapacity`).
pub fn csi_driver(driver: &storage::CSIDriver) -> (String, bool) {
    let name = driver.metadata.name.clone().unwrap_or_default();
    (name, driver.spec.storage_capacity == Some(true))
}

/// A CSIStorageCapacity: the class it is for and the room it offers.
pub fn storage_capacity(capacity: &storage::CSIStorageCapacity) -> (String, sdk::StorageCapacity) {
    let bytes = |q: &Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.as_ref().and_then(|q| super::quantity::value(&q.0).ok())
    };
    let limit = bytes(&capacity.maximum_volume_size).or_else(|| bytes(&capacity.capacity));
    let node_topology = capacity.node_topology.as_ref().map(super::label_selector);
    (
        capacity.storage_class_name.clone(),
        sdk::StorageCapacity {
            node_topology,
            limit,
        },
    )
}

/// A CSINode: the node it describes (its name) and what it says.
pub fn csi_node(csi_node: &storage::CSINode) -> (String, sdk::CsiNode) {
    let name = csi_node.metadata.name.clone().unwrap_or_default();
    let drivers = csi_node
        .spec
        .drivers
        .iter()
        .map(|d| sdk::CsiDriverLimit {
            name: d.name.clone(),
            count: d.allocatable.as_ref().and_then(|a| a.count),
        })
        .collect();
    (name, sdk::CsiNode { drivers })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        yaml_serde::from_str(text).unwrap()
    }

    #[test]
    fn inline_disks_and_claims_are_read_as_the_storage_plugins_need_them() {
        let pod: core::Pod = from_yaml(
            "metadata: {name: web-0}
spec:
  containers: []
  volumes:
  - {name: pd, gcePersistentDisk: {pdName: disk-1, readOnly: true}}
  - {name: ebs, awsElasticBlockStore: {volumeID: 'aws://us-east-1a/vol-1'}}
  - {name: ceph, rbd: {monitors: [m1, m2], image: img}}
  - {name: data, persistentVolumeClaim: {claimName: data-web-0}}
  - {name: scratch, ephemeral: {volumeClaimTemplate: {spec: {}}}}
  - {name: tmp, emptyDir: {}}
",
        );
        let volumes = pod_volumes(&pod, pod.spec.as_ref().unwrap());
        let described: Vec<_> = volumes
            .iter()
            .map(|v| {
                (
                    v.name.as_str(),
                    v.claim_name.as_str(),
                    v.ephemeral,
                    v.plugin.as_str(),
                    v.handle.as_str(),
                    v.pool.as_str(),
                    v.read_only,
                )
            })
            .collect();
        assert_eq!(
            described,
            [
                ("pd", "", false, "kubernetes.io/gce-pd", "disk-1", "", true),
                (
                    "ebs",
                    "",
                    false,
                    "kubernetes.io/aws-ebs",
                    "aws://us-east-1a/vol-1",
                    "",
                    false
                ),
                ("ceph", "", false, "kubernetes.io/rbd", "img", "rbd", false),
                ("data", "data-web-0", false, "", "", "", false),
                ("scratch", "web-0-scratch", true, "", "", "", false),
                ("tmp", "", false, "", "", "", false),
            ]
        );
        assert_eq!(volumes[2].monitors, ["m1", "m2"]);
    }

    #[test]
    fn a_storage_capacity_offers_its_maximum_volume_size_else_its_capacity() {
        let capacity: storage::CSIStorageCapacity = from_yaml(
            "metadata: {name: c1, namespace: kube-system}
storageClassName: fast
capacity: 100Gi
maximumVolumeSize: 10Gi
nodeTopology: {matchLabels: {zone: a}}
",
        );
        let (class, offered) = storage_capacity(&capacity);
        assert_eq!(class, "fast");
        assert_eq!(offered.limit, Some(10 << 30));
        assert!(offered.node_topology.is_some());
        let only_capacity: storage::CSIStorageCapacity =
            from_yaml("metadata: {name: c2}\nstorageClassName: fast\ncapacity: 1Gi\n");
        let (_, offered) = storage_capacity(&only_capacity);
        assert_eq!(
            (offered.limit, offered.node_topology),
            (Some(1 << 30), None)
        );
    }

    #[test]
    fn a_csi_volume_names_its_driver_and_handle_and_a_csi_node_its_limits() {
        let pv: core::PersistentVolume = from_yaml(
            "metadata: {name: pv-1}
spec: {csi: {driver: ebs.csi.aws.com, volumeHandle: vol-9}}
",
        );
        let source = persistent_volume_source(&pv);
        assert_eq!(
            (
                source.plugin.as_str(),
                source.driver.as_str(),
                source.handle.as_str()
            ),
            (sdk::CSI_PLUGIN, "ebs.csi.aws.com", "vol-9")
        );
        let node: storage::CSINode = from_yaml(
            "metadata: {name: n1}
spec:
  drivers:
  - {name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 25}}
  - {name: other.csi.example.com, nodeID: i-1}
",
        );
        let (name, csi) = csi_node(&node);
        assert_eq!(name, "n1");
        assert_eq!(
            csi.drivers,
            [
                sdk::CsiDriverLimit {
                    name: "ebs.csi.aws.com".into(),
                    count: Some(25)
                },
                sdk::CsiDriverLimit {
                    name: "other.csi.example.com".into(),
                    count: None
                }
            ]
        );
    }
}

//! The cache's storage half: PersistentVolumes, claims and StorageClasses (with what
//! reservations assumed of them), the CSI objects (CSINodes, CSIDrivers, CSIStorageCapacities),
//! and a pod's volumes looked up from them.

use super::*;

impl Cache {
    /// Adds or replaces a claim. A newer claim from the cluster replaces what a reservation
    /// assumed of it, as kube-scheduler's assume cache does.
    pub fn upsert_claim(&mut self, claim: core::PersistentVolumeClaim) {
        let key = (
            claim
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            claim.metadata.name.clone().unwrap_or_default(),
        );
        self.reserved.claims.remove(&key);
        self.claims.insert(key, crate::k8s::claim_info(&claim));
    }

    /// Adds or replaces a volume; a newer volume replaces what a reservation assumed of it.
    pub fn upsert_volume(&mut self, volume: core::PersistentVolume) {
        let name = volume.metadata.name.clone().unwrap_or_default();
        self.remove_volume(&name);
        let info = crate::k8s::volume_info(&volume);
        self.volumes_by_class
            .entry(info.storage_class_name.clone())
            .or_default()
            .insert(name.clone());
        let source = crate::k8s::persistent_volume_source(&volume);
        self.volumes
            .insert(name.clone(), StoredVolume { info, source });
        self.volume_changed(&name);
    }

    /// Logs a change of volume `name` (what [`Cache::volume`] gives for it) for the plugins
    /// whose mirror holds volumes.
    fn volume_changed(&mut self, name: &str) {
        let id = match self.volume_ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.volume_names.len() as u32;
                self.volume_names.push(name.to_string());
                self.volume_ids.insert(name.to_string(), id);
                id
            }
        };
        self.log.push(Change::Volume(id));
    }

    /// Volume `id`: its name and, unless it was removed, the volume as the scheduler sees it.
    pub fn volume_entry(&self, id: u32) -> Option<(&str, Option<&sdk::VolumeInfo>)> {
        let name = self.volume_names.get(id as usize)?;
        Some((name.as_str(), self.volume(name)))
    }

    /// Every volume as the scheduler sees it (with what reservations assumed of them).
    pub fn all_volumes(&self) -> impl Iterator<Item = &sdk::VolumeInfo> + '_ {
        self.volumes.keys().filter_map(|name| self.volume(name))
    }

    /// The volumes of storage class `class` as the scheduler sees them, in name order.
    pub fn class_volumes(&self, class: &str) -> Vec<&sdk::VolumeInfo> {
        self.volumes_by_class
            .get(class)
            .into_iter()
            .flatten()
            .filter_map(|name| self.volume(name))
            .collect()
    }

    /// Adds or replaces a StorageClass.
    pub fn upsert_class(&mut self, class: StorageClass) {
        self.classes.insert(
            class.metadata.name.clone().unwrap_or_default(),
            crate::k8s::storage_class_info(&class),
        );
    }

    /// Removes a PersistentVolumeClaim; whether it was there.
    pub fn remove_claim(&mut self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        self.reserved.claims.remove(&key);
        self.claims.remove(&key).is_some()
    }

    /// Removes a PersistentVolume; whether it was there.
    pub fn remove_volume(&mut self, name: &str) -> bool {
        self.reserved.volumes.remove(name);
        let Some(old) = self.volumes.remove(name) else {
            return false;
        };
        let class = &old.info.storage_class_name;
        if let Some(names) = self.volumes_by_class.get_mut(class) {
            names.remove(name);
            if names.is_empty() {
                self.volumes_by_class.remove(class);
            }
        }
        self.volume_changed(name);
        true
    }

    /// Removes a StorageClass; whether it was there.
    pub fn remove_class(&mut self, name: &str) -> bool {
        self.classes.remove(name).is_some()
    }

    /// The volume `name` as the scheduler sees it: with what a reservation assumed of it.
    fn volume(&self, name: &str) -> Option<&sdk::VolumeInfo> {
        self.reserved
            .volumes
            .get(name)
            .or_else(|| self.volumes.get(name).map(|v| &v.info))
    }

    /// The claim `namespace/name` as the scheduler sees it: with what a reservation assumed of it.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&sdk::ClaimInfo> {
        let key = (namespace.to_string(), name.to_string());
        self.reserved
            .claims
            .get(&key)
            .or_else(|| self.claims.get(&key))
    }

    /// Holds the volumes chosen for `pod` (kube-scheduler's VolumeBinding Reserve): each
    /// statically matched volume is reserved for its claim (`claimRef`, as the binding will set
    /// it) and each claim to provision names the node (`volume.kubernetes.io/selected-node`).
    /// Later cycles see these until the cluster's newer objects arrive or
    /// [`Cache::unreserve_volumes`] gives them up.
    pub fn reserve_volumes(&mut self, pod: &sdk::Pod, node: &str, volumes: &PodVolumes) {
        let mut held = Reservation::default();
        for (claim_name, volume_name) in &volumes.static_bindings {
            let claim = self.claim(&pod.namespace, claim_name).cloned();
            let Some(mut volume) = self.volume(volume_name).cloned() else {
                continue;
            };
            volume.claim_ref = Some(sdk::ClaimRef {
                namespace: pod.namespace.clone(),
                name: claim_name.clone(),
                uid: claim.map(|c| c.uid).unwrap_or_default(),
            });
            self.reserved.volumes.insert(volume_name.clone(), volume);
            self.volume_changed(volume_name);
            held.volumes.push(volume_name.clone());
        }
        for claim_name in &volumes.provisions {
            let Some(mut claim) = self.claim(&pod.namespace, claim_name).cloned() else {
                continue;
            };
            claim.selected_node = Some(node.to_string());
            let key = (pod.namespace.clone(), claim_name.clone());
            self.reserved.claims.insert(key.clone(), claim);
            held.claims.push(key);
        }
        self.reserved.by_pod.insert(pod.key(), held);
    }

    /// Gives up what [`Cache::reserve_volumes`] held for pod `key` (its binding failed or
    /// expired); what the cluster changed since stays.
    pub fn unreserve_volumes(&mut self, key: &str) {
        let Some(held) = self.reserved.by_pod.remove(key) else {
            return;
        };
        for name in held.volumes {
            if self.reserved.volumes.remove(&name).is_some() {
                self.volume_changed(&name);
            }
        }
        for key in held.claims {
            self.reserved.claims.remove(&key);
        }
    }

    /// Forgets which pod held reservations that are now the cluster's (its binding was seen):
    /// the assumed objects stay until the cluster's own versions replace them.
    pub fn settle_volumes(&mut self, key: &str) {
        self.reserved.by_pod.remove(key);
    }

    /// Adds or replaces the CSINode of node `name`; the node, if known, changes with it.
    pub fn upsert_csi_node(&mut self, name: &str, csi_node: sdk::CsiNode) {
        self.csi_nodes.insert(name.to_string(), csi_node);
        self.csi_node_changed(name);
    }

    /// Removes the CSINode of node `name`; whether it was there.
    pub fn remove_csi_node(&mut self, name: &str) -> bool {
        let removed = self.csi_nodes.remove(name).is_some();
        self.csi_node_changed(name);
        removed
    }

    /// Adds or replaces a CSIDriver: whether it publishes storage capacity.
    pub fn upsert_csi_driver(&mut self, name: &str, capacity_tracked: bool) {
        self.csi_drivers.insert(name.to_string(), capacity_tracked);
    }

    /// Removes a CSIDriver; whether it was there.
    pub fn remove_csi_driver(&mut self, name: &str) -> bool {
        self.csi_drivers.remove(name).is_some()
    }

    /// Adds or replaces the CSIStorageCapacity `key` (namespace, name), for `class`.
    pub fn upsert_storage_capacity(
        &mut self,
        key: (String, String),
        class: String,
        offered: sdk::StorageCapacity,
    ) {
        self.capacities.insert(key, (class, offered));
    }

    /// Removes a CSIStorageCapacity; whether it was there.
    pub fn remove_storage_capacity(&mut self, namespace: &str, name: &str) -> bool {
        let key = (namespace.to_string(), name.to_string());
        self.capacities.remove(&key).is_some()
    }

    /// The CSIStorageCapacities of `class`, in namespace and name order.
    fn class_capacities(&self, class: &str) -> Vec<sdk::StorageCapacity> {
        let mut of_class: Vec<_> = self
            .capacities
            .iter()
            .filter(|(_, (c, _))| c == class)
            .collect();
        of_class.sort_by(|a, b| a.0.cmp(b.0));
        of_class
            .into_iter()
            .map(|(_, (_, offered))| offered.clone())
            .collect()
    }

    fn csi_node_changed(&mut self, name: &str) {
        let Some(entry) = self.by_name.get(name).and_then(|&id| self.node(id)) else {
            return;
        };
        let info = entry.info.clone();
        self.upsert_node(info);
    }

    /// `volumes` of a pod in `namespace` with their claims looked up: whether each exists, its
    /// access modes, and the source of the volume it is bound to or, unbound, its class's
    /// provisioner.
    pub fn resolved_volumes(
        &self,
        namespace: &str,
        volumes: &[sdk::PodVolume],
    ) -> Vec<sdk::PodVolume> {
        let mut resolved = volumes.to_vec();
        for volume in resolved.iter_mut().filter(|v| !v.claim_name.is_empty()) {
            let claim = self.claim(namespace, &volume.claim_name);
            *volume = sdk::PodVolume {
                name: std::mem::take(&mut volume.name),
                claim_name: std::mem::take(&mut volume.claim_name),
                ephemeral: volume.ephemeral,
                ..sdk::PodVolume::default()
            };
            let Some(claim) = claim else { continue };
            volume.claim_found = true;
            volume.access_modes.clone_from(&claim.access_modes);
            let bound_to = (!claim.volume_name.is_empty())
                .then(|| self.volumes.get(&claim.volume_name))
                .flatten();
            match bound_to {
                Some(stored) => {
                    let source = &stored.source;
                    volume.bound = true;
                    volume.plugin.clone_from(&source.plugin);
                    volume.driver.clone_from(&source.driver);
                    volume.handle.clone_from(&source.handle);
                    volume.monitors.clone_from(&source.monitors);
                    volume.pool.clone_from(&source.pool);
                    volume.read_only = source.read_only;
                }
                None => {
                    if let Some(class) = self.classes.get(&claim.storage_class_name) {
                        volume.provisioner.clone_from(&class.provisioner);
                        volume.capacity_tracked =
                            self.csi_drivers.get(&class.provisioner) == Some(&true);
                        if volume.capacity_tracked {
                            volume.capacities = self.class_capacities(&class.name);
                        }
                    }
                }
            }
        }
        resolved
    }

    /// Fills in each of the pod's volume claims from the claims, volumes and classes known now,
    /// with what reservations assumed of them.
    pub fn resolve_claims(&self, pod: &mut sdk::Pod) {
        self.resolve_device_claims(pod);
        if !pod.volumes.is_empty() {
            pod.volumes = self.resolved_volumes(&pod.namespace, &pod.volumes);
        }
        for volume_claim in &mut pod.volume_claims {
            volume_claim.claim =
                self.claim(&pod.namespace, &volume_claim.claim_name)
                    .map(|claim| {
                        let mut claim = claim.clone();
                        claim.storage_class = self.classes.get(&claim.storage_class_name).cloned();
                        claim.volume = self.volume(&claim.volume_name).cloned();
                        claim
                    });
        }
    }
}

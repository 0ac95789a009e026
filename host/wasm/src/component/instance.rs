//! One instance of a component: its store, the exports it is called through, the updates held
//! back for its next pod, the deadline of each call, and the checks on every answer.

use super::*;

pub(super) struct ComponentInstance {
    pub(super) store: Store<StoreState>,
    pub(super) exports: Exports,
    pub(super) descriptor: sdk::Descriptor,
    pub(super) call_ticks: u64,
    pub(super) ticker: Option<Arc<Ticker>>,
    pub(super) scratch_nodes: Vec<(u32, wit::NodeInfo)>,
    /// One past the highest node id sent: a bound on the mirror's size.
    pub(super) mirrored: usize,
    /// `apply-and-set-pod`, when the component exports [`BATCHED_INTERFACE`].
    pub(super) batched: Option<BatchedSetPod>,
    /// The exports of [`ENCODED_INTERFACE`], which the host prefers to `batched` and `set-pod`.
    pub(super) encoded: Option<EncodedExports>,
    /// The exports of [`STAGES_INTERFACE`], when the component has them.
    pub(super) stages: Option<StageExports>,
    /// `reserve` of [`RESERVE_INTERFACE`], when the component has it.
    pub(super) reserve: Option<ReserveFunc>,
    /// The exports of [`DEVICES_INTERFACE`], when the component has them and reads devices:
    /// PreEnqueue and Reserve go through them instead.
    pub(super) devices: Option<DevicesExports>,
    /// The exports of [`GROUPS_INTERFACE`], when the component has them and reads groups:
    /// Permit and Unreserve go through them instead.
    pub(super) groups: Option<GroupsExports>,
    /// The exports of [`USAGE_WITH_CALLS_INTERFACE`], when the component has them and its plans
    /// ignore usage: held updates then go with a filter or score call.
    pub(super) usage_with_calls: Option<UsageWithCallsExports>,
    /// The exports of [`PLAIN_PLANS_INTERFACE`], when the component has them and `encoded`: the
    /// pod then goes through `apply-and-plan` instead of `encoded.apply-and-set-pod`.
    pub(super) plain_plans: Option<PlainPlansExports>,
    /// The last plan was not a number: a plugin that lists nodes (cordoned ones, ones with a
    /// pod its pod keeps off) tends to again, and `apply-and-plan` then `last-plan` would be two
    /// calls where `encoded.apply-and-set-pod` is one, so the next pod goes that way.
    pub(super) plans_follow: bool,
    /// Pod and usage updates held back for the next `set-pod`: as bytes with `encoded`, as
    /// records with `batched`, none without either.
    pub(super) held: Option<Held>,
    /// The bytes of the last `encoded` call, kept for their allocation.
    pub(super) input: Vec<u8>,
    /// Calls made into the component.
    pub(super) calls: u64,
    /// The last plan came with word that every node scores 0 ([`ZERO_SCORES_INTERFACE`]).
    pub(super) scores_zero: bool,
    /// [`ComponentInstance::calls`] after the last plan, moved on by filter calls that sent
    /// nothing else: while it equals `calls`, the word of [`ComponentInstance::scores_zero`]
    /// holds, and `score` is answered without a call.
    pub(super) calls_at_plan: u64,
}

pub(super) fn trapped(call: &'static str, error: wasmtime::Error) -> CallError {
    let root = error.root_cause().to_string();
    let (kind, message) = match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => (
            FailureKind::Deadline,
            "deadline exceeded (the call ran too long)".to_string(),
        ),
        Some(trap) => (FailureKind::Trap, trap.to_string()),
        // StoreLimits refuses the growth and, with `trap_on_grow_failure`, fails the call.
        None if root.contains("growing memory") => (
            FailureKind::Memory,
            format!("memory limit exceeded ({root})"),
        ),
        None if root.contains("growing table") => (
            FailureKind::Memory,
            format!("table limit exceeded ({root})"),
        ),
        None => (FailureKind::Trap, format!("failed: {root}")),
    };
    CallError::of_kind(kind, call, message)
}

impl ComponentInstance {
    /// Sets the deadline of the next call, allowing for the nodes it handles.
    pub(super) fn arm(&mut self, nodes: usize) {
        self.arm_for(PER_NODE_ALLOWANCE * nodes as u32);
    }

    /// The 0.2.0 exports and the store, with the next call's deadline set; none for a 0.1.0
    /// component, which is never sent pods or namespaces (its descriptor reads neither).
    pub(super) fn current_armed(
        &mut self,
        allowance: Duration,
    ) -> Option<(&PluginWorld, &mut Store<StoreState>)> {
        self.arm_for(allowance);
        match &self.exports {
            Exports::Current(world) => Some((world, &mut self.store)),
            Exports::V01(_) => None,
        }
    }

    /// Sets the deadline of the next call: the call timeout plus `allowance`. Every call into the
    /// component is armed once.
    pub(super) fn arm_for(&mut self, allowance: Duration) {
        self.calls += 1;
        if let Some(ticker) = &self.ticker {
            let extra = allowance.as_micros() / EPOCH_TICK.as_micros();
            ticker.set_deadline(&mut self.store, self.call_ticks + extra as u64);
        }
    }
}

/// Calls export `$call` of either world version with the same arguments.
macro_rules! call {
    ($self:ident, $call:ident, $v01:ident, $($arg:expr),*) => {
        match &$self.exports {
            Exports::Current(world) => world.$call(&mut $self.store, $($arg),*),
            Exports::V01(exports) => exports.$v01(&mut $self.store, $($arg),*),
        }
    };
}

impl ComponentInstance {
    /// Sends the held-back updates: as bytes through `apply` to a component exporting
    /// [`ENCODED_INTERFACE`], otherwise through the plain exports.
    pub(super) fn send_held(&mut self) -> Result<(), CallError> {
        let Some(held) = &mut self.held else {
            return Ok(());
        };
        let count = held.count();
        if count == 0 {
            return Ok(());
        }
        match held {
            Held::Bytes(held) => {
                self.input.clear();
                held.write(&mut self.input);
                let encoded = self.encoded.expect("bytes are held only for `encoded`");
                self.arm_for(SYNC_PER_NODE_ALLOWANCE * count as u32);
                encoded
                    .apply()
                    .call(&mut self.store, (&self.input,))
                    .map_err(|e| trapped("apply", e))
            }
            Held::Records(held) => {
                let changes = held.take();
                if !changes.removed_pods.is_empty() {
                    self.send_removed_pods(&changes.removed_pods)?;
                }
                if !changes.upserted_pods.is_empty() {
                    self.send_upserted_pods(&changes.upserted_pods)?;
                }
                if !changes.usage.is_empty() {
                    self.send_usage(&changes.usage)?;
                }
                Ok(())
            }
        }
    }

    /// For a component that takes usage with its calls and has updates held: the held updates
    /// written into `input`, the next call armed for them and `nodes`, and the exports to call
    /// with them. None when nothing is held or the component takes them only through `apply`.
    pub(super) fn usage_with_call(&mut self, nodes: usize) -> Option<UsageWithCallsExports> {
        let usage = self.usage_with_calls?;
        let Some(Held::Bytes(held)) = &mut self.held else {
            return None;
        };
        let count = held.count();
        if count == 0 {
            return None;
        }
        self.input.clear();
        held.write(&mut self.input);
        self.arm_for(PER_NODE_ALLOWANCE * nodes as u32 + SYNC_PER_NODE_ALLOWANCE * count as u32);
        Some(usage)
    }

    /// Holds an update back if the component takes updates with its pods (`add` holds it),
    /// first sending what is held when `must_follow` says the update must come after it.
    /// False when the component takes each update at once.
    pub(super) fn hold(
        &mut self,
        must_follow: fn(&Held) -> bool,
        add: impl FnOnce(&mut Held),
    ) -> Result<bool, CallError> {
        let Some(held) = &self.held else {
            return Ok(false);
        };
        if must_follow(held) {
            self.send_held()?;
        }
        add(self.held.as_mut().expect("sending keeps the holding"));
        self.send_held_if_full()?;
        Ok(true)
    }

    /// `set-pod`, or `apply-and-set-pod` of `batched`, with the pod as a WIT record.
    pub(super) fn set_pod_lowered(
        &mut self,
        pod: &sdk::Pod,
        items: usize,
    ) -> Result<wit::PodPlan, CallError> {
        let sent = wit_pod(pod, self.descriptor.reads_pod);
        Ok(match (self.batched, &mut self.held) {
            (Some(batched), Some(Held::Records(held))) if !held.is_empty() => {
                let count = held.count();
                let changes = held.take();
                self.arm_for(
                    SET_POD_PER_ITEM_ALLOWANCE * items as u32
                        + SYNC_PER_NODE_ALLOWANCE * count as u32,
                );
                batched
                    .call(&mut self.store, (changes, sent))
                    .map(|(plan,)| plan)
                    .map_err(|e| trapped("apply-and-set-pod", e))?
            }
            _ => {
                self.arm_for(SET_POD_PER_ITEM_ALLOWANCE * items as u32);
                match &self.exports {
                    Exports::Current(world) => world.call_set_pod(&mut self.store, &sent),
                    Exports::V01(exports) => exports.set_pod(&mut self.store, sent),
                }
                .map_err(|e| trapped("set-pod", e))?
            }
        })
    }

    /// `plain-plans.apply-and-plan` of the bytes in `input` (armed already), and `last-plan`
    /// when the plan did not come back as a number.
    fn apply_and_plan(&mut self, plain: PlainPlansExports) -> Result<sdk::PodPlan, CallError> {
        let (apply_and_plan, scoring) = plain.apply_and_plan();
        let (number,) = apply_and_plan
            .call(&mut self.store, (&self.input,))
            .map_err(|e| trapped("apply-and-plan", e))?;
        let decoded = if scoring {
            wire::plan_of_scoring_number(number)
        } else {
            wire::plan_of_number(number).map(|plan| (plan, false))
        };
        match decoded {
            Ok((Some(plan), scores_zero)) => {
                self.scores_zero = scores_zero;
                self.calls_at_plan = self.calls;
                Ok(plan)
            }
            Ok((None, _)) => {
                self.plans_follow = true;
                self.arm_for(Duration::ZERO);
                let (plan,) = plain
                    .last_plan
                    .call(&mut self.store, ())
                    .map_err(|e| trapped("last-plan", e))?;
                check_plan(plan)
            }
            Err(message) => Err(CallError::new("apply-and-plan", message)),
        }
    }

    /// Sends what is held once there is a batch's worth.
    pub(super) fn send_held_if_full(&mut self) -> Result<(), CallError> {
        if self.held.as_ref().map_or(0, Held::count) >= MAX_HELD_CHANGES {
            self.send_held()?;
        }
        Ok(())
    }

    pub(super) fn send_usage(&mut self, usage: &[(u32, wit::NodeUsage)]) -> Result<(), CallError> {
        self.arm(usage.len());
        call!(self, call_update_usage, update_usage, usage).map_err(|e| trapped("update-usage", e))
    }

    pub(super) fn send_upserted_pods(
        &mut self,
        pods: &[(u32, wit::ExistingPod)],
    ) -> Result<(), CallError> {
        // Like nodes: a plugin may index what it is sent (counts per topology domain).
        let Some((world, store)) = self.current_armed(SYNC_PER_NODE_ALLOWANCE * pods.len() as u32)
        else {
            return Ok(());
        };
        world
            .call_upsert_pods(store, pods)
            .map_err(|e| trapped("upsert-pods", e))
    }

    pub(super) fn send_removed_pods(&mut self, ids: &[u32]) -> Result<(), CallError> {
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * ids.len() as u32) else {
            return Ok(());
        };
        world
            .call_remove_pods(store, ids)
            .map_err(|e| trapped("remove-pods", e))
    }
}

impl PluginInstance for ComponentInstance {
    fn descriptor(&self) -> &sdk::Descriptor {
        &self.descriptor
    }

    fn upsert_nodes(&mut self, nodes: &[(u32, &sdk::NodeInfo)]) -> Result<(), CallError> {
        self.send_held()?;
        let highest = nodes
            .iter()
            .map(|(id, _)| *id as usize + 1)
            .max()
            .unwrap_or(0);
        self.mirrored = self.mirrored.max(highest);
        self.arm_for(
            SYNC_PER_NODE_ALLOWANCE * nodes.len() as u32
                + SYNC_PER_MIRRORED_NODE_ALLOWANCE * self.mirrored as u32,
        );
        if let Some(encoded) = self.encoded {
            self.input.clear();
            let details = wire::NodeDetails::read_by(&self.descriptor);
            wire::write_nodes(&mut self.input, nodes, details);
            return encoded
                .upsert_nodes()
                .call(&mut self.store, (&self.input,))
                .map_err(|e| trapped("upsert-nodes", e));
        }
        let mut batch = std::mem::take(&mut self.scratch_nodes);
        batch.clear();
        batch.extend(nodes.iter().map(|(id, node)| (*id, node_info(node))));
        let result = call!(self, call_upsert_nodes, upsert_nodes, &batch);
        batch.clear();
        self.scratch_nodes = batch;
        result.map_err(|e| trapped("upsert-nodes", e))
    }

    fn remove_nodes(&mut self, ids: &[u32]) -> Result<(), CallError> {
        self.send_held()?;
        self.arm(ids.len());
        call!(self, call_remove_nodes, remove_nodes, ids).map_err(|e| trapped("remove-nodes", e))
    }

    fn update_usage(&mut self, usage: &[(u32, &sdk::NodeUsage)]) -> Result<(), CallError> {
        let held = self.hold(
            |_| false,
            |held| {
                for (id, u) in usage {
                    held.update_usage(*id, u);
                }
            },
        )?;
        if held {
            return Ok(());
        }
        let converted: Vec<(u32, wit::NodeUsage)> =
            usage.iter().map(|(id, u)| (*id, node_usage(u))).collect();
        self.send_usage(&converted)
    }

    fn upsert_pods(&mut self, pods: &[(u32, sdk::ExistingPod)]) -> Result<(), CallError> {
        let held = self.hold(Held::has_usage, |held| {
            for (id, p) in pods {
                held.upsert_pod(*id, p);
            }
        })?;
        if held {
            return Ok(());
        }
        let converted: Vec<(u32, wit::ExistingPod)> =
            pods.iter().map(|(id, p)| (*id, existing_pod(p))).collect();
        self.send_upserted_pods(&converted)
    }

    fn remove_pods(&mut self, ids: &[u32]) -> Result<(), CallError> {
        let held = self.hold(
            |held| held.has_upserts() || held.has_usage(),
            |held| {
                for &id in ids {
                    held.remove_pod(id);
                }
            },
        )?;
        if held {
            return Ok(());
        }
        self.send_removed_pods(ids)
    }

    fn upsert_namespaces(&mut self, namespaces: &[(&str, &sdk::Labels)]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * namespaces.len() as u32)
        else {
            return Ok(());
        };
        let converted: Vec<wit::NamespaceInfo> = namespaces
            .iter()
            .map(|(name, labels)| wit::NamespaceInfo {
                name: name.to_string(),
                labels: pairs(labels),
            })
            .collect();
        world
            .call_upsert_namespaces(store, &converted)
            .map_err(|e| trapped("upsert-namespaces", e))
    }

    fn remove_namespaces(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * names.len() as u32)
        else {
            return Ok(());
        };
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        world
            .call_remove_namespaces(store, &names)
            .map_err(|e| trapped("remove-namespaces", e))
    }

    fn upsert_volumes(&mut self, volumes: &[&sdk::VolumeInfo]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * volumes.len() as u32)
        else {
            return Ok(());
        };
        let converted: Vec<wit::VolumeInfo> = volumes.iter().map(|v| volume_info(v)).collect();
        world
            .call_upsert_volumes(store, &converted)
            .map_err(|e| trapped("upsert-volumes", e))
    }

    fn remove_volumes(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.send_held()?;
        let Some((world, store)) = self.current_armed(PER_NODE_ALLOWANCE * names.len() as u32)
        else {
            return Ok(());
        };
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        world
            .call_remove_volumes(store, &names)
            .map_err(|e| trapped("remove-volumes", e))
    }

    fn set_pod(&mut self, pod: &sdk::Pod) -> Result<sdk::PodPlan, CallError> {
        self.scores_zero = false;
        let items = pod_items(pod, self.descriptor.reads_pod);
        let plan = if let (Some(encoded), Some(Held::Bytes(held))) = (self.encoded, &mut self.held)
        {
            let count = held.count();
            self.input.clear();
            held.write(&mut self.input);
            wire::write_pod(&mut self.input, pod, self.descriptor.reads_pod);
            self.arm_for(
                SET_POD_PER_ITEM_ALLOWANCE * items as u32 + SYNC_PER_NODE_ALLOWANCE * count as u32,
            );
            match self.plain_plans {
                Some(plain) if !self.plans_follow => return self.apply_and_plan(plain),
                _ => encoded
                    .apply_and_set_pod()
                    .call(&mut self.store, (&self.input,))
                    .map(|(plan,)| plan)
                    .map_err(|e| trapped("apply-and-set-pod", e))?,
            }
        } else {
            self.set_pod_lowered(pod, items)?
        };
        let plan = check_plan(plan)?;
        self.plans_follow = wire::plain_plan(&plan) == wire::PLAN_FOLLOWS;
        Ok(plan)
    }

    fn filter(&mut self, ids: &[u32], out: &mut sdk::FilterResults) -> Result<(), CallError> {
        let before = self.calls;
        let results = match self.usage_with_call(ids.len()) {
            Some(usage) => usage
                .apply_and_filter()
                .call(&mut self.store, (&self.input, ids))
                .map(|(results,)| results)
                .map_err(|e| trapped("apply-and-filter", e))?,
            None => {
                self.send_held()?;
                self.arm(ids.len());
                let results =
                    call!(self, call_filter, filter, ids).map_err(|e| trapped("filter", e))?;
                // A filter call alone changes nothing the scores are worked out from.
                if self.calls_at_plan == before && self.calls == before + 1 {
                    self.calls_at_plan = self.calls;
                }
                results
            }
        };
        check_failures("filter", &results.failures, ids.len())?;
        let results = sdk::FilterResults {
            verdicts: results.verdicts,
            failures: results.failures.into_iter().map(failure).collect(),
        };
        results
            .check(ids.len())
            .map_err(|message| CallError::new("filter", message))?;
        out.append(results);
        Ok(())
    }

    fn score(&mut self, ids: &[u32], out: &mut Vec<i64>) -> Result<(), CallError> {
        if self.scores_zero && self.calls == self.calls_at_plan {
            out.resize(out.len() + ids.len(), 0);
            return Ok(());
        }
        let scores = match self.usage_with_call(ids.len()) {
            Some(usage) => usage
                .apply_and_score()
                .call(&mut self.store, (&self.input, ids))
                .map(|(scores,)| scores)
                .map_err(|e| trapped("apply-and-score", e))?,
            None => {
                self.send_held()?;
                self.arm(ids.len());
                call!(self, call_score, score, ids).map_err(|e| trapped("score", e))?
            }
        };
        check_len("score", scores.len(), ids.len())?;
        if out.is_empty() {
            *out = scores;
        } else {
            out.extend(scores);
        }
        Ok(())
    }

    fn pre_enqueue(&mut self, pod: &sdk::Pod) -> Result<Option<sdk::Failure>, CallError> {
        let answer = if let Some(devices) = self.devices {
            let parts = sdk::PodParts::IDENTITY
                | sdk::PodParts::LABELS
                | sdk::PodParts::ANNOTATIONS
                | sdk::PodParts::CLAIMS;
            self.input.clear();
            wire::write_pod(&mut self.input, pod, parts);
            self.arm_for(Duration::ZERO);
            let (answer,) = devices
                .pre_enqueue()
                .call(&mut self.store, (&self.input[..],))
                .map_err(|e| trapped("pre-enqueue", e))?;
            answer
        } else {
            let Some(stages) = self.stages else {
                return Ok(None);
            };
            self.arm_for(Duration::ZERO);
            let (answer,) = stages
                .pre_enqueue
                .call(&mut self.store, (staged_pod(pod),))
                .map_err(|e| trapped("pre-enqueue", e))?;
            answer
        };
        match answer {
            None => Ok(None),
            Some(f) => {
                check_failure("pre-enqueue", &f)?;
                Ok(Some(failure(f)))
            }
        }
    }

    fn permit(&mut self, pod: &sdk::Pod, node: &str) -> Result<PermitAnswer, CallError> {
        if let Some(groups) = self.groups {
            self.encode_grouped(pod);
            self.arm_for(Duration::ZERO);
            let (answer,) = groups
                .permit()
                .call(&mut self.store, (&self.input[..], node.to_string()))
                .map_err(|e| trapped("permit", e))?;
            let mut permit = permit_answer(answer.decision, answer.allow)?;
            permit.reject = rejections("permit", answer.reject)?;
            return Ok(permit);
        }
        let Some(stages) = self.stages else {
            return Ok(PermitAnswer::allow());
        };
        self.arm_for(Duration::ZERO);
        let (answer,) = stages
            .permit
            .call(&mut self.store, (staged_pod(pod), node.to_string()))
            .map_err(|e| trapped("permit", e))?;
        permit_answer(answer.decision, answer.allow)
    }

    fn unreserve_rejects(
        &mut self,
        pod: &sdk::Pod,
        node: &str,
    ) -> Result<Vec<sdk::Rejection>, CallError> {
        let Some(groups) = self.groups else {
            return self.unreserve(pod, node).map(|()| Vec::new());
        };
        self.encode_grouped(pod);
        self.arm_for(Duration::ZERO);
        let (rejected,) = groups
            .unreserve()
            .call(&mut self.store, (&self.input[..], node.to_string()))
            .map_err(|e| trapped("unreserve", e))?;
        rejections("unreserve", rejected)
    }

    fn post_filter(&mut self, pod: &sdk::Pod) -> Result<sdk::PostFilterAnswer, CallError> {
        let Some(groups) = self.groups else {
            return Ok(sdk::PostFilterAnswer::default());
        };
        self.encode_grouped(pod);
        self.arm_for(Duration::ZERO);
        let (answer,) = groups
            .post_filter()
            .call(&mut self.store, (&self.input[..],))
            .map_err(|e| trapped("post-filter", e))?;
        for reason in &answer.reasons {
            check_reason("post-filter", reason)?;
        }
        Ok(sdk::PostFilterAnswer {
            reasons: answer.reasons,
            reject: rejections("post-filter", answer.reject)?,
        })
    }

    fn queue_sort(
        &mut self,
        pod: &sdk::Pod,
        queued_millis: i64,
    ) -> Result<sdk::QueueKey, CallError> {
        let Some(groups) = self.groups else {
            return Ok(sdk::QueueKey {
                timestamp_millis: queued_millis,
                name: pod.key(),
            });
        };
        self.encode_grouped(pod);
        self.arm_for(Duration::ZERO);
        let (key,) = groups
            .queue_sort()
            .call(&mut self.store, (&self.input[..], queued_millis))
            .map_err(|e| trapped("queue-sort", e))?;
        Ok(sdk::QueueKey {
            timestamp_millis: key.timestamp_millis,
            name: key.name,
        })
    }

    fn reserve(&mut self, node: u32) -> Result<Result<sdk::Reservation, sdk::Failure>, CallError> {
        let (answer, claims) = if let Some(devices) = self.devices {
            self.send_held()?;
            self.arm_for(Duration::ZERO);
            let (answer,) = devices
                .reserve
                .call(&mut self.store, (node,))
                .map_err(|e| trapped("reserve", e))?;
            match answer {
                Ok((reservation, claims)) => (Ok(reservation), claim_allocations(claims)?),
                Err(f) => (Err(f), Vec::new()),
            }
        } else {
            let Some(reserve) = self.reserve else {
                return Ok(Ok(sdk::Reservation::default()));
            };
            self.send_held()?;
            self.arm_for(Duration::ZERO);
            let (answer,) = reserve
                .reserve
                .call(&mut self.store, (node,))
                .map_err(|e| trapped("reserve", e))?;
            (answer, Vec::new())
        };
        match answer {
            Ok(reservation) => {
                let listed = reservation.bind_volumes.len() + reservation.provision_volumes.len();
                if listed > MAX_LISTED_NODES {
                    return Err(CallError::new(
                        "reserve",
                        format!("reserved {listed} volumes, more than {MAX_LISTED_NODES}"),
                    ));
                }
                Ok(Ok(sdk::Reservation {
                    volumes: sdk::PodVolumes {
                        static_bindings: reservation
                            .bind_volumes
                            .into_iter()
                            .map(|b| (b.claim, b.volume))
                            .collect(),
                        provisions: reservation.provision_volumes,
                    },
                    claims,
                }))
            }
            Err(f) => {
                check_failure("reserve", &f)?;
                Ok(Err(failure(f)))
            }
        }
    }

    fn unreserve(&mut self, pod: &sdk::Pod, node: &str) -> Result<(), CallError> {
        let Some(stages) = self.stages else {
            return Ok(());
        };
        self.arm_for(Duration::ZERO);
        stages
            .unreserve
            .call(&mut self.store, (staged_pod(pod), node.to_string()))
            .map_err(|e| trapped("unreserve", e))
    }

    fn normalize(&mut self, scores: &mut Vec<i64>) -> Result<(), CallError> {
        self.send_held()?;
        self.arm(scores.len());
        let normalized =
            call!(self, call_normalize, normalize, scores).map_err(|e| trapped("normalize", e))?;
        check_len("normalize", normalized.len(), scores.len())?;
        *scores = normalized;
        Ok(())
    }
}

/// Refuses a plan that lists too many nodes or carries a malformed failure.
pub(super) fn check_plan(plan: wit::PodPlan) -> Result<sdk::PodPlan, CallError> {
    match &plan.filter {
        wit::FilterPlan::Reject(f) => check_failure("set-pod", f)?,
        wit::FilterPlan::OnlyNodes(names) if names.len() > MAX_LISTED_NODES => {
            return Err(CallError::new(
                "set-pod",
                format!("listed {} nodes, more than {MAX_LISTED_NODES}", names.len()),
            ))
        }
        wit::FilterPlan::FailingNodes(failing) => {
            if failing.nodes.len() > MAX_LISTED_NODES {
                return Err(CallError::new(
                    "set-pod",
                    format!(
                        "listed {} failing nodes, more than {MAX_LISTED_NODES}",
                        failing.nodes.len()
                    ),
                ));
            }
            check_failures("set-pod", &failing.failures, failing.nodes.len())?;
        }
        _ => {}
    }
    Ok(pod_plan(plan))
}

/// Refuses more distinct failures than the `nodes` they are for, or any failure
/// [`check_failure`] refuses.
pub(super) fn check_failures(
    call: &'static str,
    failures: &[wit::Failure],
    nodes: usize,
) -> Result<(), CallError> {
    if failures.len() > nodes {
        return Err(CallError::new(
            call,
            format!("returned {} failures for {nodes} nodes", failures.len()),
        ));
    }
    failures.iter().try_for_each(|f| check_failure(call, f))
}

/// Refuses failures with absurdly many or long reasons (they end up in pod statuses and logs).
pub(super) fn check_failure(call: &'static str, f: &wit::Failure) -> Result<(), CallError> {
    if f.reasons.len() > MAX_REASONS_PER_FAILURE {
        return Err(CallError::new(
            call,
            format!(
                "returned a failure with {} reasons, more than {MAX_REASONS_PER_FAILURE}",
                f.reasons.len()
            ),
        ));
    }
    f.reasons.iter().try_for_each(|r| check_reason(call, r))
}

/// Refuses a reason longer than [`MAX_REASON_BYTES`].
pub(super) fn check_reason(call: &'static str, reason: &str) -> Result<(), CallError> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(CallError::new(
            call,
            format!(
                "returned a {}-byte reason, longer than {MAX_REASON_BYTES}",
                reason.len()
            ),
        ));
    }
    Ok(())
}

/// The claims a `devices` Reserve allocated, checked: no more claims or devices than a
/// ResourceClaim can hold (kube's limits: 32 devices per allocation).
fn claim_allocations(
    claims: Vec<wit_devices::ClaimAllocation>,
) -> Result<Vec<sdk::ClaimAllocation>, CallError> {
    const MAX_CLAIMS: usize = 128;
    const MAX_DEVICES: usize = 32;
    if claims.len() > MAX_CLAIMS {
        return Err(CallError::new(
            "reserve",
            format!("allocated {} claims, more than {MAX_CLAIMS}", claims.len()),
        ));
    }
    claims
        .into_iter()
        .map(|claim| {
            if claim.devices.len() > MAX_DEVICES {
                return Err(CallError::new(
                    "reserve",
                    format!(
                        "allocated {} devices for claim {}, more than {MAX_DEVICES}",
                        claim.devices.len(),
                        claim.claim
                    ),
                ));
            }
            Ok(sdk::ClaimAllocation {
                claim: claim.claim,
                devices: claim
                    .devices
                    .into_iter()
                    .map(|d| sdk::DeviceResult {
                        request: d.request,
                        driver: d.driver,
                        pool: d.pool,
                        device: d.device,
                        admin_access: d.admin_access,
                    })
                    .collect(),
            })
        })
        .collect()
}

/// Permit's decision and the pods it lets go, checked.
fn permit_answer(
    decision: wit_stages::PermitDecision,
    allow: Vec<String>,
) -> Result<PermitAnswer, CallError> {
    let permit = match decision {
        wit_stages::PermitDecision::Allow => Permit::Allow,
        wit_stages::PermitDecision::Wait(millis) => Permit::Wait {
            timeout: Duration::from_millis(millis).min(MAX_PERMIT_WAIT),
        },
        wit_stages::PermitDecision::Reject(reason) => {
            check_reason("permit", &reason)?;
            Permit::Reject(reason)
        }
    };
    if allow.len() > MAX_LISTED_NODES {
        return Err(CallError::new(
            "permit",
            format!("allowed {} pods, more than {MAX_LISTED_NODES}", allow.len()),
        ));
    }
    Ok(PermitAnswer {
        permit,
        allow,
        reject: Vec::new(),
    })
}

/// The waiting pods a plugin rejects, checked.
fn rejections(
    call: &'static str,
    rejected: Vec<wit_groups::Rejection>,
) -> Result<Vec<sdk::Rejection>, CallError> {
    if rejected.len() > MAX_LISTED_NODES {
        return Err(CallError::new(
            call,
            format!(
                "rejected {} pods, more than {MAX_LISTED_NODES}",
                rejected.len()
            ),
        ));
    }
    rejected
        .into_iter()
        .map(|r| {
            check_reason(call, &r.message)?;
            Ok(sdk::Rejection {
                pod: r.pod,
                message: r.message,
            })
        })
        .collect()
}

impl ComponentInstance {
    /// Puts `pod` as the `groups` interface sends it into the input buffer.
    fn encode_grouped(&mut self, pod: &sdk::Pod) {
        let parts = sdk::PodParts::IDENTITY
            | sdk::PodParts::LABELS
            | sdk::PodParts::ANNOTATIONS
            | sdk::PodParts::GROUP;
        self.input.clear();
        wire::write_pod(&mut self.input, pod, parts);
    }
}

//! Plugins linked into the host: the SDK's [`Driver`] called directly, with the same node mirror
//! and batches as a component gets, so that native and WebAssembly runs differ only in the runtime.

use std::marker::PhantomData;

use wasched_sdk::{
    Descriptor, Driver, ExistingPod, Exported, Failure, FilterResults, Labels, NodeInfo, NodeUsage,
    Pod, PodPlan,
};

use super::{
    check_len, CallError, LoadError, PermitAnswer, PluginFactory, PluginInstance, PostFilterAnswer,
    QueueKey, Rejection, Reservation,
};

/// Makes native instances of plugin type `P`.
pub struct NativeFactory<P>(PhantomData<fn() -> P>);

impl<P> Default for NativeFactory<P> {
    fn default() -> Self {
        NativeFactory(PhantomData)
    }
}

impl<P: Exported + Send> PluginFactory for NativeFactory<P> {
    fn instantiate(&self, config: &str) -> Result<Box<dyn PluginInstance>, LoadError> {
        let driver = Driver::<P>::new(config).map_err(LoadError)?;
        Ok(Box::new(NativeInstance {
            driver,
            descriptor: Driver::<P>::descriptor(),
        }))
    }

    fn kind(&self) -> &'static str {
        "native"
    }

    fn identity(&self) -> String {
        format!("native:{}", std::any::type_name::<P>())
    }
}

struct NativeInstance<P> {
    driver: Driver<P>,
    descriptor: Descriptor,
}

impl<P: Exported + Send> PluginInstance for NativeInstance<P> {
    fn descriptor(&self) -> &Descriptor {
        &self.descriptor
    }

    fn upsert_nodes(&mut self, nodes: &[(u32, &NodeInfo)]) -> Result<(), CallError> {
        let (images, csi, devices) = (
            self.descriptor.reads_node_images,
            self.descriptor.reads_csi_nodes,
            self.descriptor.reads_devices,
        );
        self.driver.upsert_nodes(
            nodes
                .iter()
                .map(|(id, node)| (*id, node.sent(images, csi, devices))),
        );
        Ok(())
    }

    fn remove_nodes(&mut self, ids: &[u32]) -> Result<(), CallError> {
        self.driver.remove_nodes(ids);
        Ok(())
    }

    fn update_usage(&mut self, usage: &[(u32, &NodeUsage)]) -> Result<(), CallError> {
        self.driver
            .update_usage(usage.iter().map(|(id, u)| (*id, (*u).clone())));
        Ok(())
    }

    fn upsert_pods(&mut self, pods: &[(u32, ExistingPod)]) -> Result<(), CallError> {
        self.driver.upsert_pods(pods.iter().cloned());
        Ok(())
    }

    fn remove_pods(&mut self, ids: &[u32]) -> Result<(), CallError> {
        self.driver.remove_pods(ids);
        Ok(())
    }

    fn upsert_namespaces(&mut self, namespaces: &[(&str, &Labels)]) -> Result<(), CallError> {
        self.driver.upsert_namespaces(
            namespaces
                .iter()
                .map(|(name, labels)| (name.to_string(), (*labels).clone())),
        );
        Ok(())
    }

    fn remove_namespaces(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.driver.remove_namespaces(names.iter().copied());
        Ok(())
    }

    fn upsert_volumes(&mut self, volumes: &[&wasched_sdk::VolumeInfo]) -> Result<(), CallError> {
        self.driver
            .upsert_volumes(volumes.iter().map(|v| (*v).clone()));
        Ok(())
    }

    fn remove_volumes(&mut self, names: &[&str]) -> Result<(), CallError> {
        self.driver.remove_volumes(names.iter().copied());
        Ok(())
    }

    fn set_pod(&mut self, pod: &Pod) -> Result<PodPlan, CallError> {
        Ok(self
            .driver
            .set_pod(pod.with_parts(self.descriptor.reads_pod)))
    }

    fn filter(&mut self, ids: &[u32], out: &mut FilterResults) -> Result<(), CallError> {
        let before = out.verdicts.len();
        self.driver.filter(ids, out);
        check_len("filter", out.verdicts.len() - before, ids.len())
    }

    fn score(&mut self, ids: &[u32], out: &mut Vec<i64>) -> Result<(), CallError> {
        let before = out.len();
        self.driver.score_for_host(ids, out);
        check_len("score", out.len() - before, ids.len())
    }

    fn normalize(&mut self, scores: &mut Vec<i64>) -> Result<(), CallError> {
        self.driver.normalize(scores);
        Ok(())
    }

    // The stages get the parts of the pod a component's `staged-pod` carries, so a plugin
    // answers the same natively and as a component.
    fn pre_enqueue(&mut self, pod: &Pod) -> Result<Option<Failure>, CallError> {
        Ok(self
            .driver
            .pre_enqueue(&pod.pre_enqueued(self.descriptor.reads_devices)))
    }

    fn permit(&mut self, pod: &Pod, node: &str) -> Result<PermitAnswer, CallError> {
        if self.descriptor.reads_groups {
            return Ok(self.driver.permit(&pod.grouped(), node));
        }
        let mut answer = self.driver.permit(&pod.staged(), node);
        // Only the `groups` interface carries rejections of other pods.
        answer.reject.clear();
        Ok(answer)
    }

    fn reserve(&mut self, node: u32) -> Result<Result<Reservation, Failure>, CallError> {
        Ok(self.driver.reserve(node))
    }

    fn unreserve(&mut self, pod: &Pod, node: &str) -> Result<(), CallError> {
        self.driver.unreserve(&pod.staged(), node);
        Ok(())
    }

    fn unreserve_rejects(&mut self, pod: &Pod, node: &str) -> Result<Vec<Rejection>, CallError> {
        if !self.descriptor.reads_groups {
            return self.unreserve(pod, node).map(|()| Vec::new());
        }
        Ok(self.driver.unreserve_rejects(&pod.grouped(), node))
    }

    fn post_filter(&mut self, pod: &Pod) -> Result<PostFilterAnswer, CallError> {
        Ok(self.driver.post_filter(&pod.grouped()))
    }

    fn queue_sort(&mut self, pod: &Pod, queued_millis: i64) -> Result<QueueKey, CallError> {
        Ok(self.driver.queue_sort(&pod.grouped(), queued_millis))
    }
}

//! The last applied version of every object, as the service keeps it for resync and for seeding
//! shadows: pods, the bulk of a cluster, as their JSON.

use k8s_openapi::api::core::v1 as core;

use crate::events::Object;

/// One applied object. A typed `Pod` is ~2.4 KB before its strings and maps, ~5.7 KB in all for
/// a small pod (heaptrack, `simulate` of 39,000 running pods): more than every other piece of
/// state the scheduler keeps per pod. Its JSON is a tenth of that. Only resync and a shadow's
/// start read it back.
#[derive(Debug)]
pub(super) enum KeptObject {
    Pod(Box<[u8]>),
    Other(Object),
}

impl KeptObject {
    pub(super) fn new(object: Object) -> KeptObject {
        match object {
            Object::Pod(pod) => match serde_json::to_vec(&pod) {
                Ok(json) => KeptObject::Pod(json.into_boxed_slice()),
                Err(_) => KeptObject::Other(Object::Pod(pod)),
            },
            other => KeptObject::Other(other),
        }
    }

    /// The object as it was applied.
    pub(super) fn object(&self) -> Object {
        match self {
            KeptObject::Pod(json) => Object::Pod(Box::new(pod_of(json))),
            KeptObject::Other(object) => object.clone(),
        }
    }

    /// Whether `object` is the object kept.
    pub(super) fn is(&self, object: &Object) -> bool {
        match (self, object) {
            (KeptObject::Pod(json), Object::Pod(pod)) => pod_of(json) == **pod,
            (KeptObject::Other(kept), object) => kept == object,
            (KeptObject::Pod(_), _) => false,
        }
    }
}

fn pod_of(json: &[u8]) -> core::Pod {
    serde_json::from_slice(json).expect("the JSON a typed Pod was written as")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>) -> Object {
        let mut pod = core::Pod::default();
        pod.metadata.name = Some(name.to_string());
        pod.metadata.namespace = Some("default".to_string());
        pod.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        pod.spec = Some(core::PodSpec {
            node_name: node.map(str::to_string),
            containers: vec![core::Container {
                name: "main".to_string(),
                image: Some("registry.example.com/app:1".to_string()),
                ..Default::default()
            }],
            ..Default::default()
        });
        Object::Pod(Box::new(pod))
    }

    #[test]
    fn a_pod_is_kept_as_json_and_read_back_as_it_was() {
        let applied = pod("web-1", Some("node-1"));
        let kept = KeptObject::new(applied.clone());
        assert!(matches!(kept, KeptObject::Pod(_)));
        assert_eq!(kept.object(), applied);
        assert!(kept.is(&applied));
        assert!(!kept.is(&pod("web-1", Some("node-2"))));
        assert!(!kept.is(&Object::Namespace(Box::default())));
    }

    #[test]
    fn other_kinds_are_kept_typed() {
        let namespace = Object::Namespace(Box::default());
        let kept = KeptObject::new(namespace.clone());
        assert!(matches!(kept, KeptObject::Other(_)));
        assert!(kept.is(&namespace));
        assert!(!kept.is(&pod("web-1", None)));
    }
}

//! Objects read from the API server whether or not they decode: kube-runtime's watcher decodes
//! a whole list at once, so one object of a shape this build cannot read (an API server that does
//! not validate, a field of the wrong type) would fail the list, keep the scheduler unready and
//! log the list again at every retry. [`Lenient`] decodes each object on its own and keeps the
//! error beside its metadata, so Kubernetes mode can skip the object or tell its pod why.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::DeserializeOwned;

/// An object of kind `K` as the API server lists or watches it, whether or not it decodes as
/// `K`: one object in a shape this build cannot read (an API server that does not validate, a
/// field of the wrong type) must not fail the whole list, which would keep the scheduler
/// unready and log the list again at every retry.
#[derive(Clone, Debug)]
pub struct Lenient<K> {
    /// The object, or why it did not decode (with the metadata a list needs of every object).
    pub decoded: Result<K, Undecodable>,
}

/// Why an object did not decode, and the object as it came.
#[derive(Clone, Debug)]
pub struct Undecodable {
    /// The object's metadata, as far as it decodes.
    pub metadata: ObjectMeta,
    /// Where the first error is (`spec.containers`).
    pub field: String,
    /// What it is.
    pub message: String,
    /// The object as it came.
    pub raw: serde_json::Value,
}

impl<'de, K: DeserializeOwned + kube::Resource> serde::Deserialize<'de> for Lenient<K> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let raw = serde_json::Value::deserialize(deserializer)?;
        // Every watch event of every pod comes through here, and nearly all decode: the path to
        // an error (a String for each key passed, in serde_path_to_error) is only worked out for
        // an object that fails.
        let decoded =
            K::deserialize(&raw).or_else(|_| serde_path_to_error::deserialize::<_, K>(&raw));
        let error = match decoded {
            Ok(object) => {
                return Ok(Lenient {
                    decoded: Ok(object),
                })
            }
            Err(e) => e,
        };
        let metadata = match raw.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m).map_err(D::Error::custom)?,
            None => ObjectMeta::default(),
        };
        Ok(Lenient {
            decoded: Err(Undecodable {
                metadata,
                field: error.path().to_string(),
                message: error.inner().to_string(),
                raw,
            }),
        })
    }
}

impl<K: kube::Resource<DynamicType = ()>> kube::Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match &self.decoded {
            Ok(object) => object.meta(),
            Err(undecodable) => &undecodable.metadata,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.decoded {
            Ok(object) => object.meta_mut(),
            Err(undecodable) => &mut undecodable.metadata,
        }
    }
}

/// The most of an error's text a log line carries: a decode error can quote a whole list.
pub const LOGGED_ERROR_BYTES: usize = 400;

/// `text` cut to [`LOGGED_ERROR_BYTES`] on a character boundary.
pub fn shortened(text: &str) -> &str {
    let mut end = text.len().min(LOGGED_ERROR_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use kube::Resource as _;

    #[test]
    fn one_object_that_does_not_decode_leaves_the_others_of_its_list_readable() {
        let list = r#"[
            {"metadata": {"name": "fine"}, "spec": {"containers": [{"name": "c"}]}},
            {"metadata": {"name": "shapeless"}, "spec": {"containers": "not a list"}}
        ]"#;
        let objects: Vec<Lenient<Pod>> = serde_json::from_str(list).unwrap();
        assert_eq!(objects[0].meta().name.as_deref(), Some("fine"));
        assert!(objects[0].decoded.is_ok());
        assert_eq!(objects[1].meta().name.as_deref(), Some("shapeless"));
        let error = objects[1].decoded.as_ref().unwrap_err();
        assert_eq!(error.field, "spec.containers");
        assert!(
            error.message.starts_with("invalid type"),
            "{}",
            error.message
        );
        assert_eq!(error.raw["spec"]["containers"], "not a list");
    }

    #[test]
    fn a_logged_error_is_cut_on_a_character_boundary() {
        let long = "é".repeat(LOGGED_ERROR_BYTES);
        let cut = shortened(&long);
        assert!(cut.len() <= LOGGED_ERROR_BYTES);
        assert_eq!(cut, "é".repeat(LOGGED_ERROR_BYTES / 2));
        assert_eq!(shortened("short"), "short");
    }
}

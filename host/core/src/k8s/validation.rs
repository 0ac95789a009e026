//! The API server's rules for names and labels (`apimachinery/pkg/util/validation`), applied to
//! every object wasched reads, so that what a real cluster refuses is refused here too, with the
//! same words: a name with `/` would collide in the store's `namespace/name` keys, and a newline
//! would break every table that prints it.

use serde_json::Value;

use super::FieldError;

/// Longest DNS-1123 subdomain (object names of most kinds).
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// Longest DNS-1123 label (namespaces, the name part of a label key, a label value).
pub const DNS1123_LABEL_MAX: usize = 63;

const SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_RULE: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const QUALIFIED_NAME_RULE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

fn invalid(field: &str, value: &str, why: impl std::fmt::Display) -> FieldError {
    // Quoted with Rust's escapes, so a newline or NUL in the value cannot break the message.
    FieldError {
        field: field.to_string(),
        message: format!("Invalid value: {value:?}: {why}"),
    }
}

fn too_long(field: &str, value: &str, max: usize) -> FieldError {
    let shown: String = value.chars().take(64).collect();
    invalid(
        field,
        &shown,
        format_args!("must be no more than {max} characters"),
    )
}

/// True when `part` is not empty, starts and ends with an ASCII letter or digit, and holds only
/// bytes that `allowed` accepts.
fn is_word(part: &str, allowed: impl Fn(u8) -> bool) -> bool {
    let bytes = part.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes.iter().all(|&b| allowed(b))
        }
        _ => false,
    }
}

fn is_label_body(part: &str) -> bool {
    is_word(part, |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'
    })
}

fn is_qualified_name_part(part: &str) -> bool {
    is_word(part, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
    })
}

/// The length check, then the pattern check, with the API server's messages.
fn check(field: &str, value: &str, max: usize, valid: bool, rule: &str) -> Result<(), FieldError> {
    if value.len() > max {
        return Err(too_long(field, value, max));
    }
    if !valid {
        return Err(invalid(field, value, rule));
    }
    Ok(())
}

/// A DNS-1123 label: a namespace.
///
/// # Errors
/// The API server's message, naming `field`.
pub fn dns1123_label(field: &str, value: &str) -> Result<(), FieldError> {
    check(
        field,
        value,
        DNS1123_LABEL_MAX,
        is_label_body(value),
        LABEL_RULE,
    )
}

/// A DNS-1123 subdomain: the name of a Node, Pod, PersistentVolume(Claim) or StorageClass.
///
/// # Errors
/// The API server's message, naming `field`.
pub fn dns1123_subdomain(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = value.split('.').all(is_label_body);
    check(field, value, DNS1123_SUBDOMAIN_MAX, valid, SUBDOMAIN_RULE)
}

/// A label (or annotation) key: an optional DNS-1123 subdomain prefix and `/`, then a name of at
/// most 63 characters.
///
/// # Errors
/// The API server's message, naming `field`.
pub fn qualified_name(field: &str, key: &str) -> Result<(), FieldError> {
    let name = match key.split_once('/') {
        Some((prefix, name)) => {
            dns1123_subdomain(field, prefix)
                .map_err(|_| invalid(field, key, format_args!("prefix part {SUBDOMAIN_RULE}")))?;
            name
        }
        None => key,
    };
    if name.len() > DNS1123_LABEL_MAX {
        return Err(invalid(
            field,
            key,
            format_args!("name part must be no more than {DNS1123_LABEL_MAX} characters"),
        ));
    }
    check(
        field,
        key,
        usize::MAX,
        is_qualified_name_part(name),
        QUALIFIED_NAME_RULE,
    )
}

/// A label value: empty, or at most 63 characters of the qualified-name alphabet.
///
/// # Errors
/// The API server's message, naming `field`.
pub fn label_value(field: &str, value: &str) -> Result<(), FieldError> {
    let valid = value.is_empty() || is_qualified_name_part(value);
    check(field, value, DNS1123_LABEL_MAX, valid, LABEL_VALUE_RULE)
}

/// Checks an object's `metadata`: its name (a DNS-1123 subdomain), its namespace (a DNS-1123
/// label), its label keys and values, and its annotation keys.
///
/// # Errors
/// The first field that the API server would refuse.
pub fn object_meta(object: &Value) -> Result<(), FieldError> {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    if let Some(name) = text("/metadata/name") {
        dns1123_subdomain("metadata.name", name)?;
    }
    if let Some(namespace) = text("/metadata/namespace") {
        dns1123_label("metadata.namespace", namespace)?;
    }
    let map = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
    };
    for (key, value) in map("/metadata/labels") {
        qualified_name("metadata.labels", key)?;
        label_value(
            &format!("metadata.labels[{key}]"),
            value.as_str().unwrap_or(""),
        )?;
    }
    for (key, _) in map("/metadata/annotations") {
        qualified_name("metadata.annotations", &key.to_lowercase())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_api_servers_rules() {
        for good in [
            "n1",
            "a.b-c",
            "0",
            "node-1.zone-a.example.com",
            &"a".repeat(253),
        ] {
            assert!(dns1123_subdomain("metadata.name", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Node1",
            "x/y",
            "../../etc/passwd",
            "a..b",
            "-a",
            "a-",
            "a_b",
            "a\nb",
            "a\0b",
            &"a".repeat(254),
        ] {
            let error = dns1123_subdomain("metadata.name", bad).expect_err(bad);
            assert_eq!(error.field, "metadata.name");
            assert!(!error.message.contains('\n'), "{error}");
        }
        assert!(dns1123_label("metadata.namespace", "team-a").is_ok());
        for bad in ["x/y", "a.b", "Team", &"a".repeat(64)] {
            assert!(dns1123_label("metadata.namespace", bad).is_err(), "{bad}");
        }
        assert_eq!(
            dns1123_subdomain("metadata.name", &"a".repeat(100_000))
                .unwrap_err()
                .message,
            format!(
                "Invalid value: {:?}: must be no more than 253 characters",
                "a".repeat(64)
            ),
            "a long value is not quoted whole"
        );
    }

    #[test]
    fn label_keys_and_values_follow_the_api_servers_rules() {
        for key in [
            "app",
            "app.kubernetes.io/name",
            "topology.kubernetes.io/zone",
            "A_b.c",
        ] {
            assert!(qualified_name("metadata.labels", key).is_ok(), "{key}");
        }
        for key in [
            "",
            "/app",
            "a/b/c",
            "Example.com/app",
            "app-",
            &"a".repeat(64),
        ] {
            assert!(qualified_name("metadata.labels", key).is_err(), "{key:?}");
        }
        for value in ["", "v1", "My_Value.2"] {
            assert!(label_value("v", value).is_ok(), "{value}");
        }
        for value in ["-v", "a b", &"v".repeat(64)] {
            assert!(label_value("v", value).is_err(), "{value}");
        }
    }

    #[test]
    fn object_metadata_is_checked_field_by_field() {
        let ok = json!({"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}}});
        assert!(object_meta(&ok).is_ok());
        let cases = [
            (json!({"metadata": {"name": "x/y"}}), "metadata.name"),
            (
                json!({"metadata": {"name": "p", "namespace": "x/y"}}),
                "metadata.namespace",
            ),
            (
                json!({"metadata": {"name": "p", "labels": {"a b": "v"}}}),
                "metadata.labels",
            ),
            (
                json!({"metadata": {"name": "p", "labels": {"app": "a b"}}}),
                "metadata.labels[app]",
            ),
        ];
        for (object, field) in cases {
            assert_eq!(object_meta(&object).unwrap_err().field, field, "{object}");
        }
    }
}

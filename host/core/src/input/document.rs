//! One document of a dump read with a List's items left as JSON text: `kubectl get -o json|yaml`
//! prints a whole cluster as one List, and that List as one JSON value took ~15x its text.
//! Each item becomes a value only when it is added, one at a time.
//!
//! The items are kept as text rather than added while the document is read because kubectl
//! writes `items` before `kind`: only the whole document tells whether it is a List at all.

use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::yaml_outline::{DocumentOutline, NodeText};

/// The `visit_*` methods of a visitor for the scalars, each made a JSON value wrapped by `$wrap`.
macro_rules! scalars_as_values {
    ($wrap:path) => {
        fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok($wrap(Value::Bool(v)))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok($wrap(Value::from(v)))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok($wrap(Value::String(v.to_string())))
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok($wrap(Value::String(v)))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($wrap(Value::Null))
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($wrap(Value::Null))
        }
        fn visit_some<D: Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_any(self)
        }
    };
}

/// A document as read: an object whose `items` (if a sequence) are kept as JSON text, or any
/// other value.
#[derive(Debug)]
pub(super) enum Document<'t> {
    /// A mapping.
    Object {
        /// Its fields but `items` when that is a sequence.
        fields: Map<String, Value>,
        /// `items`, when it is a sequence.
        items: Option<Vec<ItemText<'t>>>,
    },
    /// Anything else (null for an empty document).
    Other(Value),
}

/// One item's text: JSON borrowed from a JSON text or written from a YAML one, or where the
/// item is in a YAML text.
#[derive(Debug)]
pub(super) enum ItemText<'t> {
    Borrowed(&'t RawValue),
    Owned(String),
    YamlNode(&'t str, NodeText),
}

impl<'t> ItemText<'t> {
    /// The item as a value.
    pub(super) fn value(&self) -> Result<Value, String> {
        let text = match self {
            ItemText::Borrowed(raw) => raw.get(),
            ItemText::Owned(text) => text.as_str(),
            ItemText::YamlNode(text, node) => return yaml_node_value(text, node),
        };
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The YAML text the item is in, if it is read from there.
    pub(super) fn yaml_text(&self) -> Option<&'t str> {
        match self {
            ItemText::YamlNode(text, _) => Some(text),
            _ => None,
        }
    }
}

/// A node of a YAML text, read from its own text as a value.
pub(super) fn yaml_node_value(text: &str, node: &NodeText) -> Result<Value, String> {
    let own = node.text(text);
    let first = yaml_serde::Deserializer::from_str(&own).next();
    match first {
        Some(document) => ValueSeed { json: false }
            .deserialize(document)
            .map_err(|e| e.to_string()),
        // Nothing but spaces: an empty node, which YAML reads as null.
        None => Ok(Value::Null),
    }
}

/// Reads one document of a YAML text from its outline: a List's fields now and its items when
/// each is added, any other document whole.
pub(super) fn read_outlined<'t>(
    text: &'t str,
    outline: DocumentOutline,
) -> Result<Document<'t>, String> {
    match outline {
        DocumentOutline::Whole(range) => {
            match yaml_serde::Deserializer::from_str(&text[range]).next() {
                Some(document) => DocumentSeed { json: false }
                    .deserialize(document)
                    .map_err(|e| e.to_string()),
                None => Ok(Document::Other(Value::Null)),
            }
        }
        DocumentOutline::List { fields, items } => {
            let mut values = Map::new();
            for (key, node) in fields {
                values.insert(key, yaml_node_value(text, &node)?);
            }
            Ok(Document::Object {
                fields: values,
                items: Some(
                    items
                        .into_iter()
                        .map(|node| ItemText::YamlNode(text, node))
                        .collect(),
                ),
            })
        }
    }
}

impl Document<'_> {
    /// The whole document as one value (items included).
    pub(super) fn into_value(self) -> Result<Value, String> {
        match self {
            Document::Other(value) => Ok(value),
            Document::Object { mut fields, items } => {
                if let Some(items) = items {
                    let items = items
                        .iter()
                        .map(ItemText::value)
                        .collect::<Result<_, _>>()?;
                    fields.insert("items".to_string(), Value::Array(items));
                }
                Ok(Value::Object(fields))
            }
        }
    }
}

/// Reads a [`Document`] from JSON (items borrowed from the text) or YAML (items and fields
/// converted as a YAML value is, so that both read a document the same).
#[derive(Clone, Copy)]
pub(super) struct DocumentSeed {
    pub(super) json: bool,
}

impl<'de> DeserializeSeed<'de> for DocumentSeed {
    type Value = Document<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Document<'de>, D::Error> {
        deserializer.deserialize_any(DocumentVisitor { json: self.json })
    }
}

struct DocumentVisitor {
    json: bool,
}

/// Reads any value as a JSON value: from JSON directly, from YAML as a YAML value converted.
#[derive(Clone, Copy)]
struct ValueSeed {
    json: bool,
}

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        if self.json {
            Value::deserialize(deserializer)
        } else {
            let yaml = yaml_serde::Value::deserialize(deserializer)?;
            serde_json::to_value(yaml).map_err(serde::de::Error::custom)
        }
    }
}

impl<'de> Visitor<'de> for DocumentVisitor {
    type Value = Document<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object or list")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document<'de>, A::Error> {
        let mut fields = Map::new();
        let mut items = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                match map.next_value_seed(ItemsSeed { json: self.json })? {
                    Items::Texts(texts) => {
                        items = Some(texts);
                        fields.remove("items");
                    }
                    Items::Other(value) => {
                        items = None;
                        fields.insert(key, value);
                    }
                }
            } else {
                let value = map.next_value_seed(ValueSeed { json: self.json })?;
                fields.insert(key, value);
            }
        }
        Ok(Document::Object { fields, items })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Document<'de>, A::Error> {
        let value = ValueSeed { json: self.json }.deserialize(SeqAccessDeserializer::new(seq))?;
        Ok(Document::Other(value))
    }

    scalars_as_values!(Document::Other);
}

/// `items` as read: a sequence's elements as JSON text, or any other value.
enum Items<'t> {
    Texts(Vec<ItemText<'t>>),
    Other(Value),
}

struct ItemsSeed {
    json: bool,
}

impl<'de> DeserializeSeed<'de> for ItemsSeed {
    type Value = Items<'de>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Items<'de>, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed {
    type Value = Items<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list's items")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'de>, A::Error> {
        let mut texts = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        if self.json {
            while let Some(raw) = seq.next_element::<&'de RawValue>()? {
                texts.push(ItemText::Borrowed(raw));
            }
        } else {
            while let Some(yaml) = seq.next_element::<yaml_serde::Value>()? {
                let text = serde_json::to_string(&yaml).map_err(serde::de::Error::custom)?;
                texts.push(ItemText::Owned(text));
            }
        }
        Ok(Items::Texts(texts))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Items<'de>, A::Error> {
        let value = ValueSeed { json: self.json }.deserialize(MapAccessDeserializer::new(map))?;
        Ok(Items::Other(value))
    }

    scalars_as_values!(Items::Other);
}

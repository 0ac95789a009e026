//! The server's durable state in one redb file: cluster objects, uploaded plugin components and
//! the active configuration.
//!
//! redb because it is an embedded, pure-Rust, ACID key-value store: a committed write transaction
//! is fsynced before `commit` returns (so an acknowledged request survives `kill -9`), readers never
//! block the writer, there is no C library to build, and nothing here needs SQL. Every write takes
//! the next value of one resource-version counter in the same transaction, so versions follow
//! commit order.

use std::path::Path;
use std::sync::Arc;

use redb::{Database, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use wasched_core::events::{Event, Kind, Object, ObjectKey};

/// `Kind/namespace/name` -> the object's JSON.
const OBJECTS: TableDefinition<&str, &[u8]> = TableDefinition::new("objects");
/// Plugin name -> component bytes.
const PLUGIN_BYTES: TableDefinition<&str, &[u8]> = TableDefinition::new("plugin_bytes");
/// Plugin name -> [`PluginRecord`] as JSON.
const PLUGIN_RECORDS: TableDefinition<&str, &[u8]> = TableDefinition::new("plugin_records");
/// Counters and the configuration.
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const RESOURCE_VERSION: &str = "resource_version";
const CONFIG: &str = "config";

/// A store failure (I/O, corruption); the request that hit it fails with 500 and changes nothing.
#[derive(Debug, thiserror::Error)]
#[error("store: {0}")]
pub struct StoreError(String);

fn err(e: impl std::fmt::Display) -> StoreError {
    StoreError(e.to_string())
}

/// What is known of an uploaded component besides its bytes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PluginRecord {
    /// The plugin name it was uploaded under.
    pub name: String,
    /// The sha256 of its bytes, as hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: usize,
    /// The version the plugin reports in its descriptor.
    pub version: String,
    /// Seconds since the Unix epoch.
    pub uploaded_at: u64,
}

/// The open store; clone it freely.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
}

/// The storage key of an object.
pub fn storage_key(key: &ObjectKey) -> String {
    format!("{}/{}/{}", kind_name(key.kind), key.namespace, key.name)
}

/// The `kind` of an object as Kubernetes spells it.
pub fn kind_name(kind: Kind) -> &'static str {
    kind.name()
}

/// An object as JSON, with `apiVersion` and `kind` set.
pub fn object_json(object: &Object) -> serde_json::Value {
    let mut value = object.to_json();
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), object.kind().api_version().into());
        map.insert("kind".into(), kind_name(object.kind()).into());
    }
    value
}

fn decode(kind: Kind, bytes: &[u8]) -> Result<Object, StoreError> {
    Object::from_json_slice(kind, bytes).map_err(err)
}

/// The key a storage key ([`storage_key`]) was made of.
fn object_key_of(key: &str) -> Option<ObjectKey> {
    let mut parts = key.splitn(3, '/');
    Some(ObjectKey {
        kind: Kind::named(parts.next()?)?,
        namespace: parts.next()?.to_string(),
        name: parts.next()?.to_string(),
    })
}

/// `metadata.resourceVersion` of a stored object's JSON, read without decoding the rest.
pub fn stored_version(json: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        metadata: Metadata,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Metadata {
        resource_version: Option<String>,
    }
    let versioned: Versioned = serde_json::from_slice(json).ok()?;
    versioned.metadata.resource_version?.parse().ok()
}

/// Sets `metadata.resourceVersion`.
pub fn set_resource_version(object: &mut Object, version: u64) {
    object.metadata_mut().resource_version = Some(version.to_string());
}

/// How a write treats an object that already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Refuses an object that exists (POST).
    Create,
    /// Creates or replaces (PUT, apply).
    Upsert,
}

/// A stored object as written.
#[derive(Debug)]
pub struct Written {
    /// The object's key.
    pub key: ObjectKey,
    /// The object as stored (JSON, with its new resourceVersion): a write of a large List keeps
    /// every object it wrote until it commits, and typed they take several times their JSON.
    pub json: Arc<[u8]>,
    /// The store's version after the write.
    pub version: u64,
    /// It did not exist before.
    pub created: bool,
}

/// The objects a write stored, and the events of the writes that followed from them.
pub type WrittenAndFollowed = (Vec<Written>, Vec<Event>);

/// Why a write of several objects was refused as a whole.
#[derive(Debug, PartialEq, Eq)]
pub enum Rejection {
    /// Object `index` exists and the mode was [`WriteMode::Create`].
    Exists {
        /// The object's position in the write.
        index: usize,
        /// Its key.
        key: ObjectKey,
    },
    /// `merge` refused object `index`.
    Refused {
        /// The object's position in the write.
        index: usize,
        /// Its key.
        key: ObjectKey,
        /// Why.
        reason: String,
    },
}

/// The objects inside one write transaction ([`Store::transaction`]): reads see the writes made
/// before them, and every write takes the next resource version.
pub struct ObjectTxn<'t> {
    table: redb::Table<'t, &'static str, &'static [u8]>,
    version: u64,
}

impl ObjectTxn<'_> {
    /// The stored object `key`, as this transaction has it.
    ///
    /// # Errors
    /// A store failure.
    pub fn get(&self, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        match self.table.get(storage_key(key).as_str()).map_err(err)? {
            Some(bytes) => Ok(Some(decode(key.kind, bytes.value())?)),
            None => Ok(None),
        }
    }

    /// Writes `object` with the next version, which it returns.
    ///
    /// # Errors
    /// A store failure.
    pub fn put(&mut self, object: &mut Object) -> Result<u64, StoreError> {
        self.put_json(object).map(|(version, _)| version)
    }

    /// [`ObjectTxn::put`], returning the JSON stored too.
    ///
    /// # Errors
    /// A store failure.
    pub fn put_json(&mut self, object: &mut Object) -> Result<(u64, Vec<u8>), StoreError> {
        self.version += 1;
        set_resource_version(object, self.version);
        let bytes = serde_json::to_vec(&object_json(object)).map_err(err)?;
        self.table
            .insert(storage_key(&object.key()).as_str(), bytes.as_slice())
            .map_err(err)?;
        Ok((self.version, bytes))
    }

    /// The objects of `kind` in `namespace`, as this transaction has them.
    ///
    /// # Errors
    /// A store failure.
    pub fn list(&self, kind: Kind, namespace: &str) -> Result<Vec<Object>, StoreError> {
        let prefix = format!("{}/{namespace}/", kind_name(kind));
        let mut objects = Vec::new();
        for entry in self.table.range(prefix.as_str()..).map_err(err)? {
            let (key, value) = entry.map_err(err)?;
            if !key.value().starts_with(&prefix) {
                break;
            }
            objects.push(decode(kind, value.value())?);
        }
        Ok(objects)
    }

    /// Deletes `key`; returns the object with the version of its deletion, or `None` when it
    /// did not exist.
    ///
    /// # Errors
    /// A store failure.
    pub fn delete(&mut self, key: &ObjectKey) -> Result<Option<(u64, Object)>, StoreError> {
        let Some(bytes) = self.table.remove(storage_key(key).as_str()).map_err(err)? else {
            return Ok(None);
        };
        let object = decode(key.kind, bytes.value())?;
        self.version += 1;
        Ok(Some((self.version, object)))
    }
}

/// What the store caches of its file's pages unless told otherwise (`--store-cache-bytes`).
/// redb's own default, 1 GiB, came on top of the scheduler's memory: with 128 MiB, applying a
/// 215 MB List peaked 74 MB lower and a restart restoring it 330 MB lower, with the same apply
/// and scheduling times (pages past the cache are read from the operating system's).
pub const DEFAULT_CACHE_BYTES: usize = 128 << 20;

impl Store {
    /// Opens (or creates) the store file.
    ///
    /// # Errors
    /// The file cannot be opened (held by another server, unreadable, not a store).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with_cache(path, DEFAULT_CACHE_BYTES)
    }

    /// [`Store::open`], caching up to `cache_bytes` of the file's pages.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with_cache(path: &Path, cache_bytes: usize) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError(format!("cannot create {}: {e}", dir.display())))?;
        }
        let db = redb::Builder::new()
            .set_cache_size(cache_bytes)
            .create(path)
            .map_err(|e| StoreError(format!("cannot open {}: {e}", path.display())))?;
        let tx = db.begin_write().map_err(err)?;
        for table in [OBJECTS, PLUGIN_BYTES, PLUGIN_RECORDS, META] {
            tx.open_table(table).map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(Store { db: Arc::new(db) })
    }

    /// The newest resource version handed out.
    ///
    /// # Errors
    /// A store failure.
    pub fn resource_version(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let meta = tx.open_table(META).map_err(err)?;
        Ok(read_u64(meta.get(RESOURCE_VERSION).map_err(err)?))
    }

    /// Writes objects in one transaction, all or none. `merge(stored, incoming)` sees the stored
    /// object (if any) and may adjust the incoming one or refuse it; every object gets the next
    /// version.
    ///
    /// # Errors
    /// A store failure: nothing was written.
    pub fn write_objects(
        &self,
        objects: impl IntoIterator<Item = Object>,
        mode: WriteMode,
        merge: impl Fn(
            Option<&Object>,
            &mut Object,
            &dyn Fn(&ObjectKey) -> Option<Object>,
        ) -> Result<(), String>,
    ) -> Result<Result<Vec<Written>, Rejection>, StoreError> {
        let written = self.write_objects_then(objects, mode, merge, |_, _| Ok(Vec::new()))?;
        Ok(written.map(|(written, _)| written))
    }

    /// [`Store::write_objects`], with `follow_up(txn, object)` after each object is written, in
    /// the same transaction: the writes a controller makes because of it (claims made from a
    /// pod's templates), with the events they send to the scheduler. Objects are taken from
    /// `objects` one at a time and kept only as the JSON written.
    ///
    /// # Errors
    /// A store failure: nothing was written.
    pub fn write_objects_then(
        &self,
        objects: impl IntoIterator<Item = Object>,
        mode: WriteMode,
        merge: impl Fn(
            Option<&Object>,
            &mut Object,
            &dyn Fn(&ObjectKey) -> Option<Object>,
        ) -> Result<(), String>,
        mut follow_up: impl FnMut(&mut ObjectTxn<'_>, &Object) -> Result<Vec<Event>, StoreError>,
    ) -> Result<Result<WrittenAndFollowed, Rejection>, StoreError> {
        let tx = self.db.begin_write().map_err(err)?;
        let mut written = Vec::new();
        let mut followed = Vec::new();
        {
            let mut meta = tx.open_table(META).map_err(err)?;
            let mut txn = ObjectTxn {
                table: tx.open_table(OBJECTS).map_err(err)?,
                version: read_u64(meta.get(RESOURCE_VERSION).map_err(err)?),
            };
            for (index, mut object) in objects.into_iter().enumerate() {
                let key = object.key();
                let stored = txn.get(&key)?;
                if stored.is_some() && mode == WriteMode::Create {
                    return Ok(Err(Rejection::Exists { index, key }));
                }
                // Other objects as this transaction has them (earlier ones of the batch written).
                let lookup = |other: &ObjectKey| txn.get(other).ok()?;
                if let Err(reason) = merge(stored.as_ref(), &mut object, &lookup) {
                    return Ok(Err(Rejection::Refused { index, key, reason }));
                }
                let (version, json) = txn.put_json(&mut object)?;
                followed.extend(follow_up(&mut txn, &object)?);
                written.push(Written {
                    key,
                    json: Arc::from(json),
                    version,
                    created: stored.is_none(),
                });
            }
            meta.insert(RESOURCE_VERSION, txn.version.to_le_bytes().as_slice())
                .map_err(err)?;
        }
        tx.commit().map_err(err)?;
        Ok(Ok((written, followed)))
    }

    /// Runs `body` over the objects in one write transaction and commits what it wrote, all or
    /// nothing: many pods' results share one fsync.
    ///
    /// # Errors
    /// A store failure: nothing was written.
    pub fn transaction<R>(
        &self,
        body: impl FnOnce(&mut ObjectTxn<'_>) -> R,
    ) -> Result<R, StoreError> {
        let tx = self.db.begin_write().map_err(err)?;
        let answer = {
            let mut meta = tx.open_table(META).map_err(err)?;
            let version = read_u64(meta.get(RESOURCE_VERSION).map_err(err)?);
            let mut objects = ObjectTxn {
                table: tx.open_table(OBJECTS).map_err(err)?,
                version,
            };
            let answer = body(&mut objects);
            meta.insert(RESOURCE_VERSION, objects.version.to_le_bytes().as_slice())
                .map_err(err)?;
            answer
        };
        tx.commit().map_err(err)?;
        Ok(answer)
    }

    /// One object.
    ///
    /// # Errors
    /// A store failure.
    pub fn get_object(&self, key: &ObjectKey) -> Result<Option<Object>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(OBJECTS).map_err(err)?;
        let found = table.get(storage_key(key).as_str()).map_err(err)?;
        found
            .map(|bytes| decode(key.kind, bytes.value()))
            .transpose()
    }

    /// Calls `each` with every stored object of one kind (all kinds with `None`), in one
    /// namespace or all, as its key and the JSON stored, in key order; returns the resource
    /// version the listing reflects. Nothing is decoded: a listing of every pod of a large
    /// cluster is never held as objects.
    ///
    /// # Errors
    /// A store failure, or the first error of `each`.
    pub fn for_each_json(
        &self,
        kind: Option<Kind>,
        namespace: Option<&str>,
        mut each: impl FnMut(ObjectKey, &[u8]) -> Result<(), StoreError>,
    ) -> Result<u64, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(OBJECTS).map_err(err)?;
        let meta = tx.open_table(META).map_err(err)?;
        let version = read_u64(meta.get(RESOURCE_VERSION).map_err(err)?);
        let prefix = match (kind, namespace) {
            (None, _) => String::new(),
            (Some(k), None) => format!("{}/", kind_name(k)),
            (Some(k), Some(ns)) => format!("{}/{ns}/", kind_name(k)),
        };
        for entry in table.range(prefix.as_str()..).map_err(err)? {
            let (key, value) = entry.map_err(err)?;
            let key = key.value();
            if !key.starts_with(&prefix) {
                break;
            }
            let Some(key) = object_key_of(key) else {
                continue;
            };
            each(key, value.value())?;
        }
        Ok(version)
    }

    /// Stores (or replaces) an uploaded component.
    ///
    /// # Errors
    /// A store failure: nothing was written.
    pub fn put_plugin(&self, record: &PluginRecord, bytes: &[u8]) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(err)?;
        {
            let mut table = tx.open_table(PLUGIN_BYTES).map_err(err)?;
            table.insert(record.name.as_str(), bytes).map_err(err)?;
            let mut records = tx.open_table(PLUGIN_RECORDS).map_err(err)?;
            let json = serde_json::to_vec(record).map_err(err)?;
            records
                .insert(record.name.as_str(), json.as_slice())
                .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    /// Removes an uploaded component; false if there was none.
    ///
    /// # Errors
    /// A store failure.
    pub fn remove_plugin(&self, name: &str) -> Result<bool, StoreError> {
        let tx = self.db.begin_write().map_err(err)?;
        let removed = {
            let mut table = tx.open_table(PLUGIN_BYTES).map_err(err)?;
            let mut records = tx.open_table(PLUGIN_RECORDS).map_err(err)?;
            let removed = table.remove(name).map_err(err)?.is_some();
            records.remove(name).map_err(err)?;
            removed
        };
        tx.commit().map_err(err)?;
        Ok(removed)
    }

    /// Every uploaded component with its record.
    ///
    /// # Errors
    /// A store failure.
    pub fn plugins(&self) -> Result<Vec<(PluginRecord, Vec<u8>)>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let table = tx.open_table(PLUGIN_BYTES).map_err(err)?;
        let records = tx.open_table(PLUGIN_RECORDS).map_err(err)?;
        let mut plugins = Vec::new();
        for entry in records.iter().map_err(err)? {
            let (name, record) = entry.map_err(err)?;
            let record: PluginRecord = serde_json::from_slice(record.value()).map_err(err)?;
            if let Some(bytes) = table.get(name.value()).map_err(err)? {
                plugins.push((record, bytes.value().to_vec()));
            }
        }
        Ok(plugins)
    }

    /// The configuration put through the admin API, if any.
    ///
    /// # Errors
    /// A store failure.
    pub fn config(&self) -> Result<Option<String>, StoreError> {
        let tx = self.db.begin_read().map_err(err)?;
        let meta = tx.open_table(META).map_err(err)?;
        let text = meta
            .get(CONFIG)
            .map_err(err)?
            .map(|v| String::from_utf8_lossy(v.value()).into_owned());
        Ok(text)
    }

    /// Stores the configuration.
    ///
    /// # Errors
    /// A store failure: nothing was written.
    pub fn set_config(&self, text: &str) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(err)?;
        tx.open_table(META)
            .map_err(err)?
            .insert(CONFIG, text.as_bytes())
            .map_err(err)?;
        tx.commit().map_err(err)
    }
}

fn read_u64(value: Option<redb::AccessGuard<'_, &[u8]>>) -> u64 {
    value
        .and_then(|v| <[u8; 8]>::try_from(v.value()).ok())
        .map_or(0, u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1 as core;

    fn node(name: &str) -> Object {
        let mut n = core::Node::default();
        n.metadata.name = Some(name.into());
        Object::Node(Box::new(n))
    }

    #[test]
    fn objects_plugins_and_config_survive_reopening() {
        let dir = std::env::temp_dir().join(format!("wasched-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("state.redb");
        {
            let store = Store::open(&path).unwrap();
            let out = store
                .write_objects(vec![node("a"), node("b")], WriteMode::Create, |_, _, _| {
                    Ok(())
                })
                .unwrap()
                .unwrap();
            assert_eq!((out[1].version, out[1].created), (2, true));
            let again = store
                .write_objects(vec![node("c"), node("a")], WriteMode::Create, |_, _, _| {
                    Ok(())
                })
                .unwrap();
            assert_eq!(
                again.unwrap_err(),
                Rejection::Exists {
                    index: 1,
                    key: node("a").key()
                }
            );
            let refused = store
                .write_objects(vec![node("c")], WriteMode::Upsert, |_, _, _| {
                    Err("no".into())
                })
                .unwrap();
            assert!(matches!(refused, Err(Rejection::Refused { index: 0, .. })));
            assert!(
                store.get_object(&node("c").key()).unwrap().is_none(),
                "all or none"
            );
            let (version, deleted) = store
                .transaction(|txn| txn.delete(&node("b").key()))
                .unwrap()
                .unwrap()
                .unwrap();
            assert_eq!((version, deleted.key().name.as_str()), (3, "b"));
            let record = PluginRecord {
                name: "P".into(),
                sha256: "00".into(),
                size: 3,
                version: "1".into(),
                uploaded_at: 7,
            };
            store.put_plugin(&record, b"abc").unwrap();
            store.set_config("[runtime]\n").unwrap();
        }
        let store = Store::open(&path).unwrap();
        let mut objects = Vec::new();
        let version = store
            .for_each_json(Some(Kind::Node), None, |key, json| {
                objects.push((key.clone(), stored_version(json), decode(key.kind, json)?));
                Ok(())
            })
            .unwrap();
        assert_eq!(version, 3);
        let mut a = node("a");
        set_resource_version(&mut a, 1);
        assert_eq!(objects, vec![(a.key(), Some(1), a)]);
        assert_eq!(store.plugins().unwrap()[0].1, b"abc");
        assert_eq!(store.config().unwrap().as_deref(), Some("[runtime]\n"));
        assert!(store.remove_plugin("P").unwrap());
        assert!(store.plugins().unwrap().is_empty());
    }
}

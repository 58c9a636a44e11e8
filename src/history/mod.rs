//! The history store: stored responses and conversations (spec 2), behind one trait.
//!
//! `/v1/responses` keeps server-side state: a stored response is what a later
//! `previous_response_id` continues, `/v1/conversations` holds items that a later response
//! reads and appends to. [`History`] is the one face of that state; `--history-backend`
//! picks what is behind it: `memory` (bounded, this process only), `none` (nothing
//! kept), `postgres` or `redis` (durable, shared by every gateway replica on the same
//! server).
//!
//! The store keeps JSON as opaque text: the objects are shaped by the routes that serve
//! them, the store only keys, orders and bounds them. Every record belongs to an
//! [`Owner`], so one tenant's ids are invisible to another: an unknown id and a foreign
//! one look the same (`None`).
//!
//! A chain of responses costs one read per turn, whatever its length: each stored response
//! carries its [`ResponseRecord::context`], every item the next turn needs (the earlier
//! turns' items, this turn's input and output), bounded by [`MAX_CONTEXT_BYTES`].
//!
//! Every call finishes within the store's timeout; a failure is a [`StoreError`], never a
//! hang and never a write reported as done that did not happen.
//!
//! [`open`] puts every backend behind one guard (`guard`): an id that is not 1 to
//! [`MAX_STORED_ID_BYTES`] bytes of printable ASCII names nothing and never reaches a
//! server, and a failure's detail (a server's message, an address) goes to the log, not
//! into the error a client is shown.

pub mod none;
pub mod postgres;
pub mod redis;
mod thread;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::secret::Secret;

mod guard;
mod ids;
mod memory;

pub use ids::{is_storable_id, new_item_id, shown, MAX_ECHO_CHARS, MAX_STORED_ID_BYTES};
pub use memory::{MemoryHistory, MemoryLimits};

/// Largest [`ResponseRecord::context`], in bytes: the depth bound of a
/// `previous_response_id` chain (a turn whose context would pass it is refused).
pub const MAX_CONTEXT_BYTES: usize = 16 * 1024 * 1024;
/// Most metadata properties of a conversation (spec 2).
pub const MAX_METADATA_PROPERTIES: usize = 16;
/// Most items one create-items request adds (spec 2).
pub const MAX_ITEMS_PER_CREATE: usize = 20;
/// Most items a conversation keeps; a response reads at most this many as its context.
pub const MAX_CONVERSATION_ITEMS: usize = 10_000;

/// A boxed future of a store call: the trait is used as `dyn History`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Who a record belongs to: the tenant of the caller's key (`auth:<tenant_id>`), or the
/// shared space of callers without a tenant key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Owner(Option<Arc<str>>);

impl Owner {
    /// The shared space: no tenant keys, or the shared `--api-key`.
    pub fn shared() -> Owner {
        Owner(None)
    }

    /// A tenant's own space.
    pub fn tenant(identity: Arc<str>) -> Owner {
        Owner(Some(identity))
    }

    /// The owner as stored: empty for the shared space.
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
}

/// A stored response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseRecord {
    /// `resp_…`.
    pub id: String,
    pub owner: Owner,
    /// Unix seconds.
    pub created_at: i64,
    /// The response's `status` (`completed`, `incomplete`, `failed`, `in_progress`,
    /// `cancelled`): what `cancel` answers from.
    pub status: String,
    /// The conversation the response belongs to, if any.
    pub conversation: Option<String>,
    /// The response object as the client got it (a JSON object).
    pub object: String,
    /// The request's input items, each with an id (a JSON array): `input_items`.
    pub input_items: String,
    /// Every item the next turn needs, oldest first (a JSON array): the context this
    /// response was generated from, its input and its output.
    pub context: String,
}

/// A conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConversationRecord {
    /// `conv_…`.
    pub id: String,
    pub owner: Owner,
    /// Unix seconds.
    pub created_at: i64,
    /// A JSON object of at most [`MAX_METADATA_PROPERTIES`] string properties.
    pub metadata: String,
}

/// An item of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemRecord {
    /// The item's id, unique within its conversation.
    pub id: String,
    /// Unix seconds.
    pub created_at: i64,
    /// The item as a JSON object (with its `id`, `type` …).
    pub item: String,
}

/// Order of a listing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Asc,
    Desc,
}

/// One page of a conversation's items: `limit` items at most, in `order`, starting after
/// the item `after` (exclusive) when given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemsQuery {
    pub limit: usize,
    pub order: Order,
    pub after: Option<String>,
}

/// Why adding items failed, besides the store itself failing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendRefused {
    /// No such conversation (or another owner's, or deleted).
    NoConversation,
    /// An item with this id is already in the conversation.
    AlreadyInConversation(String),
    /// The conversation would hold more than [`MAX_CONVERSATION_ITEMS`].
    Full,
    /// An item id that is not storable ([`is_storable_id`]); the id as [`shown`].
    MalformedId(String),
}

/// Why a metadata update failed, besides the store itself failing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatchRefused {
    NoConversation,
    /// The merged metadata would have more than [`MAX_METADATA_PROPERTIES`] properties.
    TooManyProperties,
    /// The patch is not a JSON object of strings and nulls.
    BadPatch(String),
}

/// A store call that failed. The message names what failed, never a password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    /// The store did not answer within its timeout.
    Timeout,
    /// The store could not be reached or refused the call.
    Unavailable(String),
    /// A record read back is not what was written (a corrupt or foreign record).
    Corrupt(String),
    /// The write would pass a bound of the store (the `memory` backend's bytes or records,
    /// per tenant or in all) and the writer's own older records cannot make room: refused,
    /// nothing dropped. The message names the bound, never another tenant's data.
    Full(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Timeout => f.write_str("the history store did not answer in time"),
            StoreError::Unavailable(why) if why.is_empty() => {
                f.write_str("the history store failed")
            }
            StoreError::Unavailable(why) => write!(f, "the history store failed: {why}"),
            StoreError::Corrupt(why) if why.is_empty() => {
                f.write_str("a stored record is unreadable")
            }
            StoreError::Corrupt(why) => write!(f, "a stored record is unreadable: {why}"),
            StoreError::Full(why) => write!(f, "the history store is full: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The history store. Every method answers within the store's timeout. Reads of another
/// owner's record answer as if it did not exist.
pub trait History: Send + Sync {
    /// The backend's name for logs and `--help`: `memory`, `none`, `postgres`, `redis`.
    fn backend(&self) -> &'static str;

    /// Stores (or replaces, same id and owner) a response. Done only once durable.
    fn put_response(&self, record: ResponseRecord) -> StoreFuture<'_, ()>;
    fn get_response<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ResponseRecord>>;
    /// Whether there was such a response to delete.
    fn delete_response<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool>;

    fn create_conversation(&self, record: ConversationRecord) -> StoreFuture<'_, ()>;
    /// A conversation not deleted.
    fn get_conversation<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>>;
    /// Merges `patch` (a JSON object; a null value deletes its key) into the metadata,
    /// atomically, and answers the updated conversation. Uses [`merge_metadata`].
    fn patch_metadata<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
        patch: &'a str,
    ) -> StoreFuture<'a, Result<ConversationRecord, PatchRefused>>;
    /// Soft delete: the conversation and its items answer as absent from then on.
    fn delete_conversation<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool>;

    /// Appends items in order, atomically: all or none (an id already there refuses all).
    fn append_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        items: Vec<ItemRecord>,
    ) -> StoreFuture<'a, Result<(), AppendRefused>>;
    /// `None` when the conversation does not exist (or is another owner's, or deleted).
    /// `after` naming no item of the conversation gives an empty page.
    fn list_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        query: &'a ItemsQuery,
    ) -> StoreFuture<'a, Option<Vec<ItemRecord>>>;
    fn get_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>>;
    /// An item of any live conversation of `owner`, by id: what an `item_reference`
    /// names. Items of responses stored without a conversation are not found here.
    fn find_item<'a>(
        &'a self,
        owner: &'a Owner,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>>;
    /// Soft delete of one item; answers the conversation, `None` when the conversation or
    /// the item does not exist.
    fn delete_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>>;
}

/// Which store `--history-backend` picks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HistoryBackend {
    /// This process only, bounded by `--history-memory-max-*`.
    #[default]
    Memory,
    /// Nothing kept: responses are not retrievable, conversations cannot be created.
    None,
    /// A Postgres server (`--postgres-db-url`), shared by every replica using it.
    Postgres,
    /// A Redis server (`--redis-url`), shared by every replica using it.
    Redis,
}

impl HistoryBackend {
    pub const ALL: &'static [HistoryBackend] = &[
        HistoryBackend::Memory,
        HistoryBackend::None,
        HistoryBackend::Postgres,
        HistoryBackend::Redis,
    ];

    pub fn as_str(&self) -> &'static str {
        match self {
            HistoryBackend::Memory => "memory",
            HistoryBackend::None => "none",
            HistoryBackend::Postgres => "postgres",
            HistoryBackend::Redis => "redis",
        }
    }
}

/// The history store's flag group.
#[derive(Clone, Debug)]
pub struct HistorySettings {
    /// `--history-backend`.
    pub backend: HistoryBackend,
    /// `--postgres-db-url`: needed by the `postgres` backend. A secret: it may carry the
    /// password.
    pub postgres_url: Option<Secret>,
    /// `--redis-url`: needed by the `redis` backend. A secret: it may carry the password.
    pub redis_url: Option<Secret>,
    /// `--history-pool-size`: connections a durable backend keeps open at most.
    pub pool_size: usize,
    /// `--history-timeout-secs`: the longest a store call (pool wait, connect and query
    /// included) may take before it fails with [`StoreError::Timeout`].
    pub timeout: Duration,
    /// `--history-memory-max-responses`: responses the `memory` backend keeps at most.
    pub memory_max_responses: usize,
    /// `--history-memory-max-conversations`: conversations the `memory` backend keeps at
    /// most.
    pub memory_max_conversations: usize,
    /// `--history-memory-max-bytes`: bytes the `memory` backend keeps at most, all tenants
    /// together.
    pub memory_max_bytes: usize,
    /// `--history-memory-max-bytes-per-tenant`: bytes the `memory` backend keeps at most
    /// for one tenant (the shared space counts as one).
    pub memory_max_bytes_per_tenant: usize,
}

impl Default for HistorySettings {
    fn default() -> HistorySettings {
        HistorySettings {
            backend: HistoryBackend::Memory,
            postgres_url: None,
            redis_url: None,
            pool_size: 8,
            timeout: Duration::from_secs(5),
            memory_max_responses: 10_000,
            memory_max_conversations: 10_000,
            memory_max_bytes: memory::DEFAULT_MAX_BYTES,
            memory_max_bytes_per_tenant: memory::DEFAULT_MAX_BYTES_PER_TENANT,
        }
    }
}

/// The store `settings` pick, ready to use: a durable backend is connected (and, for
/// Postgres, its schema migrated) before this returns, so a gateway that cannot keep what
/// it promises fails at startup instead of on the first stored response.
///
/// Blocks the calling thread for at most a few store timeouts; call it at startup, not
/// from a runtime's task.
pub fn open(settings: &HistorySettings) -> Result<Arc<dyn History>, StoreError> {
    let missing = |flag: &str| {
        StoreError::Unavailable(format!(
            "--history-backend {} needs {flag}",
            settings.backend.as_str()
        ))
    };
    match settings.backend {
        HistoryBackend::Memory => Ok(Arc::new(guard::Guarded::new(MemoryHistory::with_limits(
            MemoryLimits {
                max_responses: settings.memory_max_responses,
                max_conversations: settings.memory_max_conversations,
                max_bytes: settings.memory_max_bytes,
                max_bytes_per_tenant: settings.memory_max_bytes_per_tenant,
            },
        )))),
        HistoryBackend::None => Ok(Arc::new(guard::Guarded::new(none::NoHistory))),
        HistoryBackend::Postgres => {
            let url = settings
                .postgres_url
                .as_ref()
                .ok_or_else(|| missing("--postgres-db-url"))?;
            let store = postgres::PostgresHistory::open(url, settings.pool_size, settings.timeout)?;
            Ok(Arc::new(guard::Guarded::new(store)))
        }
        HistoryBackend::Redis => {
            let url = settings
                .redis_url
                .as_ref()
                .ok_or_else(|| missing("--redis-url"))?;
            let store = redis::RedisHistory::open(url, settings.pool_size, settings.timeout)?;
            Ok(Arc::new(guard::Guarded::new(store)))
        }
    }
}

/// The metadata `current` with `patch` merged in: a string value sets its key, a null
/// deletes it. Both are JSON objects; the result keeps the order keys were first set.
pub fn merge_metadata(current: &str, patch: &str) -> Result<String, PatchRefused> {
    use serde_json::{Map, Value};
    let mut merged: Map<String, Value> = serde_json::from_str(current)
        .map_err(|err| PatchRefused::BadPatch(format!("stored metadata unreadable: {err}")))?;
    let patch: Map<String, Value> = serde_json::from_str(patch)
        .map_err(|_| PatchRefused::BadPatch("metadata must be an object".into()))?;
    for (key, value) in patch {
        match value {
            Value::Null => {
                merged.remove(&key);
            }
            Value::String(_) => {
                merged.insert(key, value);
            }
            _ => {
                return Err(PatchRefused::BadPatch(format!(
                    "metadata value of {key:?} must be a string or null"
                )))
            }
        }
    }
    if merged.len() > MAX_METADATA_PROPERTIES {
        return Err(PatchRefused::TooManyProperties);
    }
    Ok(Value::Object(merged).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sets_replaces_and_deletes() {
        let merged = merge_metadata(r#"{"a":"1","b":"2"}"#, r#"{"b":"3","a":null,"c":"4"}"#);
        assert_eq!(merged.as_deref(), Ok(r#"{"b":"3","c":"4"}"#));
    }

    #[test]
    fn merge_caps_properties() {
        let current: serde_json::Map<_, _> = (0..16)
            .map(|i| (format!("k{i}"), serde_json::Value::String("v".into())))
            .collect();
        let current = serde_json::Value::Object(current).to_string();
        assert_eq!(
            merge_metadata(&current, r#"{"x":"y"}"#),
            Err(PatchRefused::TooManyProperties)
        );
        assert!(merge_metadata(&current, r#"{"k0":null,"x":"y"}"#).is_ok());
    }

    #[test]
    fn merge_refuses_non_strings() {
        assert!(matches!(
            merge_metadata("{}", r#"{"a":1}"#),
            Err(PatchRefused::BadPatch(_))
        ));
        assert!(matches!(
            merge_metadata("{}", "[]"),
            Err(PatchRefused::BadPatch(_))
        ));
    }
}

//! The Conversations API (`/v1/conversations`, spec 2): conversations and their items,
//! kept in the history store (`history::History`), each under the caller's
//! [`Owner`] so that a tenant never sees another's (an unknown id and a foreign one both
//! answer 404).
//!
//! This file routes the eight endpoints and speaks to the store; the rules live beside it:
//! `ids` (checking and making ids), `items` (item types and shapes), `metadata` (its
//! bounds) and `page` (the list query and the list object). Every id is checked before
//! the store is asked; every body is read bounded in size and time. Errors go through
//! `http::error` (`{"error": <message>}`, the structured `item_already_in_conversation`,
//! 500 `storage_error` when the store fails).

pub mod ids;
pub mod items;
pub mod metadata;
pub mod page;

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::http::request_body::RequestBody;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::auth::gate::Tenant;
use crate::history::{
    AppendRefused, ConversationRecord, History, ItemRecord, Owner, PatchRefused, StoreError,
};
use crate::http::body::RespBody;
use crate::http::error::GatewayError;
use crate::http::reply;
use crate::http::route::{path_param, Route};
use crate::http::upload::read_whole;
use items::Entry;

/// Largest request body: twenty items with their content (images as data URLs included).
pub const MAX_BODY: u64 = 16 * 1024 * 1024;
/// Time a client has to send its body.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

type Answer = Result<Response<RespBody>, GatewayError>;

/// Whether `route` is one of the eight routes served here.
pub fn serves(route: Route) -> bool {
    matches!(
        route,
        Route::ConversationsCreate
            | Route::ConversationGet
            | Route::ConversationUpdate
            | Route::ConversationDelete
            | Route::ConversationItemsList
            | Route::ConversationItemsCreate
            | Route::ConversationItemGet
            | Route::ConversationItemDelete
    )
}

/// Serves one request of a route [`serves`] accepts, for the caller's owner (the tenant
/// `app::authenticate` attached, else the shared space).
pub async fn serve(history: &dyn History, route: Route, req: Request<RequestBody>) -> Answer {
    let (parts, body) = req.into_parts();
    let owner = parts
        .extensions
        .get::<Tenant>()
        .map_or_else(Owner::shared, |tenant| Owner::tenant(tenant.0.clone()));
    let path = parts.uri.path();
    if route == Route::ConversationsCreate {
        let body = read_body(body).await?;
        return create(history, &owner, &body).await;
    }
    let conversation = conversation_id(path)?;
    match route {
        Route::ConversationGet => get(history, &owner, conversation).await,
        Route::ConversationUpdate => {
            let body = read_body(body).await?;
            update(history, &owner, conversation, &body).await
        }
        Route::ConversationDelete => delete(history, &owner, conversation).await,
        Route::ConversationItemsList => {
            let query = page::parse_query(parts.uri.query()).map_err(invalid)?;
            let page = history
                .list_items(&owner, conversation, &query)
                .await
                .map_err(storage)?
                .ok_or(GatewayError::ConversationNotFound)?;
            let has_more = page.len() == query.limit;
            list_answer(&page, has_more, &[])
        }
        Route::ConversationItemsCreate => {
            let body = read_body(body).await?;
            add_items(history, &owner, conversation, &body).await
        }
        Route::ConversationItemGet => {
            let item = item_id(path)?;
            match history
                .get_item(&owner, conversation, item)
                .await
                .map_err(storage)?
            {
                Some(record) => {
                    let raw = page::raw(&record.item, &record.id).map_err(corrupt)?;
                    Ok(reply::json(StatusCode::OK, raw.get().to_owned()))
                }
                None => Err(item_missing(history, &owner, conversation).await),
            }
        }
        Route::ConversationItemDelete => {
            let item = item_id(path)?;
            match history
                .delete_item(&owner, conversation, item)
                .await
                .map_err(storage)?
            {
                Some(record) => conversation_answer(&record),
                None => Err(item_missing(history, &owner, conversation).await),
            }
        }
        r => Err(GatewayError::NotImplemented {
            route: r.template(),
        }),
    }
}

/// `POST /v1/conversations`: `{metadata?, items?}`.
async fn create(history: &dyn History, owner: &Owner, body: &[u8]) -> Answer {
    let mut fields = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        object(body)?
    };
    let metadata = metadata::check_new(fields.remove("metadata")).map_err(invalid)?;
    let entries = match fields.remove("items") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => items::check(list, false).map_err(invalid)?,
        Some(_) => return Err(malformed("'items' must be an array")),
    };
    distinct(&entries)?;
    let (records, _) = resolve(history, owner, entries).await?;
    let record = ConversationRecord {
        id: ids::new_conversation(),
        owner: owner.clone(),
        created_at: now(),
        metadata,
    };
    history
        .create_conversation(record.clone())
        .await
        .map_err(storage)?;
    if !records.is_empty() {
        let appended = history.append_items(owner, &record.id, records).await;
        if let Err(err) = refusal(appended) {
            // All or nothing: a conversation whose initial items failed is not left behind.
            // The answer is the append's error whatever this delete does.
            let _ = history.delete_conversation(owner, &record.id).await;
            return Err(err);
        }
    }
    conversation_answer(&record)
}

/// `GET /v1/conversations/{id}`.
async fn get(history: &dyn History, owner: &Owner, id: &str) -> Answer {
    let record = history
        .get_conversation(owner, id)
        .await
        .map_err(storage)?
        .ok_or(GatewayError::ConversationNotFound)?;
    conversation_answer(&record)
}

/// `POST /v1/conversations/{id}`: `{metadata}` merged, a null value deleting its key.
async fn update(history: &dyn History, owner: &Owner, id: &str, body: &[u8]) -> Answer {
    let mut fields = object(body)?;
    let patch = fields
        .remove("metadata")
        .ok_or_else(|| invalid("'metadata' is required".into()))?;
    let patch = metadata::check_patch(patch).map_err(invalid)?;
    let record = history
        .patch_metadata(owner, id, &patch)
        .await
        .map_err(storage)?
        .map_err(|refused| match refused {
            PatchRefused::NoConversation => GatewayError::ConversationNotFound,
            PatchRefused::TooManyProperties => invalid(metadata::too_many()),
            PatchRefused::BadPatch(why) => invalid(why),
        })?;
    conversation_answer(&record)
}

/// `DELETE /v1/conversations/{id}`: a soft delete.
async fn delete(history: &dyn History, owner: &Owner, id: &str) -> Answer {
    if !history
        .delete_conversation(owner, id)
        .await
        .map_err(storage)?
    {
        return Err(GatewayError::ConversationNotFound);
    }
    #[derive(Serialize)]
    struct Deleted<'a> {
        id: &'a str,
        object: &'static str,
        deleted: bool,
    }
    let body = Deleted {
        id,
        object: "conversation.deleted",
        deleted: true,
    };
    json_answer(&body)
}

/// `POST /v1/conversations/{id}/items`: `{items}`, answered with the list of the items
/// added (and `warnings` for types not fully supported).
async fn add_items(history: &dyn History, owner: &Owner, id: &str, body: &[u8]) -> Answer {
    let mut fields = object(body)?;
    let entries = match fields.remove("items") {
        Some(Value::Array(list)) => items::check(list, true).map_err(invalid)?,
        None | Some(Value::Null) => return Err(invalid("'items' is required".into())),
        Some(_) => return Err(malformed("'items' must be an array")),
    };
    distinct(&entries)?;
    if history
        .get_conversation(owner, id)
        .await
        .map_err(storage)?
        .is_none()
    {
        return Err(GatewayError::ConversationNotFound);
    }
    let (records, warnings) = resolve(history, owner, entries).await?;
    refusal(history.append_items(owner, id, records.clone()).await)?;
    list_answer(&records, false, &warnings)
}

/// The records of checked entries: new items stamped with `created_at`, references
/// replaced by the item they name (404 when the owner has no such item). Also the
/// `warnings` of the new items.
async fn resolve(
    history: &dyn History,
    owner: &Owner,
    entries: Vec<Entry>,
) -> Result<(Vec<ItemRecord>, Vec<String>), GatewayError> {
    let created_at = now();
    let mut records = Vec::with_capacity(entries.len());
    let mut warnings = Vec::new();
    for entry in entries {
        match entry {
            Entry::New {
                id,
                mut item,
                warning,
            } => {
                item.insert("created_at".into(), Value::from(created_at));
                warnings.extend(warning);
                records.push(ItemRecord {
                    id,
                    created_at,
                    item: Value::Object(item).to_string(),
                });
            }
            Entry::Reference { id } => {
                let found = history
                    .find_item(owner, &id)
                    .await
                    .map_err(storage)?
                    .ok_or_else(|| GatewayError::ConversationItemNotFound {
                        message: format!("Referenced item '{id}' not found"),
                    })?;
                records.push(found);
            }
        }
    }
    Ok((records, warnings))
}

/// Refuses a request naming one id twice: the second would be an item already in the
/// conversation.
fn distinct(entries: &[Entry]) -> Result<(), GatewayError> {
    let mut seen = HashSet::with_capacity(entries.len());
    if entries.iter().all(|entry| seen.insert(entry.id())) {
        Ok(())
    } else {
        Err(GatewayError::ItemAlreadyInConversation)
    }
}

/// The error of an append the store refused (or failed).
fn refusal(appended: Result<Result<(), AppendRefused>, StoreError>) -> Result<(), GatewayError> {
    match appended.map_err(storage)? {
        Ok(()) => Ok(()),
        Err(AppendRefused::NoConversation) => Err(GatewayError::ConversationNotFound),
        Err(AppendRefused::AlreadyInConversation(_)) => {
            Err(GatewayError::ItemAlreadyInConversation)
        }
        Err(AppendRefused::Full) => Err(invalid(format!(
            "the conversation holds the most items it can ({})",
            crate::history::MAX_CONVERSATION_ITEMS
        ))),
        Err(AppendRefused::MalformedId(id)) => Err(invalid(format!("Invalid item ID: {id}"))),
    }
}

/// The 404 of an item that is not there: the conversation's when it is the conversation
/// that is missing.
async fn item_missing(history: &dyn History, owner: &Owner, conversation: &str) -> GatewayError {
    match history.get_conversation(owner, conversation).await {
        Ok(Some(_)) => GatewayError::ConversationItemNotFound {
            message: "Item not found in this conversation".into(),
        },
        Ok(None) => GatewayError::ConversationNotFound,
        Err(err) => storage(err),
    }
}

/// The conversation id of the path, checked (400 when malformed).
fn conversation_id(path: &str) -> Result<&str, GatewayError> {
    let id = path_param(path, 2).unwrap_or("");
    ids::check_conversation(id).map_err(invalid)?;
    Ok(id)
}

/// The item id of the path, checked (400 when malformed).
fn item_id(path: &str) -> Result<&str, GatewayError> {
    let id = path_param(path, 4).unwrap_or("");
    ids::check_item(id, "item ID").map_err(invalid)?;
    Ok(id)
}

/// Reads a request body, bounded in size and time.
async fn read_body(body: RequestBody) -> Result<Bytes, GatewayError> {
    read_whole(body, MAX_BODY, Instant::now() + BODY_TIMEOUT)
        .await
        .map_err(|err| GatewayError::from_read(err, MAX_BODY))
}

/// A body that must be a JSON object.
fn object(body: &[u8]) -> Result<Map<String, Value>, GatewayError> {
    serde_json::from_slice(body).map_err(|err| {
        let why = if err.is_data() {
            "the request body must be a JSON object".to_owned()
        } else {
            // serde_json's syntax errors name a line and column, never the body itself.
            format!("the request body is not valid JSON: {err}")
        };
        malformed(&why)
    })
}

#[derive(Serialize)]
struct ConversationObject<'a> {
    id: &'a str,
    object: &'static str,
    created_at: i64,
    metadata: &'a RawValue,
}

/// `{id, object: "conversation", created_at, metadata}`.
fn conversation_answer(record: &ConversationRecord) -> Answer {
    let metadata: &RawValue = serde_json::from_str(&record.metadata)
        .map_err(|_| corrupt(format!("the metadata of {} is unreadable", record.id)))?;
    json_answer(&ConversationObject {
        id: &record.id,
        object: "conversation",
        created_at: record.created_at,
        metadata,
    })
}

fn list_answer(records: &[ItemRecord], has_more: bool, warnings: &[String]) -> Answer {
    let body = page::render(records, has_more, warnings).map_err(corrupt)?;
    Ok(reply::json(StatusCode::OK, body))
}

fn json_answer(body: &impl Serialize) -> Answer {
    let body = serde_json::to_vec(body).map_err(|err| corrupt(err.to_string()))?;
    Ok(reply::json(StatusCode::OK, body))
}

fn invalid(message: String) -> GatewayError {
    GatewayError::ConversationInvalid { message }
}

fn malformed(message: &str) -> GatewayError {
    GatewayError::ConversationMalformed {
        message: message.to_owned(),
    }
}

fn storage(err: StoreError) -> GatewayError {
    tracing::warn!(error = %err, "history store call failed");
    GatewayError::StorageError {
        message: err.to_string(),
    }
}

/// A stored record that does not read back: a storage error.
fn corrupt(why: String) -> GatewayError {
    storage(StoreError::Corrupt(why))
}

/// Unix seconds.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::history::{ItemsQuery, MemoryHistory, ResponseRecord, StoreFuture};

    /// A store whose every call fails as a timed-out one does.
    struct Failing;

    fn fail<'a, T: Send + 'a>() -> StoreFuture<'a, T> {
        Box::pin(std::future::ready(Err(StoreError::Timeout)))
    }

    impl History for Failing {
        fn backend(&self) -> &'static str {
            "failing"
        }
        fn put_response(&self, _: ResponseRecord) -> StoreFuture<'_, ()> {
            fail()
        }
        fn get_response<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ResponseRecord>> {
            fail()
        }
        fn delete_response<'a>(&'a self, _: &'a Owner, _: &'a str) -> StoreFuture<'a, bool> {
            fail()
        }
        fn create_conversation(&self, _: ConversationRecord) -> StoreFuture<'_, ()> {
            fail()
        }
        fn get_conversation<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ConversationRecord>> {
            fail()
        }
        fn patch_metadata<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a str,
        ) -> StoreFuture<'a, Result<ConversationRecord, PatchRefused>> {
            fail()
        }
        fn delete_conversation<'a>(&'a self, _: &'a Owner, _: &'a str) -> StoreFuture<'a, bool> {
            fail()
        }
        fn append_items<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: Vec<ItemRecord>,
        ) -> StoreFuture<'a, Result<(), AppendRefused>> {
            fail()
        }
        fn list_items<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a ItemsQuery,
        ) -> StoreFuture<'a, Option<Vec<ItemRecord>>> {
            fail()
        }
        fn get_item<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ItemRecord>> {
            fail()
        }
        fn find_item<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ItemRecord>> {
            fail()
        }
        fn delete_item<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ConversationRecord>> {
            fail()
        }
    }

    fn storage_error(answer: Answer) {
        let Err(err) = answer else {
            panic!("a failing store is an error");
        };
        assert!(matches!(err, GatewayError::StorageError { .. }), "{err:?}");
        assert_eq!(err.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(err.code(), "storage_error");
    }

    #[tokio::test]
    async fn a_failing_store_is_500_storage_error() {
        let owner = Owner::shared();
        let store = Failing;
        storage_error(create(&store, &owner, b"{}").await);
        storage_error(get(&store, &owner, "conv_1").await);
        storage_error(update(&store, &owner, "conv_1", br#"{"metadata":{}}"#).await);
        storage_error(delete(&store, &owner, "conv_1").await);
        let items = br#"{"items":[{"role":"user","content":"x"}]}"#;
        storage_error(add_items(&store, &owner, "conv_1", items).await);
        assert!(matches!(
            item_missing(&store, &owner, "conv_1").await,
            GatewayError::StorageError { .. }
        ));
    }

    #[tokio::test]
    async fn initial_items_are_stored_and_unknown_references_refused() {
        let store = MemoryHistory::new(10, 10);
        let owner = Owner::shared();
        let body = json!({"items": [{"type": "item_reference", "id": "msg_nowhere"}]});
        let Err(err) = create(&store, &owner, body.to_string().as_bytes()).await else {
            panic!("an unknown reference is an error");
        };
        assert_eq!(err.code(), "not_found");
        let body = json!({"items": [{"id": "msg_1", "role": "user", "content": "x"}]});
        let Ok(resp) = create(&store, &owner, body.to_string().as_bytes()).await else {
            panic!("a conversation with one item");
        };
        assert_eq!(resp.status(), StatusCode::OK);
        let found = store.find_item(&owner, "msg_1").await.unwrap().unwrap();
        let item: Value = serde_json::from_str(&found.item).unwrap();
        assert_eq!(item["content"][0]["type"], "input_text");
        assert_eq!(item["created_at"], found.created_at);
        // Another owner does not see it.
        let other = Owner::tenant("t".into());
        assert_eq!(store.find_item(&other, "msg_1").await.unwrap(), None);
    }

    #[test]
    fn only_the_eight_routes_are_served_here() {
        assert!(serves(Route::ConversationsCreate));
        assert!(serves(Route::ConversationItemDelete));
        assert!(!serves(Route::ResponsesCreate));
        assert!(!serves(Route::Health));
    }
}

//! `--history-backend none`: a gateway that keeps no history.
//!
//! For an operator who wants no server-side state (nothing of a conversation outlives the
//! request). A stored response is accepted and forgotten, as if every request had
//! `store: false`: the response is still answered, a later `GET /v1/responses/{id}` or
//! `previous_response_id` finds nothing (404 / 400 `previous_response_not_found`).
//! Creating a conversation is refused with a storage error (there would be no way to ever
//! read it back, and answering a `conv_…` id that does not exist would be a lie), so every
//! conversation route answers as for an unknown conversation.

use super::{
    AppendRefused, ConversationRecord, History, ItemRecord, ItemsQuery, Owner, PatchRefused,
    ResponseRecord, StoreError, StoreFuture,
};

/// The store that keeps nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHistory;

/// Every read answers "absent", so the async shape is only for the trait.
fn ready<'a, T: Send + 'a>(value: Result<T, StoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl History for NoHistory {
    fn backend(&self) -> &'static str {
        "none"
    }

    fn put_response(&self, _record: ResponseRecord) -> StoreFuture<'_, ()> {
        ready(Ok(()))
    }

    fn get_response<'a>(
        &'a self,
        _owner: &'a Owner,
        _id: &'a str,
    ) -> StoreFuture<'a, Option<ResponseRecord>> {
        ready(Ok(None))
    }

    fn delete_response<'a>(&'a self, _owner: &'a Owner, _id: &'a str) -> StoreFuture<'a, bool> {
        ready(Ok(false))
    }

    fn create_conversation(&self, _record: ConversationRecord) -> StoreFuture<'_, ()> {
        ready(Err(StoreError::Unavailable(
            "conversations are not kept (--history-backend none)".into(),
        )))
    }

    fn get_conversation<'a>(
        &'a self,
        _owner: &'a Owner,
        _id: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        ready(Ok(None))
    }

    fn patch_metadata<'a>(
        &'a self,
        _owner: &'a Owner,
        _id: &'a str,
        _patch: &'a str,
    ) -> StoreFuture<'a, Result<ConversationRecord, PatchRefused>> {
        ready(Ok(Err(PatchRefused::NoConversation)))
    }

    fn delete_conversation<'a>(&'a self, _owner: &'a Owner, _id: &'a str) -> StoreFuture<'a, bool> {
        ready(Ok(false))
    }

    fn append_items<'a>(
        &'a self,
        _owner: &'a Owner,
        _conversation: &'a str,
        _items: Vec<ItemRecord>,
    ) -> StoreFuture<'a, Result<(), AppendRefused>> {
        ready(Ok(Err(AppendRefused::NoConversation)))
    }

    fn list_items<'a>(
        &'a self,
        _owner: &'a Owner,
        _conversation: &'a str,
        _query: &'a ItemsQuery,
    ) -> StoreFuture<'a, Option<Vec<ItemRecord>>> {
        ready(Ok(None))
    }

    fn get_item<'a>(
        &'a self,
        _owner: &'a Owner,
        _conversation: &'a str,
        _item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        ready(Ok(None))
    }

    fn find_item<'a>(
        &'a self,
        _owner: &'a Owner,
        _item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        ready(Ok(None))
    }

    fn delete_item<'a>(
        &'a self,
        _owner: &'a Owner,
        _conversation: &'a str,
        _item: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        ready(Ok(None))
    }
}

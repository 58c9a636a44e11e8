//! The guard every backend sits behind ([`super::open`]): the checks no store should have
//! to repeat, and the one place a store's failure is turned into what a client may see.
//!
//! - Ids: an id that is not storable ([`is_storable_id`]: 1 to
//!   [`super::MAX_STORED_ID_BYTES`] bytes of printable ASCII) names nothing. A read of one
//!   answers "absent" (the routes' 404, or 400 `previous_response_not_found`), a delete
//!   "nothing deleted", an append to one [`AppendRefused::NoConversation`] (or, for a
//!   malformed item id, [`AppendRefused::MalformedId`]), all without asking the server: a
//!   NUL byte would be an encoding error in Postgres, a 200 KB id a 200 KB key in Redis.
//!   Every route and every caller gets this, whichever backend is configured.
//! - Errors: a server's own message (`invalid byte sequence …`, `broken pipe`, its address)
//!   is logged here, with the backend and the call, and the error handed on carries none of
//!   it: the routes put an error's text into the client's body, and a client has no use for
//!   (and no business reading) a database's internals. A timeout and a bound's refusal
//!   ([`StoreError::Full`], written by the store for the client) pass as they are.

use super::{
    is_storable_id, shown, AppendRefused, ConversationRecord, History, ItemRecord, ItemsQuery,
    Owner, PatchRefused, ResponseRecord, StoreError, StoreFuture,
};

/// A backend behind the guard.
pub(crate) struct Guarded<H> {
    inner: H,
}

impl<H: History> Guarded<H> {
    pub(crate) fn new(inner: H) -> Guarded<H> {
        Guarded { inner }
    }

    /// `answer`, with a failure's detail logged and left out of the error handed on.
    fn public<T>(
        &self,
        call: &'static str,
        answer: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let backend = self.inner.backend();
        answer.map_err(|err| match err {
            StoreError::Timeout => {
                tracing::warn!(backend, call, "history store call timed out");
                StoreError::Timeout
            }
            StoreError::Unavailable(why) => {
                tracing::warn!(backend, call, error = %why, "history store call failed");
                StoreError::Unavailable(String::new())
            }
            StoreError::Corrupt(why) => {
                tracing::error!(backend, call, error = %why, "history store record unreadable");
                StoreError::Corrupt(String::new())
            }
            StoreError::Full(why) => {
                tracing::info!(backend, call, reason = %why, "history store refused a write");
                StoreError::Full(why)
            }
        })
    }
}

fn answer<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

/// A write the gateway should never make (its own ids are always storable): refused as a
/// store failure, the reason logged.
fn unstorable<'a, T: Send + 'a>(backend: &'static str, what: &str, id: &str) -> StoreFuture<'a, T> {
    tracing::error!(backend, what, id = %shown(id), "history store refused an unstorable id");
    Box::pin(std::future::ready(Err(StoreError::Unavailable(
        String::new(),
    ))))
}

impl<H: History> History for Guarded<H> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn put_response(&self, record: ResponseRecord) -> StoreFuture<'_, ()> {
        if !is_storable_id(&record.id) {
            return unstorable(self.backend(), "response id", &record.id);
        }
        if let Some(conversation) = record.conversation.as_deref() {
            if !is_storable_id(conversation) {
                return unstorable(self.backend(), "conversation id", conversation);
            }
        }
        Box::pin(async move { self.public("put_response", self.inner.put_response(record).await) })
    }

    fn get_response<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ResponseRecord>> {
        if !is_storable_id(id) {
            return answer(None);
        }
        Box::pin(
            async move { self.public("get_response", self.inner.get_response(owner, id).await) },
        )
    }

    fn delete_response<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        if !is_storable_id(id) {
            return answer(false);
        }
        Box::pin(async move {
            self.public(
                "delete_response",
                self.inner.delete_response(owner, id).await,
            )
        })
    }

    fn create_conversation(&self, record: ConversationRecord) -> StoreFuture<'_, ()> {
        if !is_storable_id(&record.id) {
            return unstorable(self.backend(), "conversation id", &record.id);
        }
        Box::pin(async move {
            self.public(
                "create_conversation",
                self.inner.create_conversation(record).await,
            )
        })
    }

    fn get_conversation<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        if !is_storable_id(id) {
            return answer(None);
        }
        Box::pin(async move {
            self.public(
                "get_conversation",
                self.inner.get_conversation(owner, id).await,
            )
        })
    }

    fn patch_metadata<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
        patch: &'a str,
    ) -> StoreFuture<'a, Result<ConversationRecord, PatchRefused>> {
        if !is_storable_id(id) {
            return answer(Err(PatchRefused::NoConversation));
        }
        Box::pin(async move {
            self.public(
                "patch_metadata",
                self.inner.patch_metadata(owner, id, patch).await,
            )
        })
    }

    fn delete_conversation<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        if !is_storable_id(id) {
            return answer(false);
        }
        Box::pin(async move {
            self.public(
                "delete_conversation",
                self.inner.delete_conversation(owner, id).await,
            )
        })
    }

    fn append_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        items: Vec<ItemRecord>,
    ) -> StoreFuture<'a, Result<(), AppendRefused>> {
        if !is_storable_id(conversation) {
            return answer(Err(AppendRefused::NoConversation));
        }
        if let Some(bad) = items.iter().find(|item| !is_storable_id(&item.id)) {
            return answer(Err(AppendRefused::MalformedId(shown(&bad.id))));
        }
        Box::pin(async move {
            self.public(
                "append_items",
                self.inner.append_items(owner, conversation, items).await,
            )
        })
    }

    fn list_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        query: &'a ItemsQuery,
    ) -> StoreFuture<'a, Option<Vec<ItemRecord>>> {
        if !is_storable_id(conversation) {
            return answer(None);
        }
        if query
            .after
            .as_deref()
            .is_some_and(|after| !is_storable_id(after))
        {
            // `after` naming no item gives an empty page, of a conversation that exists.
            return Box::pin(async move {
                let empty = ItemsQuery {
                    limit: 0,
                    order: query.order,
                    after: None,
                };
                let page = self.inner.list_items(owner, conversation, &empty).await;
                self.public("list_items", page.map(|found| found.map(|_| Vec::new())))
            });
        }
        Box::pin(async move {
            self.public(
                "list_items",
                self.inner.list_items(owner, conversation, query).await,
            )
        })
    }

    fn get_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        if !is_storable_id(conversation) || !is_storable_id(item) {
            return answer(None);
        }
        Box::pin(async move {
            self.public(
                "get_item",
                self.inner.get_item(owner, conversation, item).await,
            )
        })
    }

    fn find_item<'a>(
        &'a self,
        owner: &'a Owner,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        if !is_storable_id(item) {
            return answer(None);
        }
        Box::pin(async move { self.public("find_item", self.inner.find_item(owner, item).await) })
    }

    fn delete_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        if !is_storable_id(conversation) || !is_storable_id(item) {
            return answer(None);
        }
        Box::pin(async move {
            self.public(
                "delete_item",
                self.inner.delete_item(owner, conversation, item).await,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::MemoryHistory;

    /// A store that fails every call with a server's own words, and counts its calls.
    struct Leaky(std::sync::atomic::AtomicUsize);

    impl Leaky {
        fn fail<'a, T: Send + 'a>(&self) -> StoreFuture<'a, T> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Box::pin(std::future::ready(Err(StoreError::Unavailable(
                "postgres db:5432/h: invalid byte sequence for encoding \"UTF8\": 0x00".into(),
            ))))
        }
    }

    impl History for Leaky {
        fn backend(&self) -> &'static str {
            "leaky"
        }
        fn put_response(&self, _: ResponseRecord) -> StoreFuture<'_, ()> {
            self.fail()
        }
        fn get_response<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ResponseRecord>> {
            self.fail()
        }
        fn delete_response<'a>(&'a self, _: &'a Owner, _: &'a str) -> StoreFuture<'a, bool> {
            self.fail()
        }
        fn create_conversation(&self, _: ConversationRecord) -> StoreFuture<'_, ()> {
            self.fail()
        }
        fn get_conversation<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ConversationRecord>> {
            self.fail()
        }
        fn patch_metadata<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a str,
        ) -> StoreFuture<'a, Result<ConversationRecord, PatchRefused>> {
            self.fail()
        }
        fn delete_conversation<'a>(&'a self, _: &'a Owner, _: &'a str) -> StoreFuture<'a, bool> {
            self.fail()
        }
        fn append_items<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: Vec<ItemRecord>,
        ) -> StoreFuture<'a, Result<(), AppendRefused>> {
            self.fail()
        }
        fn list_items<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a ItemsQuery,
        ) -> StoreFuture<'a, Option<Vec<ItemRecord>>> {
            self.fail()
        }
        fn get_item<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ItemRecord>> {
            self.fail()
        }
        fn find_item<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ItemRecord>> {
            self.fail()
        }
        fn delete_item<'a>(
            &'a self,
            _: &'a Owner,
            _: &'a str,
            _: &'a str,
        ) -> StoreFuture<'a, Option<ConversationRecord>> {
            self.fail()
        }
    }

    fn calls(store: &Guarded<Leaky>) -> usize {
        store.inner.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[tokio::test]
    async fn malformed_ids_name_nothing_and_never_reach_the_store() {
        let store = Guarded::new(Leaky(Default::default()));
        let owner = Owner::shared();
        let long = "r".repeat(200_000);
        for id in ["resp_\0", "conv_a b", "", long.as_str(), "conv_é"] {
            assert_eq!(store.get_response(&owner, id).await, Ok(None));
            assert_eq!(store.delete_response(&owner, id).await, Ok(false));
            assert_eq!(store.get_conversation(&owner, id).await, Ok(None));
            assert_eq!(store.delete_conversation(&owner, id).await, Ok(false));
            assert_eq!(
                store.patch_metadata(&owner, id, "{}").await,
                Ok(Err(PatchRefused::NoConversation))
            );
            assert_eq!(
                store.append_items(&owner, id, Vec::new()).await,
                Ok(Err(AppendRefused::NoConversation))
            );
            let query = ItemsQuery {
                limit: 10,
                order: crate::history::Order::Asc,
                after: None,
            };
            assert_eq!(store.list_items(&owner, id, &query).await, Ok(None));
            assert_eq!(store.get_item(&owner, "conv_1", id).await, Ok(None));
            assert_eq!(store.find_item(&owner, id).await, Ok(None));
            assert_eq!(store.delete_item(&owner, "conv_1", id).await, Ok(None));
        }
        assert_eq!(calls(&store), 0, "no malformed id reached the store");
        let item = ItemRecord {
            id: long.clone(),
            created_at: 1,
            item: "{}".into(),
        };
        match store.append_items(&owner, "conv_1", vec![item]).await {
            Ok(Err(AppendRefused::MalformedId(shown))) => assert!(shown.len() < 80, "{shown}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(calls(&store), 0);
    }

    #[tokio::test]
    async fn a_stores_own_words_stay_out_of_the_error() {
        let store = Guarded::new(Leaky(Default::default()));
        let err = store
            .get_response(&Owner::shared(), "resp_1")
            .await
            .unwrap_err();
        assert_eq!(err, StoreError::Unavailable(String::new()));
        let text = err.to_string();
        assert!(
            !text.contains("byte sequence") && !text.contains("5432"),
            "{text}"
        );
        assert_eq!(calls(&store), 1);
    }

    #[tokio::test]
    async fn a_malformed_after_gives_an_empty_page_of_a_known_conversation() {
        let store = Guarded::new(MemoryHistory::new(4, 4));
        let owner = Owner::shared();
        let record = ConversationRecord {
            id: "conv_1".into(),
            owner: owner.clone(),
            created_at: 1,
            metadata: "{}".into(),
        };
        store.create_conversation(record).await.unwrap();
        let query = ItemsQuery {
            limit: 10,
            order: crate::history::Order::Asc,
            after: Some("a\0b".into()),
        };
        assert_eq!(
            store.list_items(&owner, "conv_1", &query).await,
            Ok(Some(Vec::new()))
        );
        assert_eq!(store.list_items(&owner, "conv_2", &query).await, Ok(None));
    }
}

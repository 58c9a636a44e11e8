//! The `memory` backend: the history of this process, bounded, gone at restart.
//!
//! One short critical section per call (no await while the lock is held), so a call never
//! waits on another for longer than a map operation. When a bound is reached the oldest
//! response (or conversation) is dropped to make room: a busy gateway forgets its oldest
//! history rather than refusing new requests. Durable or shared history is what the
//! `postgres` and `redis` backends are for.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};

use super::{
    merge_metadata, AppendRefused, ConversationRecord, History, ItemRecord, ItemsQuery, Order,
    Owner, PatchRefused, ResponseRecord, StoreFuture, MAX_CONVERSATION_ITEMS,
};

/// A record's key: its owner and its id.
type Key = (Owner, String);

/// History kept in this process.
pub struct MemoryHistory {
    state: Mutex<State>,
    max_responses: usize,
    max_conversations: usize,
}

#[derive(Default)]
struct State {
    responses: HashMap<Key, ResponseRecord>,
    /// Stored responses, oldest first: the eviction order.
    response_order: VecDeque<Key>,
    conversations: HashMap<Key, Conversation>,
    conversation_order: VecDeque<Key>,
    /// Where an item id lives, per owner: the conversation that last took it.
    item_index: HashMap<Key, String>,
}

struct Conversation {
    record: ConversationRecord,
    /// Items in the order they were added; deleted ones are `None` (ids stay taken).
    items: Vec<Option<ItemRecord>>,
    ids: HashSet<String>,
}

impl Conversation {
    fn live(&self) -> impl DoubleEndedIterator<Item = &ItemRecord> {
        self.items.iter().flatten()
    }
}

impl MemoryHistory {
    /// At most `max_responses` responses and `max_conversations` conversations (each
    /// at least 1).
    pub fn new(max_responses: usize, max_conversations: usize) -> MemoryHistory {
        MemoryHistory {
            state: Mutex::new(State::default()),
            max_responses: max_responses.max(1),
            max_conversations: max_conversations.max(1),
        }
    }

    /// The state; a panic elsewhere while it was held leaves maps that are still whole
    /// (every update is a single insert or remove), so a poisoned lock is used as is.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn key(owner: &Owner, id: &str) -> Key {
    (owner.clone(), id.to_owned())
}

fn ready<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

impl History for MemoryHistory {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn put_response(&self, record: ResponseRecord) -> StoreFuture<'_, ()> {
        let mut state = self.state();
        let key = key(&record.owner, &record.id);
        if state.responses.insert(key.clone(), record).is_none() {
            state.response_order.push_back(key);
            while state.response_order.len() > self.max_responses {
                if let Some(oldest) = state.response_order.pop_front() {
                    state.responses.remove(&oldest);
                }
            }
        }
        ready(())
    }

    fn get_response<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ResponseRecord>> {
        ready(self.state().responses.get(&key(owner, id)).cloned())
    }

    fn delete_response<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        let mut state = self.state();
        let key = key(owner, id);
        let found = state.responses.remove(&key).is_some();
        if found {
            state.response_order.retain(|k| *k != key);
        }
        ready(found)
    }

    fn create_conversation(&self, record: ConversationRecord) -> StoreFuture<'_, ()> {
        let mut state = self.state();
        let key = key(&record.owner, &record.id);
        let conversation = Conversation {
            record,
            items: Vec::new(),
            ids: HashSet::new(),
        };
        if state
            .conversations
            .insert(key.clone(), conversation)
            .is_none()
        {
            state.conversation_order.push_back(key);
            while state.conversation_order.len() > self.max_conversations {
                if let Some(oldest) = state.conversation_order.pop_front() {
                    forget_conversation(&mut state, &oldest);
                }
            }
        }
        ready(())
    }

    fn get_conversation<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        let state = self.state();
        ready(
            state
                .conversations
                .get(&key(owner, id))
                .map(|c| c.record.clone()),
        )
    }

    fn patch_metadata<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
        patch: &'a str,
    ) -> StoreFuture<'a, Result<ConversationRecord, PatchRefused>> {
        let mut state = self.state();
        let Some(conversation) = state.conversations.get_mut(&key(owner, id)) else {
            return ready(Err(PatchRefused::NoConversation));
        };
        let answer = merge_metadata(&conversation.record.metadata, patch).map(|merged| {
            conversation.record.metadata = merged;
            conversation.record.clone()
        });
        ready(answer)
    }

    fn delete_conversation<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        let mut state = self.state();
        let key = key(owner, id);
        let found = state.conversations.contains_key(&key);
        if found {
            forget_conversation(&mut state, &key);
            state.conversation_order.retain(|k| *k != key);
        }
        ready(found)
    }

    fn append_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        items: Vec<ItemRecord>,
    ) -> StoreFuture<'a, Result<(), AppendRefused>> {
        let mut state = self.state();
        let Some(conv) = state.conversations.get_mut(&key(owner, conversation)) else {
            return ready(Err(AppendRefused::NoConversation));
        };
        let mut batch = HashSet::with_capacity(items.len());
        for item in &items {
            if conv.ids.contains(&item.id) || !batch.insert(item.id.as_str()) {
                return ready(Err(AppendRefused::AlreadyInConversation(item.id.clone())));
            }
        }
        if conv.items.len() + items.len() > MAX_CONVERSATION_ITEMS {
            return ready(Err(AppendRefused::Full));
        }
        let ids: Vec<String> = items.iter().map(|item| item.id.clone()).collect();
        for item in items {
            conv.ids.insert(item.id.clone());
            conv.items.push(Some(item));
        }
        for id in ids {
            state
                .item_index
                .insert(key(owner, &id), conversation.to_owned());
        }
        ready(Ok(()))
    }

    fn list_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        query: &'a ItemsQuery,
    ) -> StoreFuture<'a, Option<Vec<ItemRecord>>> {
        let state = self.state();
        let Some(conv) = state.conversations.get(&key(owner, conversation)) else {
            return ready(None);
        };
        let ordered: Box<dyn Iterator<Item = &ItemRecord>> = match query.order {
            Order::Asc => Box::new(conv.live()),
            Order::Desc => Box::new(conv.live().rev()),
        };
        let page = match &query.after {
            None => ordered.take(query.limit).cloned().collect(),
            Some(after) => ordered
                .skip_while(|item| item.id != *after)
                .skip(1)
                .take(query.limit)
                .cloned()
                .collect(),
        };
        ready(Some(page))
    }

    fn get_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        let state = self.state();
        let found = state
            .conversations
            .get(&key(owner, conversation))
            .and_then(|conv| conv.live().find(|i| i.id == item).cloned());
        ready(found)
    }

    fn find_item<'a>(
        &'a self,
        owner: &'a Owner,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        let state = self.state();
        let found = state.item_index.get(&key(owner, item)).and_then(|conv| {
            state
                .conversations
                .get(&key(owner, conv))
                .and_then(|conv| conv.live().find(|i| i.id == item).cloned())
        });
        ready(found)
    }

    fn delete_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        let mut state = self.state();
        let Some(conv) = state.conversations.get_mut(&key(owner, conversation)) else {
            return ready(None);
        };
        let Some(slot) = conv
            .items
            .iter_mut()
            .find(|slot| slot.as_ref().is_some_and(|i| i.id == item))
        else {
            return ready(None);
        };
        *slot = None;
        let record = conv.record.clone();
        state.item_index.remove(&key(owner, item));
        ready(Some(record))
    }
}

/// Drops a conversation and its items' index entries.
fn forget_conversation(state: &mut State, key: &Key) {
    if let Some(conv) = state.conversations.remove(key) {
        for id in conv.ids {
            let item_key = (key.0.clone(), id);
            if state.item_index.get(&item_key) == Some(&key.1) {
                state.item_index.remove(&item_key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<T>(future: StoreFuture<'_, T>) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(future).expect("memory never fails")
    }

    fn response(owner: &Owner, id: &str) -> ResponseRecord {
        ResponseRecord {
            id: id.into(),
            owner: owner.clone(),
            created_at: 1,
            status: "completed".into(),
            conversation: None,
            object: "{}".into(),
            input_items: "[]".into(),
            context: "[]".into(),
        }
    }

    fn item(id: &str) -> ItemRecord {
        ItemRecord {
            id: id.into(),
            created_at: 1,
            item: format!(r#"{{"id":"{id}","type":"message"}}"#),
        }
    }

    #[test]
    fn responses_are_bounded_oldest_first_and_owned() {
        let store = MemoryHistory::new(2, 2);
        let alice = Owner::tenant("auth:alice".into());
        let bob = Owner::tenant("auth:bob".into());
        for id in ["r1", "r2", "r3"] {
            block(store.put_response(response(&alice, id)));
        }
        assert!(block(store.get_response(&alice, "r1")).is_none());
        assert!(block(store.get_response(&alice, "r3")).is_some());
        assert!(block(store.get_response(&bob, "r3")).is_none());
        assert!(!block(store.delete_response(&bob, "r3")));
        assert!(block(store.delete_response(&alice, "r3")));
    }

    #[test]
    fn items_append_atomically_and_page() {
        let store = MemoryHistory::new(8, 8);
        let owner = Owner::shared();
        block(store.create_conversation(ConversationRecord {
            id: "conv_1".into(),
            owner: owner.clone(),
            created_at: 1,
            metadata: "{}".into(),
        }));
        let ok = block(store.append_items(&owner, "conv_1", vec![item("a"), item("b")]));
        assert_eq!(ok, Ok(()));
        let dup = block(store.append_items(&owner, "conv_1", vec![item("c"), item("a")]));
        assert_eq!(dup, Err(AppendRefused::AlreadyInConversation("a".into())));
        let query = ItemsQuery {
            limit: 10,
            order: Order::Desc,
            after: None,
        };
        let page = block(store.list_items(&owner, "conv_1", &query)).unwrap_or_default();
        let ids: Vec<_> = page.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["b", "a"], "the refused batch added nothing");
        let after = ItemsQuery {
            limit: 10,
            order: Order::Asc,
            after: Some("a".into()),
        };
        let page = block(store.list_items(&owner, "conv_1", &after)).unwrap_or_default();
        assert_eq!(page.len(), 1);
        assert!(block(store.find_item(&owner, "b")).is_some());
        assert!(block(store.delete_item(&owner, "conv_1", "b")).is_some());
        assert!(block(store.get_item(&owner, "conv_1", "b")).is_none());
        assert!(block(store.find_item(&owner, "b")).is_none());
        assert!(block(store.delete_conversation(&owner, "conv_1")));
        assert!(block(store.get_conversation(&owner, "conv_1")).is_none());
    }
}

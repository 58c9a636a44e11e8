//! The `memory` backend: the history of this process, bounded, gone at restart.
//!
//! One short critical section per call (no await while the lock is held), so a call never
//! waits on another for longer than a map operation.
//!
//! Bounds ([`MemoryLimits`]): the bytes kept in all (`--history-memory-max-bytes`), the
//! bytes one owner keeps (`--history-memory-max-bytes-per-tenant`; the shared space of
//! callers without a tenant key is one owner), and the records kept in all
//! (`--history-memory-max-responses`, `--history-memory-max-conversations`). A record's
//! size is the bytes of its text (ids, JSON, metadata, every item) plus a fixed
//! allowance per record and per item for the maps that hold it, so the bound follows
//! what the process really holds.
//!
//! Eviction never crosses owners: a write that would pass a bound first drops the
//! writer's own oldest records (least recently written first: a conversation counts as
//! written when items are added to it), never another owner's. When the writer's own
//! records cannot make enough room (one record larger than the per-owner bound, or the
//! store full of other owners' history) the write is refused with [`StoreError::Full`]
//! and nothing is dropped. Durable or shared history is what the `postgres` and `redis`
//! backends are for.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use super::{
    merge_metadata, AppendRefused, ConversationRecord, History, ItemRecord, ItemsQuery, Order,
    Owner, PatchRefused, ResponseRecord, StoreError, StoreFuture, MAX_CONVERSATION_ITEMS,
};

/// Default of `--history-memory-max-bytes`.
pub const DEFAULT_MAX_BYTES: usize = 512 << 20;
/// Default of `--history-memory-max-bytes-per-tenant`.
pub const DEFAULT_MAX_BYTES_PER_TENANT: usize = 128 << 20;

/// What a stored record costs besides its text: the map entries, the key's copy of the id
/// and owner, the eviction index entry.
const RECORD_OVERHEAD: usize = 256;
/// What an item costs besides its text: its slot, its id in the id set and the owner's item
/// index.
const ITEM_OVERHEAD: usize = 160;

/// The bounds of a [`MemoryHistory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimits {
    /// Responses kept at most, all owners together.
    pub max_responses: usize,
    /// Conversations kept at most, all owners together.
    pub max_conversations: usize,
    /// Bytes kept at most, all owners together.
    pub max_bytes: usize,
    /// Bytes one owner keeps at most.
    pub max_bytes_per_tenant: usize,
}

impl Default for MemoryLimits {
    fn default() -> MemoryLimits {
        MemoryLimits {
            max_responses: 10_000,
            max_conversations: 10_000,
            max_bytes: DEFAULT_MAX_BYTES,
            max_bytes_per_tenant: DEFAULT_MAX_BYTES_PER_TENANT,
        }
    }
}

/// A record's key: its owner and its id.
type Key = (Owner, String);

/// History kept in this process.
pub struct MemoryHistory {
    state: Mutex<State>,
    limits: MemoryLimits,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Response,
    Conversation,
}

#[derive(Default)]
struct State {
    responses: HashMap<Key, StoredResponse>,
    conversations: HashMap<Key, Conversation>,
    /// Where an item id lives, per owner: the conversation that last took it.
    item_index: HashMap<Key, String>,
    /// What each owner keeps: its bytes and its records by age.
    owners: HashMap<Owner, Usage>,
    /// Bytes kept, all owners together.
    bytes: usize,
    /// The next write's place in the eviction order.
    next_seq: u64,
}

struct StoredResponse {
    record: ResponseRecord,
    seq: u64,
    bytes: usize,
}

struct Conversation {
    record: ConversationRecord,
    /// Items in the order they were added; deleted ones are `None` (ids stay taken).
    items: Vec<Option<ItemRecord>>,
    ids: HashSet<String>,
    seq: u64,
    bytes: usize,
}

impl Conversation {
    fn live(&self) -> impl DoubleEndedIterator<Item = &ItemRecord> {
        self.items.iter().flatten()
    }
}

/// One owner's share: its bytes, and its records by the order they were last written
/// (`seq` → id), oldest first: the eviction order.
#[derive(Default)]
struct Usage {
    bytes: usize,
    responses: BTreeMap<u64, String>,
    conversations: BTreeMap<u64, String>,
}

impl Usage {
    fn is_empty(&self) -> bool {
        self.bytes == 0 && self.responses.is_empty() && self.conversations.is_empty()
    }

    /// The owner's oldest record of `kind` (either kind when `None`), other than `keep`.
    fn oldest(&self, kind: Option<Kind>, keep: Option<(Kind, &str)>) -> Option<(Kind, String)> {
        let first = |map: &BTreeMap<u64, String>, of: Kind| {
            map.iter()
                .find(|(_, id)| keep != Some((of, id.as_str())))
                .map(|(seq, id)| (*seq, of, id.clone()))
        };
        let response = first(&self.responses, Kind::Response);
        let conversation = first(&self.conversations, Kind::Conversation);
        let pick = match kind {
            Some(Kind::Response) => response,
            Some(Kind::Conversation) => conversation,
            None => match (response, conversation) {
                (Some(r), Some(c)) => Some(if r.0 < c.0 { r } else { c }),
                (r, c) => r.or(c),
            },
        };
        pick.map(|(_, kind, id)| (kind, id))
    }
}

/// What a write is about to add: the room [`State::make_room`] must find.
struct Write<'a> {
    owner: &'a Owner,
    /// Bytes the owner will hold more than now (a replaced record's own bytes deducted).
    grow: usize,
    /// The size of the record once written: refused outright past a bound.
    size: usize,
    /// A new record of this kind (not a replacement): counted against its count bound.
    new: Option<Kind>,
    /// The record being written to, never evicted to make room for itself.
    keep: Option<(Kind, &'a str)>,
}

/// `text` in an allocation of its own length. A string built by serializing grows by
/// doubling, so its buffer can be twice its text; kept as is, a bound counted in text
/// bytes would let the process hold twice as much. (Shrinking in place is not enough: an
/// allocator may keep a block that shrinks by less than half.)
fn compact(text: &mut String) {
    if text.capacity() > text.len() + text.len() / 16 + 64 {
        *text = text.as_str().to_owned();
    }
}

fn compact_response(r: &mut ResponseRecord) {
    for text in [&mut r.object, &mut r.input_items, &mut r.context] {
        compact(text);
    }
}

fn compact_item(item: &mut ItemRecord) {
    compact(&mut item.item);
}

/// A response's bytes: its buffers (a [`compact`]ed buffer is its text) and the key's copy
/// of its id.
fn response_bytes(r: &ResponseRecord) -> usize {
    RECORD_OVERHEAD
        + r.id.len()
        + r.id.capacity()
        + r.status.capacity()
        + r.conversation.as_ref().map_or(0, String::capacity)
        + r.object.capacity()
        + r.input_items.capacity()
        + r.context.capacity()
}

fn conversation_bytes(c: &ConversationRecord) -> usize {
    RECORD_OVERHEAD + c.id.len() + c.id.capacity() + c.metadata.capacity()
}

/// An item of conversation `conversation`: its buffers, its id in the id set and the
/// index, and the index's copy of the conversation id.
fn item_bytes(conversation: &str, item: &ItemRecord) -> usize {
    ITEM_OVERHEAD
        + item.id.capacity()
        + 2 * item.id.len()
        + conversation.len()
        + item.item.capacity()
}

/// What deleting an item gives back: its buffers (the id stays taken).
fn deleted_item_bytes(item: &ItemRecord) -> usize {
    item.id.capacity() + item.item.capacity()
}

fn full(why: String) -> StoreError {
    StoreError::Full(why)
}

impl State {
    fn next_seq(&mut self) -> u64 {
        self.next_seq += 1;
        self.next_seq
    }

    fn usage(&mut self, owner: &Owner) -> &mut Usage {
        self.owners.entry(owner.clone()).or_default()
    }

    fn charge(&mut self, owner: &Owner, bytes: usize) {
        self.bytes += bytes;
        self.usage(owner).bytes += bytes;
    }

    fn release(&mut self, owner: &Owner, bytes: usize) {
        self.bytes = self.bytes.saturating_sub(bytes);
        if let Some(usage) = self.owners.get_mut(owner) {
            usage.bytes = usage.bytes.saturating_sub(bytes);
            if usage.is_empty() {
                self.owners.remove(owner);
            }
        }
    }

    /// Makes room for `write` by evicting the writer's own oldest records; refuses it,
    /// evicting nothing, when they cannot make enough. Never touches another owner's.
    fn make_room(&mut self, limits: &MemoryLimits, write: &Write<'_>) -> Result<(), StoreError> {
        if write.size > limits.max_bytes_per_tenant {
            return Err(full(format!(
                "a record of {} bytes is more than one tenant may keep in the memory history \
                 store ({} bytes, --history-memory-max-bytes-per-tenant)",
                write.size, limits.max_bytes_per_tenant
            )));
        }
        if write.size > limits.max_bytes {
            return Err(full(format!(
                "a record of {} bytes is more than the memory history store keeps ({} bytes, \
                 --history-memory-max-bytes)",
                write.size, limits.max_bytes
            )));
        }
        let empty = Usage::default();
        let usage = self.owners.get(write.owner).unwrap_or(&empty);
        let over_owner = (usage.bytes + write.grow).saturating_sub(limits.max_bytes_per_tenant);
        let over_total = (self.bytes + write.grow).saturating_sub(limits.max_bytes);
        let mut bytes = over_owner.max(over_total);
        let over_count = |kind: Kind, held: usize, max: usize| {
            if write.new == Some(kind) {
                (held + 1).saturating_sub(max)
            } else {
                0
            }
        };
        let mut responses = over_count(Kind::Response, self.responses.len(), limits.max_responses);
        let mut conversations = over_count(
            Kind::Conversation,
            self.conversations.len(),
            limits.max_conversations,
        );
        if bytes == 0 && responses == 0 && conversations == 0 {
            return Ok(());
        }
        // What the writer could give up: all it keeps but the record being written.
        let kept = match write.keep {
            Some((Kind::Response, id)) => self
                .responses
                .get(&key(write.owner, id))
                .map_or(0, |r| r.bytes),
            Some((Kind::Conversation, id)) => self
                .conversations
                .get(&key(write.owner, id))
                .map_or(0, |c| c.bytes),
            None => 0,
        };
        let own = |kind: Kind, held: usize| match write.keep {
            Some((k, _)) if k == kind => held.saturating_sub(1),
            _ => held,
        };
        let refusal = if own(Kind::Response, usage.responses.len()) < responses {
            Some(format!(
                "the memory history store keeps {} responses at most \
                 (--history-memory-max-responses)",
                limits.max_responses
            ))
        } else if own(Kind::Conversation, usage.conversations.len()) < conversations {
            Some(format!(
                "the memory history store keeps {} conversations at most \
                 (--history-memory-max-conversations)",
                limits.max_conversations
            ))
        } else if usage.bytes.saturating_sub(kept) < bytes {
            Some(format!(
                "the memory history store keeps {} bytes at most (--history-memory-max-bytes)",
                limits.max_bytes
            ))
        } else {
            None
        };
        if let Some(bound) = refusal {
            return Err(full(format!(
                "{bound} and is full; this tenant has too little history of its own to make \
                 room, and another tenant's is never evicted for it"
            )));
        }
        while responses > 0 || conversations > 0 || bytes > 0 {
            let kind = if responses > 0 {
                Some(Kind::Response)
            } else if conversations > 0 {
                Some(Kind::Conversation)
            } else {
                None
            };
            let victim = self
                .owners
                .get(write.owner)
                .and_then(|usage| usage.oldest(kind, write.keep));
            let Some((kind, id)) = victim else {
                // Unreachable: the room was counted above.
                return Err(full("the memory history store is full".into()));
            };
            let freed = self.evict(write.owner, kind, &id);
            match kind {
                Kind::Response => responses = responses.saturating_sub(1),
                Kind::Conversation => conversations = conversations.saturating_sub(1),
            }
            bytes = bytes.saturating_sub(freed);
        }
        Ok(())
    }

    /// Drops one record of `owner` to make room; the bytes it gave back.
    fn evict(&mut self, owner: &Owner, kind: Kind, id: &str) -> usize {
        tracing::debug!(
            owner = owner.as_str(),
            id,
            ?kind,
            "memory history store evicted"
        );
        match kind {
            Kind::Response => self.remove_response(&key(owner, id)).unwrap_or(0),
            Kind::Conversation => self.forget_conversation(&key(owner, id)).unwrap_or(0),
        }
    }

    /// Removes a response; the bytes it gave back.
    fn remove_response(&mut self, key: &Key) -> Option<usize> {
        let stored = self.responses.remove(key)?;
        if let Some(usage) = self.owners.get_mut(&key.0) {
            usage.responses.remove(&stored.seq);
        }
        self.release(&key.0, stored.bytes);
        Some(stored.bytes)
    }

    /// Drops a conversation and its items' index entries; the bytes it gave back.
    fn forget_conversation(&mut self, key: &Key) -> Option<usize> {
        let conv = self.conversations.remove(key)?;
        for id in conv.ids {
            let item_key = (key.0.clone(), id);
            if self.item_index.get(&item_key) == Some(&key.1) {
                self.item_index.remove(&item_key);
            }
        }
        if let Some(usage) = self.owners.get_mut(&key.0) {
            usage.conversations.remove(&conv.seq);
        }
        self.release(&key.0, conv.bytes);
        Some(conv.bytes)
    }
}

impl MemoryHistory {
    /// At most `max_responses` responses and `max_conversations` conversations (each at
    /// least 1), and the default byte bounds.
    pub fn new(max_responses: usize, max_conversations: usize) -> MemoryHistory {
        MemoryHistory::with_limits(MemoryLimits {
            max_responses,
            max_conversations,
            ..MemoryLimits::default()
        })
    }

    /// A store with these bounds (each at least 1).
    pub fn with_limits(limits: MemoryLimits) -> MemoryHistory {
        MemoryHistory {
            state: Mutex::new(State::default()),
            limits: MemoryLimits {
                max_responses: limits.max_responses.max(1),
                max_conversations: limits.max_conversations.max(1),
                max_bytes: limits.max_bytes.max(1),
                max_bytes_per_tenant: limits.max_bytes_per_tenant.max(1),
            },
        }
    }

    /// Bytes kept now: all owners together, and `owner`'s.
    pub fn bytes_held(&self, owner: &Owner) -> (usize, usize) {
        let state = self.state();
        let own = state.owners.get(owner).map_or(0, |usage| usage.bytes);
        (state.bytes, own)
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

fn refused<'a, T: Send + 'a>(err: StoreError) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Err(err)))
}

impl History for MemoryHistory {
    fn backend(&self) -> &'static str {
        "memory"
    }

    fn put_response(&self, mut record: ResponseRecord) -> StoreFuture<'_, ()> {
        compact_response(&mut record);
        let mut state = self.state();
        let key = key(&record.owner, &record.id);
        let size = response_bytes(&record);
        let old = state.responses.get(&key).map(|stored| stored.bytes);
        let write = Write {
            owner: &record.owner,
            grow: size.saturating_sub(old.unwrap_or(0)),
            size,
            new: old.is_none().then_some(Kind::Response),
            keep: old.map(|_| (Kind::Response, record.id.as_str())),
        };
        if let Err(err) = state.make_room(&self.limits, &write) {
            return refused(err);
        }
        state.remove_response(&key);
        let seq = state.next_seq();
        state.charge(&record.owner, size);
        state
            .usage(&record.owner)
            .responses
            .insert(seq, record.id.clone());
        state.responses.insert(
            key,
            StoredResponse {
                record,
                seq,
                bytes: size,
            },
        );
        ready(())
    }

    fn get_response<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ResponseRecord>> {
        let state = self.state();
        ready(
            state
                .responses
                .get(&key(owner, id))
                .map(|stored| stored.record.clone()),
        )
    }

    fn delete_response<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        let found = self.state().remove_response(&key(owner, id)).is_some();
        ready(found)
    }

    fn create_conversation(&self, record: ConversationRecord) -> StoreFuture<'_, ()> {
        let mut state = self.state();
        let key = key(&record.owner, &record.id);
        let size = conversation_bytes(&record);
        let old = state.conversations.get(&key).map(|conv| conv.bytes);
        let write = Write {
            owner: &record.owner,
            grow: size.saturating_sub(old.unwrap_or(0)),
            size,
            new: old.is_none().then_some(Kind::Conversation),
            keep: old.map(|_| (Kind::Conversation, record.id.as_str())),
        };
        if let Err(err) = state.make_room(&self.limits, &write) {
            return refused(err);
        }
        state.forget_conversation(&key);
        let seq = state.next_seq();
        state.charge(&record.owner, size);
        state
            .usage(&record.owner)
            .conversations
            .insert(seq, record.id.clone());
        let conversation = Conversation {
            record,
            items: Vec::new(),
            ids: HashSet::new(),
            seq,
            bytes: size,
        };
        state.conversations.insert(key, conversation);
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
        let conv_key = key(owner, id);
        let Some(conversation) = state.conversations.get(&conv_key) else {
            return ready(Err(PatchRefused::NoConversation));
        };
        let mut merged = match merge_metadata(&conversation.record.metadata, patch) {
            Ok(merged) => merged,
            Err(refusal) => return ready(Err(refusal)),
        };
        compact(&mut merged);
        let old = conversation.record.metadata.capacity();
        let new = merged.capacity();
        let grow = new.saturating_sub(old);
        let write = Write {
            owner,
            grow,
            size: conversation.bytes + grow,
            new: None,
            keep: Some((Kind::Conversation, id)),
        };
        if let Err(err) = state.make_room(&self.limits, &write) {
            return refused(err);
        }
        let Some(conversation) = state.conversations.get_mut(&conv_key) else {
            return ready(Err(PatchRefused::NoConversation));
        };
        conversation.record.metadata = merged;
        conversation.bytes = conversation.bytes + new - old;
        let record = conversation.record.clone();
        if new >= old {
            state.charge(owner, new - old);
        } else {
            state.release(owner, old - new);
        }
        ready(Ok(record))
    }

    fn delete_conversation<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        let found = self.state().forget_conversation(&key(owner, id)).is_some();
        ready(found)
    }

    fn append_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        mut items: Vec<ItemRecord>,
    ) -> StoreFuture<'a, Result<(), AppendRefused>> {
        items.iter_mut().for_each(compact_item);
        let mut state = self.state();
        let conv_key = key(owner, conversation);
        let Some(conv) = state.conversations.get(&conv_key) else {
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
        let added: usize = items.iter().map(|i| item_bytes(conversation, i)).sum();
        let write = Write {
            owner,
            grow: added,
            size: conv.bytes + added,
            new: None,
            keep: Some((Kind::Conversation, conversation)),
        };
        if let Err(err) = state.make_room(&self.limits, &write) {
            return refused(err);
        }
        let seq = state.next_seq();
        let Some(conv) = state.conversations.get_mut(&conv_key) else {
            return ready(Err(AppendRefused::NoConversation));
        };
        // Written now: the last of the owner's records to be evicted.
        let old_seq = std::mem::replace(&mut conv.seq, seq);
        conv.bytes += added;
        let ids: Vec<String> = items.iter().map(|item| item.id.clone()).collect();
        for item in items {
            conv.ids.insert(item.id.clone());
            conv.items.push(Some(item));
        }
        state.charge(owner, added);
        let usage = state.usage(owner);
        usage.conversations.remove(&old_seq);
        usage.conversations.insert(seq, conversation.to_owned());
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
        let freed = slot.take().map_or(0, |gone| deleted_item_bytes(&gone));
        conv.bytes = conv.bytes.saturating_sub(freed);
        let record = conv.record.clone();
        state.release(owner, freed);
        state.item_index.remove(&key(owner, item));
        ready(Some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block<T>(future: StoreFuture<'_, T>) -> T {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(future).expect("the memory store answers")
    }

    fn attempt<T>(future: StoreFuture<'_, T>) -> Result<T, StoreError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        rt.block_on(future)
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

    fn big_response(owner: &Owner, id: &str, bytes: usize) -> ResponseRecord {
        ResponseRecord {
            context: format!("[\"{}\"]", "x".repeat(bytes)),
            ..response(owner, id)
        }
    }

    fn conversation(owner: &Owner, id: &str) -> ConversationRecord {
        ConversationRecord {
            id: id.into(),
            owner: owner.clone(),
            created_at: 1,
            metadata: "{}".into(),
        }
    }

    fn limits(max_bytes: usize, max_bytes_per_tenant: usize) -> MemoryLimits {
        MemoryLimits {
            max_bytes,
            max_bytes_per_tenant,
            ..MemoryLimits::default()
        }
    }

    #[test]
    fn bytes_are_bounded_per_tenant_oldest_first() {
        let store = MemoryHistory::with_limits(limits(1 << 20, 10_000));
        let alice = Owner::tenant("auth:alice".into());
        for i in 0..10 {
            block(store.put_response(big_response(&alice, &format!("r{i}"), 3_000)));
            let (_, own) = store.bytes_held(&alice);
            assert!(own <= 10_000, "{own}");
        }
        assert!(block(store.get_response(&alice, "r9")).is_some());
        assert!(block(store.get_response(&alice, "r8")).is_some());
        assert!(block(store.get_response(&alice, "r0")).is_none());
    }

    #[test]
    fn a_tenant_never_evicts_another_tenants_records() {
        let store = MemoryHistory::with_limits(MemoryLimits {
            max_conversations: 3,
            ..MemoryLimits::default()
        });
        let alice = Owner::tenant("auth:alice".into());
        let bob = Owner::tenant("auth:bob".into());
        block(store.create_conversation(conversation(&alice, "conv_a")));
        for id in ["conv_b1", "conv_b2", "conv_b3"] {
            block(store.create_conversation(conversation(&bob, id)));
        }
        assert!(block(store.get_conversation(&alice, "conv_a")).is_some());
        assert!(block(store.get_conversation(&bob, "conv_b1")).is_none());
        assert!(block(store.get_conversation(&bob, "conv_b3")).is_some());
        // Bob holds all three: Alice's next one is refused, and Bob keeps his.
        block(store.delete_conversation(&alice, "conv_a"));
        block(store.create_conversation(conversation(&bob, "conv_b4")));
        let refused = attempt(store.create_conversation(conversation(&alice, "conv_a2")));
        assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
        for id in ["conv_b2", "conv_b3", "conv_b4"] {
            assert!(block(store.get_conversation(&bob, id)).is_some(), "{id}");
        }
    }

    #[test]
    fn a_full_store_refuses_a_tenant_with_nothing_to_give_up() {
        let store = MemoryHistory::with_limits(limits(20_000, 17_000));
        let alice = Owner::tenant("auth:alice".into());
        let bob = Owner::tenant("auth:bob".into());
        for i in 0..5 {
            block(store.put_response(big_response(&alice, &format!("a{i}"), 3_000)));
        }
        block(store.put_response(big_response(&bob, "b0", 3_000)));
        // Bob's second response evicts his first, never one of Alice's.
        block(store.put_response(big_response(&bob, "b1", 3_000)));
        assert!(block(store.get_response(&bob, "b0")).is_none());
        for i in 0..5 {
            assert!(block(store.get_response(&alice, &format!("a{i}"))).is_some());
        }
        let (total, _) = store.bytes_held(&bob);
        assert!(total <= 20_000, "{total}");
        // A response bigger than Bob's share of the room left: refused, Bob keeps b1.
        let refused = attempt(store.put_response(big_response(&bob, "b2", 6_000)));
        assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
        assert!(block(store.get_response(&bob, "b1")).is_some());
        // One record larger than a tenant's share is refused outright.
        let refused = attempt(store.put_response(big_response(&alice, "huge", 18_000)));
        assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
        assert!(block(store.get_response(&alice, "a0")).is_some());
    }

    #[test]
    fn items_are_counted_and_a_conversation_is_not_evicted_for_itself() {
        let store = MemoryHistory::with_limits(limits(1 << 20, 20_000));
        let owner = Owner::shared();
        block(store.put_response(big_response(&owner, "old", 5_000)));
        block(store.create_conversation(conversation(&owner, "conv_1")));
        let big = |id: &str| ItemRecord {
            id: id.into(),
            created_at: 1,
            item: format!(r#"{{"id":"{id}","text":"{}"}}"#, "y".repeat(4_000)),
        };
        let ok = block(store.append_items(&owner, "conv_1", vec![big("i1"), big("i2")]));
        assert_eq!(ok, Ok(()));
        let ok = block(store.append_items(&owner, "conv_1", vec![big("i3"), big("i4")]));
        assert_eq!(ok, Ok(()));
        assert!(
            block(store.get_response(&owner, "old")).is_none(),
            "evicted"
        );
        let refused = attempt(store.append_items(&owner, "conv_1", vec![big("i5")]));
        assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
        assert!(block(store.get_item(&owner, "conv_1", "i4")).is_some());
        let (_, before) = store.bytes_held(&owner);
        block(store.delete_item(&owner, "conv_1", "i4"));
        let (_, after) = store.bytes_held(&owner);
        assert!(after + 4_000 < before, "{before} -> {after}");
        assert_eq!(
            block(store.append_items(&owner, "conv_1", vec![big("i5")])),
            Ok(())
        );
        block(store.delete_conversation(&owner, "conv_1"));
        assert_eq!(store.bytes_held(&owner), (0, 0), "everything given back");
    }

    #[test]
    fn replacing_a_response_keeps_one_copy_of_its_bytes() {
        let store = MemoryHistory::with_limits(limits(1 << 20, 10_000));
        let owner = Owner::shared();
        for _ in 0..5 {
            block(store.put_response(big_response(&owner, "same", 6_000)));
        }
        let (total, own) = store.bytes_held(&owner);
        assert_eq!(total, own);
        assert!(own < 7_000, "{own}");
        assert!(block(store.delete_response(&owner, "same")));
        assert_eq!(store.bytes_held(&owner), (0, 0));
    }
}

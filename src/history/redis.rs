//! `--history-backend redis`: the history in a Redis server, shared by every gateway replica
//! that points at it.
//!
//! Keys (`{o}` is the owner as `<length>:<owner>`, so no owner/id pair can spell another's
//! key; the shared space is `0:`):
//! - `tg:resp:{o}:{id}`: a hash per response (`created_at`, `status`, `object`,
//!   `input_items`, `context`, and `conversation` when there is one). Replaced whole by a
//!   `MULTI` (delete, then write); a delete removes the key.
//! - `tg:conv:{o}:{id}`: a hash per conversation: `created_at`, `metadata`, `deleted`
//!   (`0`/`1`, a soft delete), `seq` (the last item's order number) and `ver` (bumped by
//!   each metadata update).
//! - `tg:items:{o}:{conv}`: a hash of the conversation's items, item id → `L` (live) or `D`
//!   (deleted), the item's `created_at`, `:`, the item's JSON. A deleted item keeps its id
//!   taken.
//! - `tg:order:{o}:{conv}`: a sorted set of the live item ids, scored by order number.
//! - `tg:itemconv:{o}`: a hash per owner, item id → the conversation that last appended an
//!   item of that id ([`History::find_item`]).
//!
//! Atomicity across replicas: appending, listing, reading and deleting items, creating and
//! deleting a conversation are each one Lua script (Redis runs a script alone), so a batch
//! is appended whole or not at all and a duplicate id is seen whatever replica wrote it. A
//! metadata update is read, merged here ([`merge_metadata`]) and written back by a script
//! only if `ver` has not moved meanwhile, retried a bounded number of times.
//!
//! Connections: `--history-pool-size` multiplexed connections, used round-robin (each
//! carries many calls at once), opened on the store's own thread ([`super::thread`]) and
//! reopened after a failure. Each connection's driver task is the gateway's own, and
//! marks the connection closed when it ends: a connection the server closed (a restart,
//! its `timeout`) is seen as closed before a call is sent on it, and a fresh one is
//! opened instead, as the Postgres pool drops its closed connections. A call whose
//! connection breaks under it is retried once on a fresh connection when that is safe:
//! every read, and the writes that are idempotent (storing a response, a metadata update
//! checked against `ver`); a write that could have been applied once already (an append,
//! a create, a delete) is not, and fails. No TLS, no cluster (the scripts touch several
//! keys of one conversation). Durability is the server's: run it with `appendonly yes` for a store
//! that survives a Redis restart.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, RedisError, Script};

use super::thread::StoreThread;
use super::{
    merge_metadata, AppendRefused, ConversationRecord, History, ItemRecord, ItemsQuery, Order,
    Owner, PatchRefused, ResponseRecord, StoreError, StoreFuture, MAX_CONVERSATION_ITEMS,
};
use crate::secret::Secret;

/// Metadata updates that lost the race to another writer, retried at most this often.
const PATCH_ATTEMPTS: usize = 16;

/// A conversation that exists and is not deleted: the check every item script starts with.
const LIVE: &str = "if redis.call('HGET', KEYS[1], 'deleted') ~= '0' then return {'none'} end\n";

/// KEYS: conv, items, order, the owner's item index. ARGV: max items, batch size, the
/// conversation's id, then id, created_at, item per item.
const APPEND: &str = "
local n = tonumber(ARGV[2])
local seen = {}
for i = 0, n - 1 do
  local id = ARGV[4 + 3 * i]
  if seen[id] or redis.call('HEXISTS', KEYS[2], id) == 1 then return {'dup', id} end
  seen[id] = true
end
if redis.call('ZCARD', KEYS[3]) + n > tonumber(ARGV[1]) then return {'full'} end
for i = 0, n - 1 do
  local id = ARGV[4 + 3 * i]
  local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('HSET', KEYS[2], id, 'L' .. ARGV[5 + 3 * i] .. ':' .. ARGV[6 + 3 * i])
  redis.call('ZADD', KEYS[3], seq, id)
  redis.call('HSET', KEYS[4], id, ARGV[3])
end
return {'ok'}
";

/// KEYS: conv, items, order. ARGV: limit, `asc`/`desc`, after id or empty.
const LIST: &str = "
local limit = tonumber(ARGV[1])
if limit == 0 then return {'ok'} end
local ids
if ARGV[3] ~= '' then
  local s = redis.call('ZSCORE', KEYS[3], ARGV[3])
  if not s then return {'ok'} end
  if ARGV[2] == 'asc' then
    ids = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. s, '+inf', 'LIMIT', 0, limit)
  else
    ids = redis.call('ZREVRANGEBYSCORE', KEYS[3], '(' .. s, '-inf', 'LIMIT', 0, limit)
  end
elseif ARGV[2] == 'asc' then
  ids = redis.call('ZRANGE', KEYS[3], 0, limit - 1)
else
  ids = redis.call('ZREVRANGE', KEYS[3], 0, limit - 1)
end
local out = {'ok'}
for _, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id)
end
return out
";

/// KEYS: conv, items. ARGV: item id.
const GET_ITEM: &str = "
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v or string.sub(v, 1, 1) ~= 'L' then return {'none'} end
return {'ok', v}
";

/// KEYS: conv, items, order. ARGV: item id.
const DELETE_ITEM: &str = "
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v or string.sub(v, 1, 1) ~= 'L' then return {'none'} end
redis.call('HSET', KEYS[2], ARGV[1], 'D' .. string.sub(v, 2))
redis.call('ZREM', KEYS[3], ARGV[1])
return {'ok', redis.call('HGET', KEYS[1], 'created_at'), redis.call('HGET', KEYS[1], 'metadata')}
";

/// KEYS: conv. ARGV: created_at, metadata.
const CREATE: &str = "
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'created_at', ARGV[1], 'metadata', ARGV[2], 'deleted', '0', 'seq', 0, 'ver', 0)
return 1
";

/// KEYS: conv.
const DELETE_CONVERSATION: &str = "
if redis.call('HGET', KEYS[1], 'deleted') ~= '0' then return 0 end
redis.call('HSET', KEYS[1], 'deleted', '1')
return 1
";

/// KEYS: conv. ARGV: the `ver` the merge was made from, the merged metadata.
const SET_METADATA: &str = "
if redis.call('HGET', KEYS[1], 'deleted') ~= '0' then return 0 end
if redis.call('HGET', KEYS[1], 'ver') ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[1], 'metadata', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'ver', 1)
return 1
";

struct Scripts {
    append: Script,
    list: Script,
    get_item: Script,
    delete_item: Script,
    create: Script,
    delete_conversation: Script,
    set_metadata: Script,
}

impl Scripts {
    fn new() -> Scripts {
        let live = |body: &str| Script::new(&format!("{LIVE}{body}"));
        Scripts {
            append: live(APPEND),
            list: live(LIST),
            get_item: live(GET_ITEM),
            delete_item: live(DELETE_ITEM),
            create: Script::new(CREATE),
            delete_conversation: Script::new(DELETE_CONVERSATION),
            set_metadata: Script::new(SET_METADATA),
        }
    }
}

/// The Redis store.
pub struct RedisHistory {
    pool: Arc<Pool>,
    thread: StoreThread,
}

impl RedisHistory {
    /// Opens one connection (to fail now if the server is unreachable or refuses the
    /// password). `url` is `redis://[user:password@]host:port[/db]`.
    pub fn open(
        url: &Secret,
        pool_size: usize,
        timeout: Duration,
    ) -> Result<RedisHistory, StoreError> {
        check_url(url.expose()).map_err(StoreError::Unavailable)?;
        let client = redis::Client::open(url.expose())
            .map_err(|_| StoreError::Unavailable("the redis URL does not parse".into()))?;
        let info = client.get_connection_info().clone();
        let pool = Arc::new(Pool {
            target: format!("{}/{}", info.addr, info.redis.db),
            info,
            connect_timeout: timeout,
            config: AsyncConnectionConfig::new().set_response_timeout(timeout),
            slots: (0..pool_size.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            scripts: Scripts::new(),
        });
        let thread = StoreThread::start("redis", timeout)?;
        let first = pool.clone();
        thread.block(async move {
            let _pong: String = first.run(&redis::cmd("PING"), Retry::Safe).await?;
            Ok(())
        })?;
        Ok(RedisHistory { pool, thread })
    }
}

/// Whether `url` is a Redis URL the store can use; the message never repeats the URL.
pub fn check_url(url: &str) -> Result<(), String> {
    if !url.starts_with("redis://") {
        return Err("expected a redis://[user:password@]host:port[/db] URL (no TLS)".into());
    }
    redis::Client::open(url)
        .map(|_| ())
        .map_err(|_| "expected a redis://[user:password@]host:port[/db] URL".into())
}

struct Pool {
    /// The server and the credentials (a secret: never in a message).
    info: ConnectionInfo,
    connect_timeout: Duration,
    config: AsyncConnectionConfig,
    /// `host:port/db`: what messages name of the server (never the password).
    target: String,
    slots: Vec<Mutex<Option<Pooled>>>,
    next: AtomicUsize,
    scripts: Scripts,
}

/// A pooled connection, and whether its driver has ended (the server closed it, or it
/// broke): then it can carry no call and the slot opens a fresh one.
struct Pooled {
    con: MultiplexedConnection,
    closed: Arc<AtomicBool>,
}

/// Whether a call may be sent again, on a fresh connection, after its connection broke
/// under it: whether running it twice answers and leaves the same as running it once.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// A read, or an idempotent write.
    Safe,
    /// A write a second run would answer differently (an append, a create, a delete).
    Never,
}

/// Whether `err` says the connection itself is gone (not a timeout, not the server's
/// answer to the call).
fn connection_lost(err: &RedisError) -> bool {
    !err.is_timeout()
        && (err.is_connection_dropped() || err.is_io_error() || err.is_unrecoverable_error())
}

impl Pool {
    /// The next slot's connection: its pooled one while that is open, else a fresh one
    /// (opened on the store's runtime).
    async fn connection(&self) -> Result<(usize, MultiplexedConnection), StoreError> {
        let slot = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        {
            let mut pooled = self.lock(slot);
            match pooled.as_ref() {
                Some(p) if !p.closed.load(Ordering::Acquire) => return Ok((slot, p.con.clone())),
                Some(_) => {
                    tracing::debug!(server = %self.target, slot, "redis connection closed by the server; reopening");
                    *pooled = None;
                }
                None => {}
            }
        }
        self.reconnect(slot).await
    }

    /// Opens a fresh connection into `slot`.
    async fn reconnect(&self, slot: usize) -> Result<(usize, MultiplexedConnection), StoreError> {
        let (con, closed) = self.open().await?;
        *self.lock(slot) = Some(Pooled {
            con: con.clone(),
            closed,
        });
        Ok((slot, con))
    }

    /// Connects, authenticates and selects the database; the driver runs as a task of the
    /// store's runtime that marks the connection closed when it ends.
    async fn open(&self) -> Result<(MultiplexedConnection, Arc<AtomicBool>), StoreError> {
        let ConnectionAddr::Tcp(host, port) = &self.info.addr else {
            return Err(StoreError::Unavailable(format!(
                "redis {}: only redis:// over TCP is supported",
                self.target
            )));
        };
        let connect = async {
            let stream = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            let _ = stream.set_nodelay(true);
            MultiplexedConnection::new_with_config(&self.info.redis, stream, self.config.clone())
                .await
        };
        let (con, driver) = tokio::time::timeout(self.connect_timeout, connect)
            .await
            .map_err(|_| StoreError::Timeout)?
            .map_err(|err| self.failed(&err))?;
        let closed = Arc::new(AtomicBool::new(false));
        let mark = closed.clone();
        tokio::spawn(async move {
            driver.await;
            mark.store(true, Ordering::Release);
        });
        Ok((con, closed))
    }

    fn lock(&self, slot: usize) -> std::sync::MutexGuard<'_, Option<Pooled>> {
        let slot = &self.slots[slot % self.slots.len()];
        slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `call` on a pooled connection; when the connection turns out to be gone and
    /// `retry` allows it, once more on a fresh one.
    async fn call<T, F, Fut>(&self, retry: Retry, call: F) -> Result<T, StoreError>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let (slot, con) = self.connection().await?;
        match call(con).await {
            Err(err) if retry == Retry::Safe && connection_lost(&err) => {
                tracing::debug!(server = %self.target, slot, error = %err, "redis connection lost; retrying on a fresh one");
                *self.lock(slot) = None;
                let (slot, con) = self.reconnect(slot).await?;
                let answer = call(con).await;
                self.answer(slot, answer)
            }
            answer => self.answer(slot, answer),
        }
    }

    /// A call's answer; a failure of the connection itself empties its slot, so the next
    /// call there reconnects.
    fn answer<T>(&self, slot: usize, answer: Result<T, RedisError>) -> Result<T, StoreError> {
        answer.map_err(|err| {
            if err.is_io_error()
                || err.is_connection_dropped()
                || err.is_unrecoverable_error()
                || err.is_timeout()
            {
                *self.lock(slot) = None;
            }
            if err.is_timeout() {
                StoreError::Timeout
            } else {
                self.failed(&err)
            }
        })
    }

    fn failed(&self, err: &RedisError) -> StoreError {
        let text = crate::http::client::error_chain(err);
        StoreError::Unavailable(format!("redis {}: {text}", self.target))
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        retry: Retry,
    ) -> Result<T, StoreError> {
        self.call(
            retry,
            |mut con| async move { cmd.query_async(&mut con).await },
        )
        .await
    }

    async fn script<T: redis::FromRedisValue>(
        &self,
        retry: Retry,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T, StoreError> {
        let mut call = script.prepare_invoke();
        for key in keys {
            call.key(*key);
        }
        for arg in args {
            call.arg(*arg);
        }
        let call = &call;
        self.call(
            retry,
            |mut con| async move { call.invoke_async(&mut con).await },
        )
        .await
    }
}

fn scope(owner: &Owner) -> String {
    let owner = owner.as_str();
    format!("{}:{owner}", owner.len())
}

fn key(kind: &str, owner: &Owner, id: &str) -> String {
    format!("tg:{kind}:{}:{id}", scope(owner))
}

/// The three keys of a conversation: its hash, its items, its order.
fn conversation_keys(owner: &Owner, id: &str) -> [String; 3] {
    [
        key("conv", owner, id),
        key("items", owner, id),
        key("order", owner, id),
    ]
}

/// The owner's item id → conversation index.
fn item_index(owner: &Owner) -> String {
    format!("tg:itemconv:{}", scope(owner))
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("redis: {what}"))
}

/// An item as stored (`L`/`D`, created_at, `:`, JSON) with its id.
fn item_from(id: String, stored: &str) -> Result<ItemRecord, StoreError> {
    let body = stored.get(1..).ok_or_else(|| corrupt("empty item"))?;
    let (created_at, item) = body
        .split_once(':')
        .ok_or_else(|| corrupt("item without its time"))?;
    Ok(ItemRecord {
        id,
        created_at: created_at
            .parse()
            .map_err(|_| corrupt("item time not a number"))?,
        item: item.to_owned(),
    })
}

fn number(field: Option<&String>) -> Result<i64, StoreError> {
    field
        .and_then(|value| value.parse().ok())
        .ok_or_else(|| corrupt("a number field is missing"))
}

impl Pool {
    async fn put_response(&self, r: ResponseRecord) -> Result<(), StoreError> {
        let key = key("resp", &r.owner, &r.id);
        let mut write = redis::pipe();
        write.atomic().del(&key).ignore();
        let hset = write
            .cmd("HSET")
            .arg(&key)
            .arg("created_at")
            .arg(r.created_at)
            .arg("status")
            .arg(&r.status)
            .arg("object")
            .arg(&r.object)
            .arg("input_items")
            .arg(&r.input_items)
            .arg("context")
            .arg(&r.context);
        if let Some(conversation) = &r.conversation {
            hset.arg("conversation").arg(conversation);
        }
        hset.ignore();
        // Delete-then-write in one MULTI: a second run leaves what the first left.
        let write = &write;
        self.call(Retry::Safe, |mut con| async move {
            write.query_async::<()>(&mut con).await
        })
        .await
    }

    async fn get_response(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<Option<ResponseRecord>, StoreError> {
        let mut fields: HashMap<String, String> = self
            .run(
                redis::cmd("HGETALL").arg(key("resp", owner, id)),
                Retry::Safe,
            )
            .await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let mut text = |name: &str| {
            fields
                .remove(name)
                .ok_or_else(|| corrupt(&format!("response without {name}")))
        };
        Ok(Some(ResponseRecord {
            id: id.to_owned(),
            owner: owner.clone(),
            created_at: text("created_at")?
                .parse()
                .map_err(|_| corrupt("response time not a number"))?,
            status: text("status")?,
            object: text("object")?,
            input_items: text("input_items")?,
            context: text("context")?,
            conversation: fields.remove("conversation"),
        }))
    }

    async fn get_conversation(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<Option<ConversationRecord>, StoreError> {
        Ok(self
            .read_conversation(owner, id)
            .await?
            .map(|(record, _)| record))
    }

    /// A live conversation and its `ver`.
    async fn read_conversation(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<Option<(ConversationRecord, String)>, StoreError> {
        let fields: Vec<Option<String>> = self
            .run(
                redis::cmd("HMGET").arg(key("conv", owner, id)).arg(&[
                    "created_at",
                    "metadata",
                    "deleted",
                    "ver",
                ]),
                Retry::Safe,
            )
            .await?;
        let [created_at, metadata, deleted, ver] = <[Option<String>; 4]>::try_from(fields)
            .map_err(|_| corrupt("HMGET answered the wrong number of fields"))?;
        if deleted.as_deref() != Some("0") {
            return Ok(None);
        }
        let record = ConversationRecord {
            id: id.to_owned(),
            owner: owner.clone(),
            created_at: number(created_at.as_ref())?,
            metadata: metadata.ok_or_else(|| corrupt("conversation without metadata"))?,
        };
        Ok(Some((record, ver.unwrap_or_default())))
    }

    async fn patch_metadata(
        &self,
        owner: &Owner,
        id: &str,
        patch: &str,
    ) -> Result<Result<ConversationRecord, PatchRefused>, StoreError> {
        let conv = key("conv", owner, id);
        for _ in 0..PATCH_ATTEMPTS {
            let Some((current, ver)) = self.read_conversation(owner, id).await? else {
                return Ok(Err(PatchRefused::NoConversation));
            };
            let merged = match merge_metadata(&current.metadata, patch) {
                Ok(merged) => merged,
                Err(refused) => return Ok(Err(refused)),
            };
            // Checked against `ver`: a second run finds `ver` moved and merges again.
            let written: i64 = self
                .script(
                    Retry::Safe,
                    &self.scripts.set_metadata,
                    &[&conv],
                    &[&ver, &merged],
                )
                .await?;
            match written {
                1 => {
                    return Ok(Ok(ConversationRecord {
                        metadata: merged,
                        ..current
                    }))
                }
                0 => return Ok(Err(PatchRefused::NoConversation)),
                _ => continue,
            }
        }
        Err(StoreError::Unavailable(format!(
            "metadata of {id} changed under {PATCH_ATTEMPTS} updates in a row"
        )))
    }

    async fn append_items(
        &self,
        owner: &Owner,
        conversation: &str,
        items: &[ItemRecord],
    ) -> Result<Result<(), AppendRefused>, StoreError> {
        let [conv, stored, order] = conversation_keys(owner, conversation);
        let index = item_index(owner);
        let max = MAX_CONVERSATION_ITEMS.to_string();
        let count = items.len().to_string();
        let times: Vec<String> = items.iter().map(|i| i.created_at.to_string()).collect();
        let mut args: Vec<&str> = vec![&max, &count, conversation];
        for (item, time) in items.iter().zip(&times) {
            args.extend([item.id.as_str(), time, item.item.as_str()]);
        }
        let keys = [conv.as_str(), &stored, &order, &index];
        let answer: Vec<String> = self
            .script(Retry::Never, &self.scripts.append, &keys, &args)
            .await?;
        match answer.first().map(String::as_str) {
            Some("ok") => Ok(Ok(())),
            Some("none") => Ok(Err(AppendRefused::NoConversation)),
            Some("full") => Ok(Err(AppendRefused::Full)),
            Some("dup") => match answer.into_iter().nth(1) {
                Some(id) => Ok(Err(AppendRefused::AlreadyInConversation(id))),
                None => Err(corrupt("append answered a duplicate without its id")),
            },
            _ => Err(corrupt("append answered something unknown")),
        }
    }

    async fn list_items(
        &self,
        owner: &Owner,
        conversation: &str,
        query: &ItemsQuery,
    ) -> Result<Option<Vec<ItemRecord>>, StoreError> {
        let keys = conversation_keys(owner, conversation);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let limit = query.limit.min(MAX_CONVERSATION_ITEMS).to_string();
        let order = match query.order {
            Order::Asc => "asc",
            Order::Desc => "desc",
        };
        let after = query.after.as_deref().unwrap_or("");
        let answer: Vec<String> = self
            .script(
                Retry::Safe,
                &self.scripts.list,
                &keys,
                &[&limit, order, after],
            )
            .await?;
        let mut answer = answer.into_iter();
        match answer.next().as_deref() {
            Some("ok") => {}
            Some("none") => return Ok(None),
            _ => return Err(corrupt("list answered something unknown")),
        }
        let mut items = Vec::with_capacity(answer.len() / 2);
        while let (Some(id), Some(stored)) = (answer.next(), answer.next()) {
            items.push(item_from(id, &stored)?);
        }
        Ok(Some(items))
    }

    async fn get_item(
        &self,
        owner: &Owner,
        conversation: &str,
        item: &str,
    ) -> Result<Option<ItemRecord>, StoreError> {
        let keys = conversation_keys(owner, conversation);
        let answer: Vec<String> = self
            .script(
                Retry::Safe,
                &self.scripts.get_item,
                &[&keys[0], &keys[1]],
                &[item],
            )
            .await?;
        match <[String; 2]>::try_from(answer) {
            Ok([_, stored]) => item_from(item.to_owned(), &stored).map(Some),
            Err(_) => Ok(None),
        }
    }

    /// The conversation that last took the id, then the item there if it is live.
    async fn find_item(&self, owner: &Owner, item: &str) -> Result<Option<ItemRecord>, StoreError> {
        let conversation: Option<String> = self
            .run(
                redis::cmd("HGET").arg(item_index(owner)).arg(item),
                Retry::Safe,
            )
            .await?;
        match conversation {
            Some(conversation) => self.get_item(owner, &conversation, item).await,
            None => Ok(None),
        }
    }

    async fn delete_item(
        &self,
        owner: &Owner,
        conversation: &str,
        item: &str,
    ) -> Result<Option<ConversationRecord>, StoreError> {
        let keys = conversation_keys(owner, conversation);
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let answer: Vec<String> = self
            .script(Retry::Never, &self.scripts.delete_item, &keys, &[item])
            .await?;
        match <[String; 3]>::try_from(answer) {
            Ok([_, created_at, metadata]) => Ok(Some(ConversationRecord {
                id: conversation.to_owned(),
                owner: owner.clone(),
                created_at: number(Some(&created_at))?,
                metadata,
            })),
            Err(_) => Ok(None),
        }
    }
}

impl History for RedisHistory {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn put_response(&self, record: ResponseRecord) -> StoreFuture<'_, ()> {
        let pool = self.pool.clone();
        self.thread
            .run(async move { pool.put_response(record).await })
    }

    fn get_response<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ResponseRecord>> {
        let (pool, owner, id) = (self.pool.clone(), owner.clone(), id.to_owned());
        self.thread
            .run(async move { pool.get_response(&owner, &id).await })
    }

    fn delete_response<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        let (pool, key) = (self.pool.clone(), key("resp", owner, id));
        self.thread.run(async move {
            let removed: i64 = pool.run(redis::cmd("DEL").arg(&key), Retry::Never).await?;
            Ok(removed > 0)
        })
    }

    fn create_conversation(&self, record: ConversationRecord) -> StoreFuture<'_, ()> {
        let pool = self.pool.clone();
        self.thread.run(async move {
            let conv = key("conv", &record.owner, &record.id);
            let created = record.created_at.to_string();
            let made: i64 = pool
                .script(
                    Retry::Never,
                    &pool.scripts.create,
                    &[&conv],
                    &[&created, &record.metadata],
                )
                .await?;
            if made == 1 {
                Ok(())
            } else {
                Err(StoreError::Unavailable(format!(
                    "conversation {} already exists",
                    record.id
                )))
            }
        })
    }

    fn get_conversation<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        let (pool, owner, id) = (self.pool.clone(), owner.clone(), id.to_owned());
        self.thread
            .run(async move { pool.get_conversation(&owner, &id).await })
    }

    fn patch_metadata<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
        patch: &'a str,
    ) -> StoreFuture<'a, Result<ConversationRecord, PatchRefused>> {
        let (pool, owner, id) = (self.pool.clone(), owner.clone(), id.to_owned());
        let patch = patch.to_owned();
        self.thread
            .run(async move { pool.patch_metadata(&owner, &id, &patch).await })
    }

    fn delete_conversation<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        let (pool, conv) = (self.pool.clone(), key("conv", owner, id));
        self.thread.run(async move {
            let deleted: i64 = pool
                .script(
                    Retry::Never,
                    &pool.scripts.delete_conversation,
                    &[&conv],
                    &[],
                )
                .await?;
            Ok(deleted == 1)
        })
    }

    fn append_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        items: Vec<ItemRecord>,
    ) -> StoreFuture<'a, Result<(), AppendRefused>> {
        let (pool, owner, conversation) =
            (self.pool.clone(), owner.clone(), conversation.to_owned());
        self.thread
            .run(async move { pool.append_items(&owner, &conversation, &items).await })
    }

    fn list_items<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        query: &'a ItemsQuery,
    ) -> StoreFuture<'a, Option<Vec<ItemRecord>>> {
        let (pool, owner, conversation) =
            (self.pool.clone(), owner.clone(), conversation.to_owned());
        let query = query.clone();
        self.thread
            .run(async move { pool.list_items(&owner, &conversation, &query).await })
    }

    fn get_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        let (pool, owner) = (self.pool.clone(), owner.clone());
        let (conversation, item) = (conversation.to_owned(), item.to_owned());
        self.thread
            .run(async move { pool.get_item(&owner, &conversation, &item).await })
    }

    fn find_item<'a>(
        &'a self,
        owner: &'a Owner,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ItemRecord>> {
        let (pool, owner, item) = (self.pool.clone(), owner.clone(), item.to_owned());
        self.thread
            .run(async move { pool.find_item(&owner, &item).await })
    }

    fn delete_item<'a>(
        &'a self,
        owner: &'a Owner,
        conversation: &'a str,
        item: &'a str,
    ) -> StoreFuture<'a, Option<ConversationRecord>> {
        let (pool, owner) = (self.pool.clone(), owner.clone());
        let (conversation, item) = (conversation.to_owned(), item.to_owned());
        self.thread
            .run(async move { pool.delete_item(&owner, &conversation, &item).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_cannot_spell_each_others_keys() {
        let a = Owner::tenant("a:b".into());
        let b = Owner::tenant("a".into());
        assert_ne!(key("resp", &a, "c"), key("resp", &b, "b:c"));
        assert_eq!(key("resp", &Owner::shared(), "r"), "tg:resp:0::r");
    }

    #[test]
    fn items_read_back_from_their_stored_form() {
        let item = item_from("i1".into(), r#"L17:{"id":"i1","a":"x:y"}"#).unwrap();
        assert_eq!(item.created_at, 17);
        assert_eq!(item.item, r#"{"id":"i1","a":"x:y"}"#);
        assert!(item_from("i".into(), "L{}").is_err());
    }

    #[test]
    fn only_a_lost_connection_is_retried() {
        use std::io::{Error, ErrorKind};
        for kind in [
            ErrorKind::BrokenPipe,
            ErrorKind::ConnectionReset,
            ErrorKind::UnexpectedEof,
        ] {
            assert!(
                connection_lost(&RedisError::from(Error::from(kind))),
                "{kind:?}"
            );
        }
        assert!(!connection_lost(&RedisError::from(Error::from(
            ErrorKind::TimedOut
        ))));
        let answered = RedisError::from((redis::ErrorKind::ResponseError, "WRONGTYPE"));
        assert!(!connection_lost(&answered));
        let script = RedisError::from((redis::ErrorKind::TypeError, "not a number"));
        assert!(!connection_lost(&script));
    }

    #[test]
    fn urls_are_checked_without_echoing_them() {
        assert!(check_url("redis://:secret@127.0.0.1:6380/2").is_ok());
        let refused = check_url("rediss://:secret@h").unwrap_err();
        assert!(!refused.contains("secret"));
        let refused = check_url("http://:secret@h").unwrap_err();
        assert!(!refused.contains("secret"));
    }
}

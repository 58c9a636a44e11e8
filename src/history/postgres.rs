//! `--history-backend postgres`: the history in a Postgres database, shared by every gateway
//! replica that points at it.
//!
//! Schema: created and migrated by the gateway at startup. [`MIGRATIONS`] is an ordered list
//! of versioned steps; `tg_schema_migrations` records the versions applied. A starting
//! gateway takes a transaction-scoped advisory lock, applies the missing versions in order
//! and records them in that same transaction, so two gateways starting at once apply each
//! step exactly once and a failed step leaves the schema as it was. A step once released is
//! never edited: a change is a new step, written so that a gateway of the previous version
//! keeps working on the new schema (rolling upgrades).
//!
//! Tables (every key starts with the owner, so every query is scoped to one tenant):
//! - `tg_responses (owner, id)`: one stored response; a delete removes the row.
//! - `tg_conversations (owner, id)`: metadata, a soft-delete flag and `next_seq`, the
//!   order number of the next item (allocated under the row's lock, so concurrent appends
//!   from any replica are serialised per conversation).
//! - `tg_items (owner, conversation, id)`: one item, its `seq` in the conversation, `added`
//!   (an order across conversations, for [`History::find_item`]: the latest wins) and a
//!   soft-delete flag. A deleted item keeps its id taken.
//!
//! JSON is kept as `TEXT`, not `JSONB`: the store hands back exactly the text it was given
//! (`JSONB` would reorder keys and cost a parse per read).
//!
//! Connections: at most `--history-pool-size`, opened on demand on the store's own thread
//! ([`super::thread`]) and reopened after a failure. A call that times out drops the
//! connection it used (the server then aborts whatever that connection was doing), so a
//! hung call never leaves a connection mid-transaction in the pool. No TLS: the database
//! is expected on a private network or the same host.

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_postgres::config::Host;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, NoTls, Row, Statement};

use super::thread::StoreThread;
use super::{
    merge_metadata, AppendRefused, ConversationRecord, History, ItemRecord, ItemsQuery, Order,
    Owner, PatchRefused, ResponseRecord, StoreError, StoreFuture, MAX_CONVERSATION_ITEMS,
};
use crate::secret::Secret;

/// Runs `$body` (an async block's contents, `$c` its `&mut Conn`) on a connection leased
/// from `$pool`; the connection goes back to the pool once the body completed, whatever its
/// answer, and closes if the body never completes (the call's timeout dropped it).
macro_rules! leased {
    ($pool:expr, $c:ident => $body:expr) => {{
        let pool: &Pool = &$pool;
        let mut lease = pool.take().await?;
        let $c = &mut lease.conn;
        let result: Result<_, tokio_postgres::Error> = async { $body }.await;
        pool.give_back(lease);
        result.map_err(|err| pool.failed(&err))
    }};
}

/// The schema, one step per version, applied in order. Never edit a released step.
const MIGRATIONS: &[(i32, &str, &str)] = &[(
    1,
    "responses, conversations, items",
    "CREATE TABLE tg_responses (
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        status TEXT NOT NULL,
        conversation TEXT,
        object TEXT NOT NULL,
        input_items TEXT NOT NULL,
        context TEXT NOT NULL,
        PRIMARY KEY (owner, id)
    );
    CREATE TABLE tg_conversations (
        owner TEXT NOT NULL,
        id TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        metadata TEXT NOT NULL,
        deleted BOOLEAN NOT NULL DEFAULT FALSE,
        next_seq BIGINT NOT NULL DEFAULT 0,
        PRIMARY KEY (owner, id)
    );
    CREATE TABLE tg_items (
        owner TEXT NOT NULL,
        conversation TEXT NOT NULL,
        id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        added BIGINT GENERATED ALWAYS AS IDENTITY,
        created_at BIGINT NOT NULL,
        item TEXT NOT NULL,
        deleted BOOLEAN NOT NULL DEFAULT FALSE,
        PRIMARY KEY (owner, conversation, id),
        FOREIGN KEY (owner, conversation) REFERENCES tg_conversations (owner, id)
    );
    CREATE UNIQUE INDEX tg_items_order ON tg_items (owner, conversation, seq);
    CREATE INDEX tg_items_by_id ON tg_items (owner, id, added);",
)];

/// The advisory lock that serialises migrations across gateways ("tollgate" in ASCII).
const MIGRATION_LOCK: i64 = 0x746f_6c6c_6761_7465;

/// The Postgres store.
pub struct PostgresHistory {
    pool: Arc<Pool>,
    thread: StoreThread,
}

impl PostgresHistory {
    /// Connects (one connection, to fail now if the database is unreachable or refuses the
    /// credentials) and migrates the schema. `url` is a libpq-style URL
    /// (`postgres://user:password@host:port/dbname`).
    pub fn open(
        url: &Secret,
        pool_size: usize,
        timeout: Duration,
    ) -> Result<PostgresHistory, StoreError> {
        let mut config = parse_url(url.expose()).map_err(StoreError::Unavailable)?;
        config.connect_timeout(timeout);
        let pool = Arc::new(Pool {
            target: target(&config),
            config,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(pool_size.max(1))),
        });
        let thread = StoreThread::start("postgres", timeout)?;
        let migrating = pool.clone();
        thread.block(async move { migrating.migrate().await })?;
        Ok(PostgresHistory { pool, thread })
    }
}

/// Whether `url` is a Postgres URL the store can use; the message never repeats the URL.
pub fn check_url(url: &str) -> Result<(), String> {
    parse_url(url).map(|_| ())
}

fn parse_url(url: &str) -> Result<Config, String> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err("expected a postgres:// or postgresql:// URL".into());
    }
    let config = Config::from_str(url)
        .map_err(|_| "expected a postgres://user:password@host:port/dbname URL".to_owned())?;
    if config.get_hosts().is_empty() {
        return Err("expected a postgres:// URL with a host".into());
    }
    Ok(config)
}

/// `host:port/dbname`: what messages name of the database (never the user or password).
fn target(config: &Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(host)) => host.clone(),
        Some(Host::Unix(path)) => path.display().to_string(),
        None => "?".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", config.get_dbname().unwrap_or(""))
}

/// The connections: at most one per permit, idle ones kept for the next call.
struct Pool {
    config: Config,
    target: String,
    idle: Mutex<Vec<Conn>>,
    permits: Arc<Semaphore>,
}

/// A connection taken from the pool; [`Pool::give_back`] returns it once a call completed.
/// Dropped instead (the call timed out or failed mid-way), it closes.
struct Lease {
    conn: Conn,
    _permit: OwnedSemaphorePermit,
}

/// A pooled connection and its prepared statements.
struct Conn {
    client: Client,
    st: Statements,
}

impl Pool {
    async fn take(&self) -> Result<Lease, StoreError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Unavailable("the postgres pool is closed".into()))?;
        let reused = {
            let mut idle = self
                .idle
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            idle.retain(|conn| !conn.client.is_closed());
            idle.pop()
        };
        let conn = match reused {
            Some(conn) => conn,
            None => {
                let client = self.connect().await?;
                let st = Statements::prepare(&client)
                    .await
                    .map_err(|err| self.failed(&err))?;
                Conn { client, st }
            }
        };
        Ok(Lease {
            conn,
            _permit: permit,
        })
    }

    fn give_back(&self, lease: Lease) {
        if !lease.conn.client.is_closed() {
            let mut idle = self
                .idle
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            idle.push(lease.conn);
        }
    }

    /// Opens a connection and runs its driver on the store's runtime (the caller's).
    async fn connect(&self) -> Result<Client, StoreError> {
        let (client, connection) = self
            .config
            .connect(NoTls)
            .await
            .map_err(|err| self.failed(&err))?;
        let target = self.target.clone();
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::warn!(database = %target, error = %chain(&err), "postgres connection closed");
            }
        });
        Ok(client)
    }

    fn failed(&self, err: &tokio_postgres::Error) -> StoreError {
        StoreError::Unavailable(format!("postgres {}: {}", self.target, chain(err)))
    }

    /// Migrates on a connection of its own (the pool's connections prepare statements
    /// against the migrated tables).
    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.connect().await?;
        let migrated: Result<(), tokio_postgres::Error> = async {
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
                .await?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS tg_schema_migrations (
                    version INTEGER PRIMARY KEY,
                    name TEXT NOT NULL,
                    applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
                )",
            )
            .await?;
            let row = tx
                .query_one(
                    "SELECT COALESCE(MAX(version), 0) FROM tg_schema_migrations",
                    &[],
                )
                .await?;
            let current: i32 = row.try_get(0)?;
            for (version, name, sql) in MIGRATIONS.iter().filter(|(v, ..)| *v > current) {
                tx.batch_execute(sql).await?;
                tx.execute(
                    "INSERT INTO tg_schema_migrations (version, name) VALUES ($1, $2)",
                    &[version as &(dyn ToSql + Sync), name],
                )
                .await?;
                tracing::info!(version, name, "history schema migrated");
            }
            tx.commit().await
        }
        .await;
        migrated.map_err(|err| self.failed(&err))
    }
}

fn chain(err: &tokio_postgres::Error) -> String {
    crate::http::client::error_chain(err)
}

fn corrupt(err: tokio_postgres::Error) -> StoreError {
    StoreError::Corrupt(format!("postgres row: {err}"))
}

fn response_from(owner: &Owner, row: &Row) -> Result<ResponseRecord, tokio_postgres::Error> {
    Ok(ResponseRecord {
        id: row.try_get(0)?,
        owner: owner.clone(),
        created_at: row.try_get(1)?,
        status: row.try_get(2)?,
        conversation: row.try_get(3)?,
        object: row.try_get(4)?,
        input_items: row.try_get(5)?,
        context: row.try_get(6)?,
    })
}

fn conversation_from(
    owner: &Owner,
    row: &Row,
) -> Result<ConversationRecord, tokio_postgres::Error> {
    Ok(ConversationRecord {
        id: row.try_get(0)?,
        owner: owner.clone(),
        created_at: row.try_get(1)?,
        metadata: row.try_get(2)?,
    })
}

fn item_from(row: &Row) -> Result<ItemRecord, tokio_postgres::Error> {
    Ok(ItemRecord {
        id: row.try_get(0)?,
        created_at: row.try_get(1)?,
        item: row.try_get(2)?,
    })
}

/// A page size as SQL wants it.
fn limit(query: &ItemsQuery) -> i64 {
    i64::try_from(query.limit.min(MAX_CONVERSATION_ITEMS)).unwrap_or(0)
}

/// A live conversation of an owner (a macro, so `concat!` can extend it).
macro_rules! select_conversation {
    () => {
        "SELECT id, created_at, metadata FROM tg_conversations \
         WHERE owner = $1 AND id = $2 AND NOT deleted"
    };
}

/// Every statement the store runs, prepared once per connection: a call is then one round
/// trip (an unprepared query is first parsed and described, a round trip of its own).
struct Statements {
    put_response: Statement,
    get_response: Statement,
    delete_response: Statement,
    create_conversation: Statement,
    get_conversation: Statement,
    lock_conversation: Statement,
    set_metadata: Statement,
    delete_conversation: Statement,
    reserve_seq: Statement,
    taken_ids: Statement,
    count_items: Statement,
    insert_items: Statement,
    item_seq: Statement,
    page_asc: Statement,
    page_desc: Statement,
    get_item: Statement,
    find_item: Statement,
    delete_item: Statement,
}

impl Statements {
    /// Prepares them all at once (pipelined on the connection).
    async fn prepare(client: &Client) -> Result<Statements, tokio_postgres::Error> {
        let (
            put_response,
            get_response,
            delete_response,
            create_conversation,
            get_conversation,
            lock_conversation,
            set_metadata,
            delete_conversation,
            reserve_seq,
            taken_ids,
            count_items,
            insert_items,
            item_seq,
            page_asc,
            page_desc,
            get_item,
            find_item,
            delete_item,
        ) = tokio::try_join!(
            client.prepare(
                "INSERT INTO tg_responses \
                 (owner, id, created_at, status, conversation, object, input_items, context) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                 ON CONFLICT (owner, id) DO UPDATE SET created_at = $3, status = $4, \
                 conversation = $5, object = $6, input_items = $7, context = $8"
            ),
            client.prepare(
                "SELECT id, created_at, status, conversation, object, input_items, context \
                 FROM tg_responses WHERE owner = $1 AND id = $2"
            ),
            client.prepare("DELETE FROM tg_responses WHERE owner = $1 AND id = $2"),
            client.prepare(
                "INSERT INTO tg_conversations (owner, id, created_at, metadata) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (owner, id) DO NOTHING"
            ),
            client.prepare(select_conversation!()),
            client.prepare(concat!(select_conversation!(), " FOR UPDATE")),
            client
                .prepare("UPDATE tg_conversations SET metadata = $3 WHERE owner = $1 AND id = $2"),
            client.prepare(
                "UPDATE tg_conversations SET deleted = TRUE \
                 WHERE owner = $1 AND id = $2 AND NOT deleted"
            ),
            client.prepare(
                "UPDATE tg_conversations SET next_seq = next_seq + $3 \
                 WHERE owner = $1 AND id = $2 AND NOT deleted RETURNING next_seq - $3"
            ),
            client.prepare(
                "SELECT id FROM tg_items WHERE owner = $1 AND conversation = $2 AND id = ANY($3)"
            ),
            client.prepare(
                "SELECT COUNT(*) FROM tg_items WHERE owner = $1 AND conversation = $2 \
                 AND NOT deleted"
            ),
            client.prepare(
                "INSERT INTO tg_items (owner, conversation, seq, id, created_at, item) \
                 SELECT $1, $2, $3 + n - 1, id, created_at, item \
                 FROM UNNEST($4::TEXT[], $5::BIGINT[], $6::TEXT[]) \
                 WITH ORDINALITY AS batch (id, created_at, item, n)"
            ),
            client.prepare(
                "SELECT seq FROM tg_items WHERE owner = $1 AND conversation = $2 AND id = $3 \
                 AND NOT deleted"
            ),
            client.prepare(
                "SELECT id, created_at, item FROM tg_items WHERE owner = $1 \
                 AND conversation = $2 AND NOT deleted AND seq > $3 ORDER BY seq ASC LIMIT $4"
            ),
            client.prepare(
                "SELECT id, created_at, item FROM tg_items WHERE owner = $1 \
                 AND conversation = $2 AND NOT deleted AND seq < $3 ORDER BY seq DESC LIMIT $4"
            ),
            client.prepare(
                "SELECT i.id, i.created_at, i.item FROM tg_items i \
                 JOIN tg_conversations c ON c.owner = i.owner AND c.id = i.conversation \
                 WHERE i.owner = $1 AND i.conversation = $2 AND i.id = $3 \
                 AND NOT i.deleted AND NOT c.deleted"
            ),
            client.prepare(
                "SELECT i.id, i.created_at, i.item FROM tg_items i \
                 JOIN tg_conversations c ON c.owner = i.owner AND c.id = i.conversation \
                 WHERE i.owner = $1 AND i.id = $2 AND NOT i.deleted AND NOT c.deleted \
                 ORDER BY i.added DESC LIMIT 1"
            ),
            client.prepare(
                "UPDATE tg_items SET deleted = TRUE WHERE owner = $1 \
                 AND conversation = $2 AND id = $3 AND NOT deleted"
            ),
        )?;
        Ok(Statements {
            put_response,
            get_response,
            delete_response,
            create_conversation,
            get_conversation,
            lock_conversation,
            set_metadata,
            delete_conversation,
            reserve_seq,
            taken_ids,
            count_items,
            insert_items,
            item_seq,
            page_asc,
            page_desc,
            get_item,
            find_item,
            delete_item,
        })
    }
}

impl Pool {
    async fn get_conversation(
        &self,
        owner: &Owner,
        id: &str,
    ) -> Result<Option<ConversationRecord>, StoreError> {
        let row = leased!(self, c => c.client.query_opt(&c.st.get_conversation, &[&owner.as_str(), &id]).await)?;
        row.map(|row| conversation_from(owner, &row))
            .transpose()
            .map_err(corrupt)
    }

    async fn patch_metadata(
        &self,
        owner: &Owner,
        id: &str,
        patch: &str,
    ) -> Result<Result<ConversationRecord, PatchRefused>, StoreError> {
        let outcome = leased!(self, c => {
            let tx = c.client.transaction().await?;
            let Some(row) = tx
                .query_opt(
                    &c.st.lock_conversation,
                    &[&owner.as_str(), &id],
                )
                .await?
            else {
                return Ok(Ok(Err(PatchRefused::NoConversation)));
            };
            let current = match conversation_from(owner, &row) {
                Ok(current) => current,
                Err(err) => return Ok(Err(err)),
            };
            let merged = match merge_metadata(&current.metadata, patch) {
                Ok(merged) => merged,
                Err(refused) => return Ok(Ok(Err(refused))),
            };
            tx.execute(
                &c.st.set_metadata,
                &[&owner.as_str(), &id, &merged],
            )
            .await?;
            tx.commit().await?;
            Ok(Ok(Ok(ConversationRecord {
                metadata: merged,
                ..current
            })))
        })?;
        outcome.map_err(corrupt)
    }

    async fn append_items(
        &self,
        owner: &Owner,
        conversation: &str,
        items: &[ItemRecord],
    ) -> Result<Result<(), AppendRefused>, StoreError> {
        let mut ids: Vec<&str> = Vec::with_capacity(items.len());
        for item in items {
            if ids.contains(&item.id.as_str()) {
                return Ok(Err(AppendRefused::AlreadyInConversation(item.id.clone())));
            }
            ids.push(&item.id);
        }
        let count = i64::try_from(items.len()).unwrap_or(i64::MAX);
        let created: Vec<i64> = items.iter().map(|item| item.created_at).collect();
        let bodies: Vec<&str> = items.iter().map(|item| item.item.as_str()).collect();
        leased!(self, c => {
            let tx = c.client.transaction().await?;
            let owner = owner.as_str();
            // Locks the conversation row until commit and allocates the batch's order
            // numbers: appends to one conversation are serialised across replicas.
            let Some(row) = tx
                .query_opt(
                    &c.st.reserve_seq,
                    &[&owner, &conversation, &count],
                )
                .await?
            else {
                return Ok(Err(AppendRefused::NoConversation));
            };
            let first_seq: i64 = row.try_get(0)?;
            let taken = tx
                .query(
                    &c.st.taken_ids,
                    &[&owner, &conversation, &ids],
                )
                .await?;
            let taken: Vec<String> = taken
                .iter()
                .map(|row| row.try_get(0))
                .collect::<Result<_, _>>()?;
            if let Some(id) = ids.iter().find(|id| taken.iter().any(|t| t == *id)) {
                return Ok(Err(AppendRefused::AlreadyInConversation((*id).to_owned())));
            }
            let row = tx
                .query_one(
                    &c.st.count_items,
                    &[&owner, &conversation],
                )
                .await?;
            let held: i64 = row.try_get(0)?;
            let max = i64::try_from(MAX_CONVERSATION_ITEMS).unwrap_or(i64::MAX);
            if held.saturating_add(count) > max {
                return Ok(Err(AppendRefused::Full));
            }
            let params: [&(dyn ToSql + Sync); 6] = [
                &owner,
                &conversation,
                &first_seq,
                &ids,
                &created,
                &bodies,
            ];
            tx.execute(
                &c.st.insert_items,
                &params,
            )
            .await?;
            tx.commit().await?;
            Ok(Ok(()))
        })
    }

    async fn list_items(
        &self,
        owner: &Owner,
        conversation: &str,
        query: &ItemsQuery,
    ) -> Result<Option<Vec<ItemRecord>>, StoreError> {
        let rows = leased!(self, c => {
            let owner = owner.as_str();
            let live = c.client.query_opt(&c.st.get_conversation, &[&owner, &conversation])
                .await?;
            if live.is_none() {
                return Ok(None);
            }
            let after = match &query.after {
                None => None,
                Some(after) => {
                    let row = c.client.query_opt(
                            &c.st.item_seq,
                            &[&owner, &conversation, after],
                        )
                        .await?;
                    match row {
                        Some(row) => Some(row.try_get::<_, i64>(0)?),
                        None => return Ok(Some(Vec::new())),
                    }
                }
            };
            let sql = match query.order {
                Order::Asc => {
                    &c.st.page_asc
                }
                Order::Desc => {
                    &c.st.page_desc
                }
            };
            let bound = after.unwrap_or(match query.order {
                Order::Asc => -1,
                Order::Desc => i64::MAX,
            });
            let rows = c.client.query(sql, &[&owner, &conversation, &bound, &limit(query)])
                .await?;
            Ok(Some(rows))
        })?;
        let Some(rows) = rows else {
            return Ok(None);
        };
        rows.iter()
            .map(item_from)
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
            .map_err(corrupt)
    }

    async fn get_item(
        &self,
        owner: &Owner,
        conversation: &str,
        item: &str,
    ) -> Result<Option<ItemRecord>, StoreError> {
        let row = leased!(self, c => {
            c.client.query_opt(
                &c.st.get_item,
                &[&owner.as_str(), &conversation, &item],
            )
            .await
        })?;
        row.as_ref().map(item_from).transpose().map_err(corrupt)
    }

    async fn find_item(&self, owner: &Owner, item: &str) -> Result<Option<ItemRecord>, StoreError> {
        let row = leased!(self, c => {
            c.client.query_opt(
                &c.st.find_item,
                &[&owner.as_str(), &item],
            )
            .await
        })?;
        row.as_ref().map(item_from).transpose().map_err(corrupt)
    }

    async fn delete_item(
        &self,
        owner: &Owner,
        conversation: &str,
        item: &str,
    ) -> Result<Option<ConversationRecord>, StoreError> {
        let row = leased!(self, c => {
            let tx = c.client.transaction().await?;
            let owner = owner.as_str();
            let Some(row) = tx
                .query_opt(
                    &c.st.lock_conversation,
                    &[&owner, &conversation],
                )
                .await?
            else {
                return Ok(None);
            };
            let deleted = tx
                .execute(
                    &c.st.delete_item,
                    &[&owner, &conversation, &item],
                )
                .await?;
            tx.commit().await?;
            Ok((deleted > 0).then_some(row))
        })?;
        row.map(|row| conversation_from(owner, &row))
            .transpose()
            .map_err(corrupt)
    }
}

impl History for PostgresHistory {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn put_response(&self, record: ResponseRecord) -> StoreFuture<'_, ()> {
        let pool = self.pool.clone();
        self.thread.run(async move {
            let r = &record;
            let params: [&(dyn ToSql + Sync); 8] = [
                &r.owner.as_str(),
                &r.id,
                &r.created_at,
                &r.status,
                &r.conversation,
                &r.object,
                &r.input_items,
                &r.context,
            ];
            leased!(pool, c => {
                c.client.execute(
                    &c.st.put_response,
                    &params,
                )
                .await
            })
            .map(|_| ())
        })
    }

    fn get_response<'a>(
        &'a self,
        owner: &'a Owner,
        id: &'a str,
    ) -> StoreFuture<'a, Option<ResponseRecord>> {
        let (pool, owner, id) = (self.pool.clone(), owner.clone(), id.to_owned());
        self.thread.run(async move {
            let row = leased!(pool, c => {
                c.client.query_opt(
                    &c.st.get_response,
                    &[&owner.as_str(), &id],
                )
                .await
            })?;
            row.map(|row| response_from(&owner, &row))
                .transpose()
                .map_err(corrupt)
        })
    }

    fn delete_response<'a>(&'a self, owner: &'a Owner, id: &'a str) -> StoreFuture<'a, bool> {
        let (pool, owner, id) = (self.pool.clone(), owner.clone(), id.to_owned());
        self.thread.run(async move {
            let deleted = leased!(pool, c => {
                c.client.execute(
                    &c.st.delete_response,
                    &[&owner.as_str(), &id],
                )
                .await
            })?;
            Ok(deleted > 0)
        })
    }

    fn create_conversation(&self, record: ConversationRecord) -> StoreFuture<'_, ()> {
        let pool = self.pool.clone();
        self.thread.run(async move {
            let r = &record;
            let inserted = leased!(pool, c => {
                c.client.execute(
                    &c.st.create_conversation,
                    &[&r.owner.as_str(), &r.id, &r.created_at, &r.metadata],
                )
                .await
            })?;
            if inserted == 0 {
                return Err(StoreError::Unavailable(format!(
                    "conversation {} already exists",
                    r.id
                )));
            }
            Ok(())
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
        let (pool, owner, id) = (self.pool.clone(), owner.clone(), id.to_owned());
        self.thread.run(async move {
            let deleted = leased!(pool, c => {
                c.client.execute(
                    &c.st.delete_conversation,
                    &[&owner.as_str(), &id],
                )
                .await
            })?;
            Ok(deleted > 0)
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
    fn urls_are_checked_without_echoing_them() {
        assert!(check_url("postgres://u:secret@db:5433/hist").is_ok());
        assert!(check_url("postgresql://db/hist").is_ok());
        let refused = check_url("redis://u:secret@db").unwrap_err();
        assert!(!refused.contains("secret"));
        let refused = check_url("postgres://u:secret@db:notaport/x").unwrap_err();
        assert!(!refused.contains("secret"));
    }

    #[test]
    fn the_target_names_host_port_and_database_only() {
        let config = parse_url("postgres://u:secret@db:5433/hist").unwrap();
        assert_eq!(target(&config), "db:5433/hist");
    }

    #[test]
    fn migrations_are_in_order() {
        let versions: Vec<i32> = MIGRATIONS.iter().map(|(v, ..)| *v).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(versions.first(), Some(&1));
    }
}

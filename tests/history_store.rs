//! The history store's behaviour, one suite run against every backend through the public
//! `History` trait: `memory` in this process, `postgres` and `redis` on real servers
//! (Debian's packages, started here on 127.0.0.1 with a throwaway data directory). A
//! server that cannot be started fails the test: CI installs both (tests/run.sh).

use crate::common::stores;

use std::sync::Arc;
use std::time::{Duration, Instant};

use stores::{Server, PASSWORD};
use tollgate::history::{
    self, AppendRefused, ConversationRecord, History, HistoryBackend, HistorySettings, ItemRecord,
    ItemsQuery, Order, Owner, PatchRefused, ResponseRecord, StoreError, MAX_METADATA_PROPERTIES,
};
use tollgate::secret::Secret;

const TIMEOUT: Duration = Duration::from_secs(2);

fn settings(backend: HistoryBackend, server: Option<&Server>) -> HistorySettings {
    let url = server.map(|s| Secret::new(s.url.clone()));
    HistorySettings {
        backend,
        postgres_url: url.clone().filter(|_| backend == HistoryBackend::Postgres),
        redis_url: url.filter(|_| backend == HistoryBackend::Redis),
        pool_size: 4,
        timeout: TIMEOUT,
        ..HistorySettings::default()
    }
}

fn open(backend: HistoryBackend, server: Option<&Server>) -> Arc<dyn History> {
    match history::open(&settings(backend, server)) {
        Ok(store) => store,
        Err(err) => panic!("cannot open the {} store: {err}", backend.as_str()),
    }
}

fn server(backend: HistoryBackend) -> Server {
    let started = match backend {
        HistoryBackend::Postgres => Server::postgres(),
        _ => Server::redis(),
    };
    match started {
        Ok(server) => server,
        Err(why) => panic!("cannot start a {} server: {why}", backend.as_str()),
    }
}

/// Ids unique to one run, so suites may share a server.
fn unique(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn tenant(name: &str) -> Owner {
    Owner::tenant(Arc::from(name))
}

fn response(owner: &Owner, id: &str, conversation: Option<&str>) -> ResponseRecord {
    ResponseRecord {
        id: id.to_owned(),
        owner: owner.clone(),
        created_at: 1_700_000_000,
        status: "completed".into(),
        conversation: conversation.map(str::to_owned),
        object: format!(r#"{{"id":"{id}","object":"response","output":[]}}"#),
        input_items: r#"[{"id":"msg_1","type":"message"}]"#.into(),
        context: r#"[{"type":"message","role":"user","content":"hi ☃"}]"#.into(),
    }
}

fn conversation(owner: &Owner, id: &str) -> ConversationRecord {
    ConversationRecord {
        id: id.to_owned(),
        owner: owner.clone(),
        created_at: 1_700_000_100,
        metadata: r#"{"topic":"demo"}"#.into(),
    }
}

fn item(id: &str) -> ItemRecord {
    ItemRecord {
        id: id.to_owned(),
        created_at: 1_700_000_200,
        item: format!(r#"{{"id":"{id}","type":"message","role":"user","content":[]}}"#),
    }
}

fn page(limit: usize, order: Order, after: Option<&str>) -> ItemsQuery {
    ItemsQuery {
        limit,
        order,
        after: after.map(str::to_owned),
    }
}

fn ids(items: &[ItemRecord]) -> Vec<&str> {
    items.iter().map(|i| i.id.as_str()).collect()
}

/// Everything one store instance must do.
async fn behaviour(store: &dyn History) {
    let alice = tenant("alice");
    let bob = tenant("bob");
    let shared = Owner::shared();

    // Responses: put, get, replace, owner isolation, delete.
    let rid = unique("resp");
    let mut record = response(&alice, &rid, None);
    store.put_response(record.clone()).await.unwrap();
    assert_eq!(
        store.get_response(&alice, &rid).await.unwrap(),
        Some(record.clone())
    );
    assert_eq!(store.get_response(&bob, &rid).await.unwrap(), None);
    assert_eq!(store.get_response(&shared, &rid).await.unwrap(), None);
    record.status = "cancelled".into();
    record.conversation = Some("conv_x".into());
    store.put_response(record.clone()).await.unwrap();
    assert_eq!(
        store.get_response(&alice, &rid).await.unwrap(),
        Some(record.clone())
    );
    assert!(!store.delete_response(&bob, &rid).await.unwrap());
    assert!(store.get_response(&alice, &rid).await.unwrap().is_some());
    assert!(store.delete_response(&alice, &rid).await.unwrap());
    assert!(!store.delete_response(&alice, &rid).await.unwrap());
    assert_eq!(store.get_response(&alice, &rid).await.unwrap(), None);
    let shared_rid = unique("resp");
    store
        .put_response(response(&shared, &shared_rid, None))
        .await
        .unwrap();
    assert!(store
        .get_response(&shared, &shared_rid)
        .await
        .unwrap()
        .is_some());
    assert_eq!(store.get_response(&alice, &shared_rid).await.unwrap(), None);

    // Conversations: create, get, isolation, metadata patch.
    let cid = unique("conv");
    let conv = conversation(&alice, &cid);
    store.create_conversation(conv.clone()).await.unwrap();
    assert_eq!(
        store.get_conversation(&alice, &cid).await.unwrap(),
        Some(conv.clone())
    );
    assert_eq!(store.get_conversation(&bob, &cid).await.unwrap(), None);
    let patched = store
        .patch_metadata(&alice, &cid, r#"{"a":"1","topic":null}"#)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(patched.metadata, r#"{"a":"1"}"#);
    assert_eq!(patched.created_at, conv.created_at);
    assert_eq!(
        store
            .get_conversation(&alice, &cid)
            .await
            .unwrap()
            .map(|c| c.metadata),
        Some(r#"{"a":"1"}"#.to_owned())
    );
    assert_eq!(
        store
            .patch_metadata(&bob, &cid, r#"{"a":"2"}"#)
            .await
            .unwrap(),
        Err(PatchRefused::NoConversation)
    );
    let full: serde_json::Map<String, serde_json::Value> = (0..MAX_METADATA_PROPERTIES)
        .map(|i| (format!("k{i}"), "v".into()))
        .collect();
    let full = serde_json::Value::Object(full).to_string();
    assert_eq!(
        store.patch_metadata(&alice, &cid, &full).await.unwrap(),
        Err(PatchRefused::TooManyProperties),
        "16 new keys beside `a` pass the cap"
    );
    assert!(matches!(
        store
            .patch_metadata(&alice, &cid, r#"{"a":1}"#)
            .await
            .unwrap(),
        Err(PatchRefused::BadPatch(_))
    ));
    assert_eq!(
        store
            .get_conversation(&alice, &cid)
            .await
            .unwrap()
            .map(|c| c.metadata),
        Some(r#"{"a":"1"}"#.to_owned()),
        "a refused patch changes nothing"
    );

    // Items: append in order, duplicates refused whole, pages, get, delete.
    let batch: Vec<ItemRecord> = (1..=5).map(|i| item(&format!("msg_{i}"))).collect();
    store
        .append_items(&alice, &cid, batch)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        store
            .append_items(&bob, &cid, vec![item("msg_9")])
            .await
            .unwrap(),
        Err(AppendRefused::NoConversation)
    );
    assert_eq!(
        store
            .append_items(&alice, &cid, vec![item("msg_6"), item("msg_3")])
            .await
            .unwrap(),
        Err(AppendRefused::AlreadyInConversation("msg_3".into()))
    );
    assert_eq!(
        store
            .append_items(&alice, &cid, vec![item("msg_7"), item("msg_7")])
            .await
            .unwrap(),
        Err(AppendRefused::AlreadyInConversation("msg_7".into()))
    );
    assert_eq!(
        store.get_item(&alice, &cid, "msg_6").await.unwrap(),
        None,
        "no partial batch"
    );
    store
        .append_items(&alice, &cid, vec![item("msg_6")])
        .await
        .unwrap()
        .unwrap();
    let all = store
        .list_items(&alice, &cid, &page(100, Order::Asc, None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ids(&all),
        ["msg_1", "msg_2", "msg_3", "msg_4", "msg_5", "msg_6"]
    );
    assert_eq!(all[0], item("msg_1"));
    let desc = store
        .list_items(&alice, &cid, &page(2, Order::Desc, None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&desc), ["msg_6", "msg_5"]);
    let after = store
        .list_items(&alice, &cid, &page(2, Order::Asc, Some("msg_2")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&after), ["msg_3", "msg_4"]);
    let before = store
        .list_items(&alice, &cid, &page(10, Order::Desc, Some("msg_3")))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&before), ["msg_2", "msg_1"]);
    let unknown_after = store
        .list_items(&alice, &cid, &page(10, Order::Asc, Some("msg_nope")))
        .await
        .unwrap();
    assert_eq!(unknown_after, Some(Vec::new()));
    assert_eq!(
        store
            .list_items(&bob, &cid, &page(10, Order::Asc, None))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.get_item(&alice, &cid, "msg_4").await.unwrap(),
        Some(item("msg_4"))
    );
    assert_eq!(store.get_item(&bob, &cid, "msg_4").await.unwrap(), None);
    assert_eq!(
        store.find_item(&alice, "msg_4").await.unwrap(),
        Some(item("msg_4"))
    );
    assert_eq!(store.find_item(&bob, "msg_4").await.unwrap(), None);
    assert_eq!(store.delete_item(&bob, &cid, "msg_4").await.unwrap(), None);
    let after_delete = store.delete_item(&alice, &cid, "msg_4").await.unwrap();
    assert_eq!(after_delete.map(|c| c.id), Some(cid.clone()));
    assert_eq!(
        store.delete_item(&alice, &cid, "msg_4").await.unwrap(),
        None
    );
    assert_eq!(store.get_item(&alice, &cid, "msg_4").await.unwrap(), None);
    let left = store
        .list_items(&alice, &cid, &page(100, Order::Asc, None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&left), ["msg_1", "msg_2", "msg_3", "msg_5", "msg_6"]);

    // Soft delete of the conversation: everything answers as absent.
    assert!(!store.delete_conversation(&bob, &cid).await.unwrap());
    assert!(store.delete_conversation(&alice, &cid).await.unwrap());
    assert!(!store.delete_conversation(&alice, &cid).await.unwrap());
    assert_eq!(store.get_conversation(&alice, &cid).await.unwrap(), None);
    assert_eq!(
        store
            .list_items(&alice, &cid, &page(10, Order::Asc, None))
            .await
            .unwrap(),
        None
    );
    assert_eq!(store.get_item(&alice, &cid, "msg_1").await.unwrap(), None);
    assert_eq!(store.find_item(&alice, "msg_1").await.unwrap(), None);
    assert_eq!(
        store
            .append_items(&alice, &cid, vec![item("msg_8")])
            .await
            .unwrap(),
        Err(AppendRefused::NoConversation)
    );
    assert_eq!(
        store.patch_metadata(&alice, &cid, "{}").await.unwrap(),
        Err(PatchRefused::NoConversation)
    );
}

/// Two instances on one server (two gateway replicas) see each other's writes, and appends
/// racing from both keep ids unique and batches whole.
async fn replicas(a: &dyn History, b: &dyn History) {
    let owner = tenant("replicas");
    let rid = unique("resp");
    a.put_response(response(&owner, &rid, None)).await.unwrap();
    assert!(b.get_response(&owner, &rid).await.unwrap().is_some());
    assert!(b.delete_response(&owner, &rid).await.unwrap());
    assert_eq!(a.get_response(&owner, &rid).await.unwrap(), None);

    let cid = unique("conv");
    a.create_conversation(conversation(&owner, &cid))
        .await
        .unwrap();
    let patched = b
        .patch_metadata(&owner, &cid, r#"{"from":"b"}"#)
        .await
        .unwrap()
        .unwrap();
    assert!(patched.metadata.contains(r#""from":"b""#));
    assert_eq!(
        a.get_conversation(&owner, &cid)
            .await
            .unwrap()
            .map(|c| c.metadata),
        Some(patched.metadata)
    );

    // 20 rounds: both replicas append a batch sharing one id at the same time; exactly one
    // of each pair wins, and the loser's batch leaves nothing behind.
    for round in 0..20 {
        let shared = format!("shared_{round}");
        let left = vec![item(&format!("a_{round}")), item(&shared)];
        let right = vec![item(&format!("b_{round}")), item(&shared)];
        let (l, r) = tokio::join!(
            a.append_items(&owner, &cid, left),
            b.append_items(&owner, &cid, right)
        );
        let (l, r) = (l.unwrap(), r.unwrap());
        assert!(l.is_ok() != r.is_ok(), "round {round}: {l:?} {r:?}");
        let loser = if l.is_ok() { "b" } else { "a" };
        assert_eq!(
            a.get_item(&owner, &cid, &format!("{loser}_{round}"))
                .await
                .unwrap(),
            None
        );
    }
    // Concurrent patches of different keys are all kept (none lost to a race).
    let patches: Vec<String> = (0..8).map(|i| format!(r#"{{"p{i}":"v"}}"#)).collect();
    let mut calls = Vec::new();
    for (i, patch) in patches.iter().enumerate() {
        let store = if i % 2 == 0 { a } else { b };
        calls.push(store.patch_metadata(&owner, &cid, patch));
    }
    for call in calls {
        call.await.unwrap().unwrap();
    }
    let metadata = a
        .get_conversation(&owner, &cid)
        .await
        .unwrap()
        .unwrap()
        .metadata;
    for i in 0..8 {
        assert!(metadata.contains(&format!(r#""p{i}":"v""#)), "{metadata}");
    }
    let all = b
        .list_items(&owner, &cid, &page(1000, Order::Asc, None))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(all.len(), 40);
    let mut unique_ids: Vec<&str> = ids(&all);
    unique_ids.sort_unstable();
    unique_ids.dedup();
    assert_eq!(unique_ids.len(), 40);
}

/// A store whose server is gone answers with an error within its timeout, never hangs, and
/// never shows the password.
async fn unreachable(store: &dyn History) {
    let owner = tenant("gone");
    let started = Instant::now();
    let put = store
        .put_response(response(&owner, "resp_gone", None))
        .await;
    let get = store.get_response(&owner, "resp_gone").await;
    let append = store
        .append_items(&owner, "conv_gone", vec![item("i")])
        .await;
    let elapsed = started.elapsed();
    for err in [put.err(), get.err(), append.err()] {
        let err = err.expect("a call on a stopped server must fail");
        assert!(
            matches!(err, StoreError::Timeout | StoreError::Unavailable(_)),
            "{err:?}"
        );
        assert!(!err.to_string().contains(PASSWORD), "{err}");
    }
    assert!(
        elapsed < TIMEOUT * 3 + Duration::from_secs(2),
        "{elapsed:?}"
    );
}

async fn durable_suite(backend: HistoryBackend) {
    let mut srv = server(backend);
    let a = open(backend, Some(&srv));
    assert_eq!(a.backend(), backend.as_str());
    behaviour(a.as_ref()).await;
    let b = open(backend, Some(&srv));
    replicas(a.as_ref(), b.as_ref()).await;

    // Restart of the gateway: what was written is there for a new instance.
    let owner = tenant("restart");
    let rid = unique("resp");
    let cid = unique("conv");
    a.put_response(response(&owner, &rid, Some(&cid)))
        .await
        .unwrap();
    a.create_conversation(conversation(&owner, &cid))
        .await
        .unwrap();
    a.append_items(&owner, &cid, vec![item("kept")])
        .await
        .unwrap()
        .unwrap();
    drop(a);
    drop(b);
    let reopened = open(backend, Some(&srv));
    assert_eq!(
        reopened.get_response(&owner, &rid).await.unwrap(),
        Some(response(&owner, &rid, Some(&cid)))
    );
    assert_eq!(
        reopened.get_item(&owner, &cid, "kept").await.unwrap(),
        Some(item("kept"))
    );

    // Restart of the server: the store reconnects, the data is still there.
    srv.stop();
    unreachable(reopened.as_ref()).await;
    srv.start().unwrap();
    let mut back = None;
    for _ in 0..20 {
        match reopened.get_response(&owner, &rid).await {
            Ok(found) => {
                back = Some(found);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    assert_eq!(back, Some(Some(response(&owner, &rid, Some(&cid)))));

    // The server gone at startup: opening fails within the timeout, naming no password.
    srv.stop();
    let started = Instant::now();
    let refused = history::open(&settings(backend, Some(&srv)));
    assert!(started.elapsed() < TIMEOUT * 2 + Duration::from_secs(2));
    match refused {
        Ok(_) => panic!("opening a stopped {} store succeeded", backend.as_str()),
        Err(err) => assert!(!err.to_string().contains(PASSWORD), "{err}"),
    }
}

#[tokio::test]
async fn memory_store() {
    let store = open(HistoryBackend::Memory, None);
    assert_eq!(store.backend(), "memory");
    behaviour(store.as_ref()).await;
}

#[tokio::test]
async fn postgres_store() {
    durable_suite(HistoryBackend::Postgres).await;
}

#[tokio::test]
async fn redis_store() {
    durable_suite(HistoryBackend::Redis).await;
}

/// After the server restarts, no call fails: every pooled connection the server closed is
/// replaced before a call goes out on it (Redis used to fail one call per connection with
/// `broken pipe`). Reads, then writes of every kind, each as many times as there are
/// connections in the pool.
async fn restart_fails_no_call(backend: HistoryBackend) {
    let mut srv = server(backend);
    let store = open(backend, Some(&srv));
    let owner = tenant("restarted");
    let cid = unique("conv");
    store
        .create_conversation(conversation(&owner, &cid))
        .await
        .unwrap();
    store
        .append_items(&owner, &cid, vec![item("before")])
        .await
        .unwrap()
        .unwrap();
    // Every pooled connection (4) opened and used.
    for _ in 0..8 {
        store.get_conversation(&owner, &cid).await.unwrap();
    }
    srv.stop();
    srv.start().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    for round in 0..8 {
        let read = store.get_item(&owner, &cid, "before").await;
        assert_eq!(read, Ok(Some(item("before"))), "read {round}");
    }
    for round in 0..8 {
        let id = format!("after_{round}");
        let appended = store.append_items(&owner, &cid, vec![item(&id)]).await;
        assert_eq!(appended, Ok(Ok(())), "append {round}");
        let rid = unique("resp");
        let put = store.put_response(response(&owner, &rid, None)).await;
        assert_eq!(put, Ok(()), "put {round}");
        assert_eq!(store.delete_response(&owner, &rid).await, Ok(true));
    }
}

/// An id no store can hold answers as unknown on a real server, and a server's own words
/// (an encoding error, its address) never reach the error a caller is given.
async fn malformed_ids_are_unknown(backend: HistoryBackend) {
    let mut srv = server(backend);
    let store = open(backend, Some(&srv));
    let owner = tenant("hostile");
    let huge = "r".repeat(200_000);
    for id in ["resp_\0x", "resp é", huge.as_str()] {
        assert_eq!(store.get_response(&owner, id).await, Ok(None));
        assert_eq!(store.delete_response(&owner, id).await, Ok(false));
        assert_eq!(store.get_conversation(&owner, id).await, Ok(None));
        assert_eq!(store.find_item(&owner, id).await, Ok(None));
    }
    let cid = unique("conv");
    store
        .create_conversation(conversation(&owner, &cid))
        .await
        .unwrap();
    let refused = store.append_items(&owner, &cid, vec![item("msg_\0")]).await;
    assert!(
        matches!(refused, Ok(Err(AppendRefused::MalformedId(_)))),
        "{refused:?}"
    );
    srv.stop();
    let err = store.get_response(&owner, "resp_1").await.unwrap_err();
    let text = err.to_string();
    assert!(
        !text.contains(&srv.port.to_string()) && !text.contains("127.0.0.1"),
        "{text}"
    );
}

#[tokio::test]
async fn redis_restart_fails_no_call() {
    restart_fails_no_call(HistoryBackend::Redis).await;
}

#[tokio::test]
async fn postgres_restart_fails_no_call() {
    restart_fails_no_call(HistoryBackend::Postgres).await;
}

#[tokio::test]
async fn redis_malformed_ids_are_unknown() {
    malformed_ids_are_unknown(HistoryBackend::Redis).await;
}

#[tokio::test]
async fn postgres_malformed_ids_are_unknown() {
    malformed_ids_are_unknown(HistoryBackend::Postgres).await;
}

/// The memory store's bounds through `history::open`: bytes per tenant, and a tenant's
/// writes never evict another's records.
#[tokio::test]
async fn memory_bounds_are_per_tenant() {
    let store = history::open(&HistorySettings {
        memory_max_conversations: 3,
        memory_max_bytes_per_tenant: 64 << 10,
        ..HistorySettings::default()
    })
    .unwrap();
    let (alice, bob) = (tenant("alice"), tenant("bob"));
    store
        .create_conversation(conversation(&alice, "conv_a"))
        .await
        .unwrap();
    for id in ["conv_b1", "conv_b2", "conv_b3"] {
        store
            .create_conversation(conversation(&bob, id))
            .await
            .unwrap();
    }
    assert!(store
        .get_conversation(&alice, "conv_a")
        .await
        .unwrap()
        .is_some());
    assert!(store
        .get_conversation(&bob, "conv_b1")
        .await
        .unwrap()
        .is_none());
    let big = |id: &str| ResponseRecord {
        context: format!("[\"{}\"]", "z".repeat(20_000)),
        ..response(&alice, id, None)
    };
    for i in 0..10 {
        store.put_response(big(&format!("resp_{i}"))).await.unwrap();
    }
    assert!(store
        .get_response(&alice, "resp_9")
        .await
        .unwrap()
        .is_some());
    assert!(store
        .get_response(&alice, "resp_0")
        .await
        .unwrap()
        .is_none());
    let huge = ResponseRecord {
        context: format!("[\"{}\"]", "z".repeat(70_000)),
        ..response(&alice, "resp_huge", None)
    };
    let refused = store.put_response(huge).await;
    assert!(matches!(refused, Err(StoreError::Full(_))), "{refused:?}");
    assert!(store
        .get_response(&alice, "resp_9")
        .await
        .unwrap()
        .is_some());
}

#[tokio::test]
async fn postgres_migrations_run_once_when_gateways_start_together() {
    let srv = server(HistoryBackend::Postgres);
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let settings = settings(HistoryBackend::Postgres, Some(&srv));
            std::thread::spawn(move || history::open(&settings).map(|_| ()))
        })
        .collect();
    for open in opens {
        open.join().unwrap().unwrap();
    }
    // And once more on the migrated schema.
    let store = open(HistoryBackend::Postgres, Some(&srv));
    behaviour(store.as_ref()).await;
}

#[tokio::test]
async fn a_wrong_password_is_refused_without_echoing_it() {
    let srv = server(HistoryBackend::Redis);
    let mut wrong = settings(HistoryBackend::Redis, Some(&srv));
    wrong.redis_url = Some(Secret::new(format!(
        "redis://:not-{PASSWORD}@127.0.0.1:{}/0",
        srv.port
    )));
    match history::open(&wrong) {
        Ok(_) => panic!("a wrong redis password was accepted"),
        Err(err) => assert!(!err.to_string().contains(PASSWORD), "{err}"),
    }
}

#[tokio::test]
async fn none_keeps_nothing() {
    let store = open(HistoryBackend::None, None);
    let owner = Owner::shared();
    store
        .put_response(response(&owner, "resp_1", None))
        .await
        .unwrap();
    assert_eq!(store.get_response(&owner, "resp_1").await.unwrap(), None);
    assert!(store
        .create_conversation(conversation(&owner, "conv_1"))
        .await
        .is_err());
    assert_eq!(
        store.get_conversation(&owner, "conv_1").await.unwrap(),
        None
    );
}

#[test]
fn a_durable_backend_without_its_url_does_not_open() {
    for backend in [HistoryBackend::Postgres, HistoryBackend::Redis] {
        assert!(history::open(&settings(backend, None)).is_err());
    }
}

//! Per-thread caches of resolved series for the families whose labels vary per request
//! (model, endpoint, connection mode, streaming).
//!
//! A prometheus-client family lookup takes a read lock and hashes every label value with
//! SipHash; interning the `model` label takes another lock and hash. On the request path
//! that was most of the metrics' cost. Each data-plane thread instead keeps its own maps
//! from the label values to the metric handles (which share their atomics with the family),
//! hashed with a cheap multiplicative hash and never locked. The first request of a label
//! combination on a thread does the family lookup; the maps are bounded, and past the bound
//! a request simply does the lookup again.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use std::sync::Arc;

use super::histogram::Histogram;
use super::labels::Label;
use super::{Counter, StreamErrors};
use crate::fxhash::FxHasher;

/// Entries per map beyond which nothing more is cached.
const MAX_ENTRIES: usize = 4096;

/// The label maps' hasher: the keys are the gateway's own label values, bounded in number,
/// so collision attacks buy nothing and a multiply-rotate hash is enough.
type Quick = BuildHasherDefault<FxHasher>;

/// The labels of one router series besides the constant ones.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteKey {
    pub connection_mode: &'static str,
    pub model: Label,
    pub endpoint: &'static str,
}

/// The labels of one selection series besides the constant policy.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SelectKey {
    pub worker_type: &'static str,
    pub connection_mode: &'static str,
    pub model: Label,
}

/// The raw labels a series was last asked for on this thread, and its handles: a steady
/// stream of one route's requests finds them by comparing a few strings, without interning
/// the model or hashing a key (two thread-local map lookups a request were about 1.5k
/// instructions). The model is kept in a `String` whose buffer the next miss reuses.
struct Last<K, V> {
    key: K,
    model: Option<String>,
    handles: V,
}

impl<K: PartialEq, V> Last<K, V> {
    fn get<'a>(slot: &'a Option<Last<K, V>>, key: &K, model: Option<&str>) -> Option<&'a V> {
        slot.as_ref()
            .filter(|last| last.key == *key && last.model.as_deref() == model)
            .map(|last| &last.handles)
    }

    fn put(slot: &mut Option<Last<K, V>>, key: K, model: Option<&str>, handles: V) {
        // A name too long to be a label (it counts as `other`) is not kept: the buffer
        // would hold a client's oversized string for the thread's lifetime.
        if model.is_some_and(|m| m.len() > crate::bounded::LABEL_BYTES) {
            *slot = None;
            return;
        }
        let mut buf = match slot.take() {
            Some(Last {
                model: Some(buf), ..
            }) => buf,
            _ => String::new(),
        };
        let model = model.map(|m| {
            buf.clear();
            buf.push_str(m);
            buf
        });
        *slot = Some(Last {
            key,
            model,
            handles,
        });
    }
}

/// The constant labels of a router series as the request path names them (the model
/// apart, which is compared as the client sent it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteRaw {
    pub connection_mode: &'static str,
    pub endpoint: &'static str,
    pub streaming: bool,
}

/// The constant labels of a selection series as the request path names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectRaw {
    pub worker_type: &'static str,
    pub connection_mode: &'static str,
    pub policy: &'static str,
}

/// One thread's caches, for one `Metrics` instance.
#[derive(Default)]
struct Cache {
    owner: usize,
    last_route: Option<Last<RouteRaw, (Counter, Histogram)>>,
    last_selection: Option<Last<SelectRaw, Counter>>,
    models: HashMap<Box<str>, Label, Quick>,
    /// Router request counter and duration histogram by (labels, streaming); the two
    /// streaming values hold clones of the same duration histogram.
    routes: HashMap<(RouteKey, bool), (Counter, Histogram), Quick>,
    selections: HashMap<SelectKey, Counter, Quick>,
    /// The `streaming_error` handle of each route, shared by its relayed streams.
    stream_errors: HashMap<RouteKey, Arc<StreamErrors>, Quick>,
    /// Circuit-breaker outcome counters by worker URL label: `[success, failure]`.
    outcomes: HashMap<Arc<str>, [Option<Counter>; 2], Quick>,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// Runs `f` on this thread's cache for the `Metrics` instance `owner` (a fresh cache when
/// the thread last served another instance, as tests and benches do).
fn with<R>(owner: usize, f: impl FnOnce(&mut Cache) -> R) -> R {
    CACHE.with(|cell| {
        let mut cache = cell.borrow_mut();
        if cache.owner != owner {
            *cache = Cache {
                owner,
                ..Cache::default()
            };
        }
        f(&mut cache)
    })
}

/// Looks `key` up in `map`, resolving and (within the bound) remembering it on a miss.
fn cached<K, V>(map: &mut HashMap<K, V, Quick>, key: K, resolve: impl FnOnce(&K) -> V) -> V
where
    K: std::hash::Hash + Eq,
    V: Clone,
{
    if let Some(v) = map.get(&key) {
        return v.clone();
    }
    let v = resolve(&key);
    if map.len() < MAX_ENTRIES {
        map.insert(key, v.clone());
    }
    v
}

/// The interned `model` label for `model`.
pub fn model(owner: usize, model: &str, resolve: impl FnOnce(&str) -> Label) -> Label {
    with(owner, |c| {
        if let Some(label) = c.models.get(model) {
            return label.clone();
        }
        let label = resolve(model);
        if c.models.len() < MAX_ENTRIES {
            c.models.insert(Box::from(model), label.clone());
        }
        label
    })
}

/// The router request counter and duration histogram of `key`.
pub fn route(
    owner: usize,
    key: RouteKey,
    streaming: bool,
    requests: impl FnOnce(&RouteKey) -> Counter,
    duration: impl FnOnce(&RouteKey) -> Histogram,
) -> (Counter, Histogram) {
    with(owner, |c| {
        cached(&mut c.routes, (key, streaming), |(k, _)| {
            (requests(k), duration(k))
        })
    })
}

/// Runs `record` on the router handles last remembered for these raw labels; `false`
/// when they are not the last ones (resolve them, then [`remember_route`]).
pub fn last_route(
    owner: usize,
    key: RouteRaw,
    model: Option<&str>,
    record: impl FnOnce(&Counter, &Histogram),
) -> bool {
    with(owner, |c| match Last::get(&c.last_route, &key, model) {
        Some((requests, duration)) => {
            record(requests, duration);
            true
        }
        None => false,
    })
}

/// Remembers the router handles of these raw labels for [`last_route`].
pub fn remember_route(
    owner: usize,
    key: RouteRaw,
    model: Option<&str>,
    handles: (Counter, Histogram),
) {
    with(owner, |c| Last::put(&mut c.last_route, key, model, handles));
}

/// Counts one selection on the counter last remembered for these raw labels; `false` when
/// they are not the last ones (resolve it, then [`remember_selection`]).
pub fn last_selection(owner: usize, key: SelectRaw, model: Option<&str>) -> bool {
    with(owner, |c| match Last::get(&c.last_selection, &key, model) {
        Some(counter) => {
            counter.inc();
            true
        }
        None => false,
    })
}

/// Remembers the selection counter of these raw labels for [`last_selection`].
pub fn remember_selection(owner: usize, key: SelectRaw, model: Option<&str>, counter: Counter) {
    with(owner, |c| {
        Last::put(&mut c.last_selection, key, model, counter)
    });
}

/// The `streaming_error` handle of `key`.
pub fn stream_errors(
    owner: usize,
    key: RouteKey,
    resolve: impl FnOnce(&RouteKey) -> Arc<StreamErrors>,
) -> Arc<StreamErrors> {
    with(owner, |c| cached(&mut c.stream_errors, key, resolve))
}

/// The selection counter of `key`.
pub fn selection(
    owner: usize,
    key: SelectKey,
    resolve: impl FnOnce(&SelectKey) -> Counter,
) -> Counter {
    with(owner, |c| cached(&mut c.selections, key, resolve))
}

/// The circuit-breaker outcome counter of the worker labelled `worker` (`failure` or
/// success), resolved on its first use on this thread.
pub fn outcome(
    owner: usize,
    worker: &Arc<str>,
    failure: bool,
    resolve: impl FnOnce() -> Counter,
) -> Counter {
    with(owner, |c| {
        let slot = usize::from(failure);
        if let Some(Some(counter)) = c.outcomes.get(worker.as_ref()).map(|pair| &pair[slot]) {
            return counter.clone();
        }
        let counter = resolve();
        if c.outcomes.len() < MAX_ENTRIES || c.outcomes.contains_key(worker.as_ref()) {
            c.outcomes.entry(worker.clone()).or_default()[slot] = Some(counter.clone());
        }
        counter
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_do_not_share_entries() {
        let a = model(1, "m", |_| Label::Static("first"));
        assert_eq!(a.as_str(), "first");
        assert_eq!(model(1, "m", |_| Label::Static("second")).as_str(), "first");
        assert_eq!(
            model(2, "m", |_| Label::Static("second")).as_str(),
            "second"
        );
    }

    #[test]
    fn the_last_series_answers_only_its_own_labels() {
        let owner = 4;
        let key = SelectRaw {
            worker_type: "regular",
            connection_mode: "http",
            policy: "random",
        };
        assert!(!last_selection(owner, key, Some("a")));
        let counter = Counter::default();
        remember_selection(owner, key, Some("a"), counter.clone());
        assert!(last_selection(owner, key, Some("a")));
        assert_eq!(counter.get(), 1);
        assert!(!last_selection(owner, key, Some("b")));
        assert!(!last_selection(owner, key, Some("ab")));
        assert!(!last_selection(owner, key, None));
        let other_policy = SelectRaw {
            policy: "cache_aware",
            ..key
        };
        assert!(!last_selection(owner, other_policy, Some("a")));
        remember_selection(owner, key, None, counter.clone());
        assert!(last_selection(owner, key, None));
        assert!(!last_selection(owner, key, Some("a")));
        assert_eq!(counter.get(), 2);
        let long = "m".repeat(crate::bounded::LABEL_BYTES + 1);
        remember_selection(owner, key, Some(&long), counter.clone());
        assert!(!last_selection(owner, key, Some(&long)));
        assert!(!last_selection(owner, key, None));
        remember_selection(owner, key, None, counter.clone());
        assert_eq!(counter.get(), 2);
        // Another `Metrics` instance on the same thread starts without it.
        assert!(!last_selection(owner + 1, key, None));
        assert!(!last_selection(owner, key, None));
    }

    #[test]
    fn maps_stop_growing_at_the_bound() {
        let owner = 3;
        for i in 0..MAX_ENTRIES + 10 {
            let name = format!("m{i}");
            model(owner, &name, |_| Label::Static("x"));
        }
        let size = with(owner, |c| c.models.len());
        assert_eq!(size, MAX_ENTRIES);
    }
}

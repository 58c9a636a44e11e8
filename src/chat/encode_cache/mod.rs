//! The tokenizer caches in front of `Tokenizer::encode_fast`: L0 answers a prompt seen
//! before from its ids; L1 answers a prompt that starts like one seen before (a chat with
//! one more turn) by encoding only what follows the longest shared prefix that ends right
//! after a special token (see [`boundaries`] for why those cuts are exact). The answer is
//! always exactly `encode_fast(text, add_special)`'s ids; L1 serves only
//! `add_special = false` (what the chat route asks for), where no post-processor adds ids
//! that would have to be placed around the cut.
//!
//! Each data-plane thread has caches of its own, so the event loop takes no lock; prompts
//! large enough to be tokenized on the blocking pool use one cache shared by the pool
//! ([`on_pool`]): the pool's threads come and go (a cache each would be lost or multiply
//! the memory bound), they may wait on a lock without stalling any connection, and the
//! lock is held for lookups and copies only, never while encoding. The bounds
//! ([`CacheSettings`]) are for the whole process, split evenly among the caches.
//!
//! Lookups, evictions and reused bytes are counted in process-wide atomics
//! ([`counts`]), exported by the metrics layer at scrape time.

mod clock;
mod store;

use std::cell::{Cell, RefCell};
use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Mutex, OnceLock, PoisonError};

use super::boundaries::{Boundaries, Place};
use super::encoder::Ids;
use super::language::Language;
use store::{Cache, Counters, Layer, Mark, Prefix};
pub use store::{Counts, Limits};

/// The tokenizer cache flags: bounds for the whole process (0 turns a layer off).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheSettings {
    /// `--tokenizer-cache-l0-max-entries`: whole prompts kept.
    pub l0_max_entries: usize,
    /// `--tokenizer-cache-l0-max-memory`: bytes of prompt text and ids L0 keeps.
    pub l0_max_bytes: usize,
    /// `--tokenizer-cache-l1-max-memory`: bytes of prompt text, ids and places L1 keeps.
    pub l1_max_bytes: usize,
}

impl Default for CacheSettings {
    fn default() -> CacheSettings {
        CacheSettings {
            l0_max_entries: 10_000,
            l0_max_bytes: 32 << 20,
            l1_max_bytes: 50 << 20,
        }
    }
}

impl CacheSettings {
    /// Each of `caches` caches' share.
    fn share(&self, caches: usize) -> Limits {
        let caches = caches.max(1);
        let part = |total: usize| {
            if total == 0 {
                0
            } else {
                (total / caches).max(1)
            }
        };
        Limits {
            l0_entries: part(self.l0_max_entries),
            l0_bytes: part(self.l0_max_bytes),
            l1_bytes: part(self.l1_max_bytes),
        }
    }
}

static LIMITS: OnceLock<Limits> = OnceLock::new();
static COUNTERS: Counters = Counters::new();
/// The key of every prompt hash in this process.
static SEED: OnceLock<RandomState> = OnceLock::new();
static POOL: Mutex<Option<Cache>> = Mutex::new(None);

thread_local! {
    static LOCAL: RefCell<Option<Cache>> = const { RefCell::new(None) };
    static ON_POOL: Cell<bool> = const { Cell::new(false) };
}

/// Sets the bounds, before any prompt is encoded: `settings` split among one cache per
/// data-plane thread and the blocking pool's. Without it, each cache gets the defaults
/// whole (tests, benches).
pub fn configure(settings: &CacheSettings, data_plane_threads: usize) {
    let _ = LIMITS.set(settings.share(data_plane_threads + 1));
}

/// Every cache's lookups, evictions and reused bytes so far.
pub fn counts() -> Counts {
    COUNTERS.counts()
}

/// Runs `work` (on a blocking-pool thread) with the pool's shared cache.
pub fn on_pool<R>(work: impl FnOnce() -> R) -> R {
    /// Clears the mark when `work` is done, even by unwinding: the thread serves others.
    struct Unmark;
    impl Drop for Unmark {
        fn drop(&mut self) {
            ON_POOL.with(|on| on.set(false));
        }
    }
    ON_POOL.with(|on| on.set(true));
    let _unmark = Unmark;
    work()
}

/// `language`'s ids of `text`: exactly `encode_fast(text, add_special)`'s, from the calling
/// thread's cache where it can.
pub fn encode(language: &Language, text: &str, add_special: bool) -> tokenizers::Result<Vec<u32>> {
    let limits = *LIMITS.get_or_init(|| CacheSettings::default().share(1));
    let cuts = &language.boundaries;
    if ON_POOL.with(Cell::get) {
        encode_in(
            &Pool(limits),
            language.encoder.as_ref(),
            cuts,
            text,
            add_special,
        )
    } else {
        encode_in(
            &Local(limits),
            language.encoder.as_ref(),
            cuts,
            text,
            add_special,
        )
    }
}

/// Where a cache lives.
trait Home {
    /// Runs `f` on the cache; `None` when it cannot be had (then nothing is cached).
    fn with<R>(&self, f: impl FnOnce(&mut Cache) -> R) -> Option<R>;
    fn limits(&self) -> Limits;
}

/// The calling thread's own cache.
struct Local(Limits);

impl Home for Local {
    fn with<R>(&self, f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
        LOCAL
            .try_with(|slot| {
                let mut slot = slot.try_borrow_mut().ok()?;
                Some(f(slot.get_or_insert_with(|| Cache::new(self.0, &COUNTERS))))
            })
            .ok()
            .flatten()
    }

    fn limits(&self) -> Limits {
        self.0
    }
}

/// The blocking pool's shared cache.
struct Pool(Limits);

impl Home for Pool {
    fn with<R>(&self, f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
        let mut slot = POOL.lock().unwrap_or_else(PoisonError::into_inner);
        Some(f(slot.get_or_insert_with(|| Cache::new(self.0, &COUNTERS))))
    }

    fn limits(&self) -> Limits {
        self.0
    }
}

/// [`encode`] with the cache `home`.
fn encode_in(
    home: &impl Home,
    encoder: &impl Ids,
    cuts: &Boundaries,
    text: &str,
    add_special: bool,
) -> tokenizers::Result<Vec<u32>> {
    let limits = home.limits();
    let use_l1 = limits.l1() && !add_special && cuts.any();
    if !limits.l0() && !use_l1 {
        return plain(encoder, text, add_special);
    }
    let seed = SEED.get_or_init(RandomState::new);
    let tokenizer_id = cuts.id();
    let key = whole_key(seed, tokenizer_id, add_special, text);
    if limits.l0() {
        let found = home.with(|c| c.whole(key, tokenizer_id, add_special, text));
        if let Some(Some(ids)) = found {
            return Ok(ids);
        }
    }
    let mut places = Vec::new();
    let mut keys = Vec::new();
    let mut served = None;
    if use_l1 {
        cuts.places(text, &mut places);
        keys = prefix_keys(seed, tokenizer_id, text, &places);
        let ends: Vec<usize> = places.iter().map(|p| p.end).collect();
        let prefix = home
            .with(|c| c.prefix(tokenizer_id, text, &ends, &keys))
            .flatten();
        if let Some(prefix) = prefix {
            let end = prefix.end;
            let cut = places.iter().find(|p| p.end == end).map(|p| p.token);
            served = with_tail(encoder, cuts, cut, prefix, text)?.map(|ids| (ids, end));
        }
    }
    let (ids, reused) = match served {
        Some((ids, end)) => (ids, Some(end)),
        None => (plain(encoder, text, add_special)?, None),
    };
    let marks = if use_l1 {
        marks(cuts, &places, &keys, &ids)
    } else {
        Vec::new()
    };
    home.with(|c| {
        if use_l1 {
            match reused {
                Some(bytes) => c.counters().hit(Layer::L1, bytes),
                None => c.counters().miss(Layer::L1),
            }
            c.keep_marked(tokenizer_id, text, &ids, marks);
        }
        c.keep_whole(key, tokenizer_id, add_special, text, &ids);
    });
    Ok(ids)
}

fn plain(encoder: &impl Ids, text: &str, add_special: bool) -> tokenizers::Result<Vec<u32>> {
    encoder.ids(text, add_special)
}

/// `prefix`'s ids followed by those of the text after it: the text after the cut is
/// encoded behind the cut token (see [`boundaries`]), whose id must come out first.
/// `None` when it does not (then the prompt is encoded whole).
fn with_tail(
    encoder: &impl Ids,
    cuts: &Boundaries,
    cut: Option<usize>,
    prefix: Prefix,
    text: &str,
) -> tokenizers::Result<Option<Vec<u32>>> {
    let Some(token) = cut.and_then(|i| cuts.token(i)) else {
        return Ok(None);
    };
    let Some(tail) = text.get(prefix.end..) else {
        return Ok(None);
    };
    let mut ids = prefix.ids;
    if tail.is_empty() {
        return Ok(Some(ids));
    }
    let mut behind = String::with_capacity(token.content.len() + tail.len());
    behind.push_str(&token.content);
    behind.push_str(tail);
    let encoding = encoder.ids(&behind, false)?;
    match encoding.split_first() {
        Some((&first, rest)) if first == token.id => {
            ids.extend_from_slice(rest);
            Ok(Some(ids))
        }
        _ => Ok(None),
    }
}

/// The L0 key of `text`.
fn whole_key(seed: &RandomState, tokenizer: u64, add_special: bool, text: &str) -> u64 {
    let mut h = seed.build_hasher();
    h.write_u64(tokenizer);
    h.write_u8(u8::from(add_special));
    h.write(text.as_bytes());
    h.finish()
}

/// The L1 key of the prefix ending at each place: one pass over the text, the hasher's
/// state read at each place (SipHash streams, so the key of a prefix does not depend on
/// where the text was cut into writes).
fn prefix_keys(seed: &RandomState, tokenizer: u64, text: &str, places: &[Place]) -> Vec<u64> {
    let mut h: DefaultHasher = seed.build_hasher();
    h.write_u64(tokenizer);
    let bytes = text.as_bytes();
    let mut from = 0;
    places
        .iter()
        .map(|place| {
            h.write(bytes.get(from..place.end).unwrap_or_default());
            from = place.end;
            h.clone().finish()
        })
        .collect()
}

/// The marks of a prompt whose ids are `ids`: each place pairs with the next id of a cut
/// token, in order. Every place's token is taken out as itself and yields one id
/// ([`boundaries`]), so when the counts agree no id came from anywhere else and the pairing
/// is exact; when they do not (the model made a cut token's id out of other text), the
/// prompt gets no marks.
fn marks(cuts: &Boundaries, places: &[Place], keys: &[u64], ids: &[u32]) -> Vec<Mark> {
    let mut out = Vec::with_capacity(places.len());
    let mut next = places.iter().zip(keys);
    for (at, &id) in ids.iter().enumerate() {
        let Some(token) = cuts.of_id(id) else {
            continue;
        };
        match next.next() {
            Some((place, &key)) if place.token == token => out.push(Mark {
                end: place.end,
                count: at + 1,
                key,
            }),
            _ => return Vec::new(),
        }
    }
    if next.next().is_some() {
        return Vec::new();
    }
    out
}

#[cfg(test)]
mod tests;

//! Cache-tree scale benchmark (issue 4, "How it is checked"): fills a tree with N distinct
//! 2 KB prompts spread over 8 tenants, then reports insert and match latency (mean, p50,
//! p99, max), the tree's heap bytes, and the latency of a whole cache_aware selection
//! (match, decide, insert) at the same fill.
//!
//! Prompts look like chat traffic: one of 64 system prompts (~700 bytes, the 64 sharing
//! a first sentence), then a conversation-specific tail of words, so the tree has shared
//! upper levels and one long leaf per prompt. Prompts are generated from their index
//! into a reused buffer, so the only heap that grows during a fill is the tree's.
//!
//! Not criterion: criterion reports means, and the target is a p99. Each operation is
//! timed on its own with `Instant` (about 20 ns of overhead included), the samples
//! sorted, and percentiles read off. Heap bytes come from a counting wrapper around the
//! gateway's allocator (mimalloc), as live bytes requested, not including allocator
//! slack.
//!
//! Run: `cargo bench --bench cache_tree` (sizes 10k, 100k, 1M) or
//! `cargo bench --bench cache_tree -- 100000` for chosen sizes. Without `--bench` (as
//! `cargo test --benches` runs it) it does one small smoke pass.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mimalloc::MiMalloc;
use tollgate::config::PolicyName;
use tollgate::fleet::{Status, Worker};
use tollgate::routing::cache_tree::{CacheTree, TenantId};
use tollgate::routing::{build_with_params, PolicyParams, RequestFacts};

/// Counts live heap bytes on top of mimalloc.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to mimalloc; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        MiMalloc.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        MiMalloc.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        MiMalloc.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const PROMPT_BYTES: usize = 2048;
const TENANTS: u32 = 8;
const SYSTEM_PROMPTS: usize = 64;
const WORDS: [&str; 16] = [
    "alpha ",
    "bravo ",
    "charlie ",
    "delta ",
    "echo ",
    "foxtrot ",
    "golf ",
    "hotel ",
    "india ",
    "juliet ",
    "kilo ",
    "lima ",
    "mike ",
    "november ",
    "oscar ",
    "papa ",
];

/// A small deterministic generator (splitmix64), so prompt `i` is the same text in the
/// fill and in the lookups without storing it.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

struct Prompts {
    systems: Vec<String>,
}

impl Prompts {
    fn new() -> Prompts {
        let systems = (0..SYSTEM_PROMPTS)
            .map(|s| {
                let mut text = String::from("You are a helpful assistant deployed by Acme. ");
                text.push_str(&format!("Persona {s} rules: "));
                text.push_str(&"answer briefly, cite sources, stay polite. ".repeat(15));
                text
            })
            .collect();
        Prompts { systems }
    }

    /// Writes prompt `i` (exactly [`PROMPT_BYTES`] bytes) into `out`. `salt` makes a
    /// different conversation under the same system prompt.
    fn write(&self, i: u64, salt: u64, out: &mut String) {
        out.clear();
        let mut state = mix(i ^ salt.rotate_left(32));
        out.push_str(&self.systems[(state % SYSTEM_PROMPTS as u64) as usize]);
        out.push_str(&format!("User {i}/{salt}: "));
        while out.len() < PROMPT_BYTES {
            state = mix(state);
            out.push_str(WORDS[(state & 15) as usize]);
        }
        out.truncate(PROMPT_BYTES);
    }
}

/// Latency summary of one operation.
struct Summary {
    mean: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort_unstable();
    let n = samples.len().max(1);
    let at = |q: f64| {
        let i = ((n as f64 * q).ceil() as usize).clamp(1, n) - 1;
        samples.get(i).copied().unwrap_or_default()
    };
    let total: Duration = samples.iter().sum();
    Summary {
        mean: total / n as u32,
        p50: at(0.50),
        p99: at(0.99),
        max: samples.last().copied().unwrap_or_default(),
    }
}

fn print(label: &str, s: &Summary) {
    println!(
        "  {label:<34} mean {:>8.2?}  p50 {:>8.2?}  p99 {:>8.2?}  max {:>8.2?}",
        s.mean, s.p50, s.p99, s.max
    );
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The tree alone: fill, memory, exact-hit and partial-hit matches, further inserts,
/// then one eviction pass bounding each tenant to a quarter of what it holds.
fn tree_at(prompts: &Prompts, n: u64, lookups: u64) {
    let mut text = String::with_capacity(PROMPT_BYTES + 64);
    let before = LIVE.load(Ordering::Relaxed);
    let tree = CacheTree::new();
    let mut inserts = Vec::with_capacity(n as usize);
    for i in 0..n {
        prompts.write(i, 0, &mut text);
        let start = Instant::now();
        tree.insert(
            &text,
            TenantId((i % u64::from(TENANTS)) as u32),
            i,
            usize::MAX,
        );
        inserts.push(start.elapsed());
    }
    let heap = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    println!(
        "N = {n}: tree heap {:.1} MiB ({:.0} B per prefix; {:.1} MiB of distinct text stored)",
        mib(heap),
        heap as f64 / n as f64,
        mib(tree.stored_chars())
    );
    print("insert (filling)", &summarize(inserts));

    let mut hits = Vec::with_capacity(lookups as usize);
    let mut partial = Vec::with_capacity(lookups as usize);
    for k in 0..lookups {
        let i = mix(k) % n;
        prompts.write(i, 0, &mut text);
        let start = Instant::now();
        let found = tree.longest_match(&text, |_| true);
        hits.push(start.elapsed());
        assert_eq!(found.bytes, PROMPT_BYTES, "a stored prompt matches whole");
        prompts.write(i, 1 + k, &mut text);
        let start = Instant::now();
        black_box(tree.longest_match(&text, |t| t.0 % 2 == 0));
        partial.push(start.elapsed());
    }
    print("match, stored prompt", &summarize(hits));
    print("match, new conversation (half ok)", &summarize(partial));

    let mut more = Vec::with_capacity(lookups as usize);
    for k in 0..lookups {
        prompts.write(n + k, 0, &mut text);
        let start = Instant::now();
        tree.insert(
            &text,
            TenantId((k % u64::from(TENANTS)) as u32),
            n + k,
            usize::MAX,
        );
        more.push(start.elapsed());
    }
    print("insert, new prompt at this fill", &summarize(more));

    let grown = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    println!(
        "  after those inserts ({} prompts): heap {:.1} MiB",
        n + lookups,
        mib(grown)
    );
    let per_tenant = tree.stored_chars() / TENANTS as usize / 4;
    let start = Instant::now();
    let stats = tree.evict(per_tenant, |_| false);
    let took = start.elapsed();
    let after = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    println!(
        "  evict to {per_tenant} chars per tenant: pass {took:.2?}, heap {:.1} MiB, {} chars held",
        mib(after),
        stats.chars
    );
    drop(tree);
}

/// A whole cache_aware decision (match, choice, insert) on 8 ready workers, after
/// `n` decisions have filled its tree. The policy's own growth limit applies.
fn select_at(prompts: &Prompts, n: u64, lookups: u64) {
    let workers: Vec<Arc<Worker>> = (0..TENANTS)
        .filter_map(|w| Worker::for_url(&format!("http://10.1.0.{w}:8000")).ok())
        .map(|w| {
            w.set_status(Status::Ready);
            Arc::new(w)
        })
        .collect();
    let policy = build_with_params(PolicyName::CacheAware, &PolicyParams::default());
    let mut text = String::with_capacity(PROMPT_BYTES + 64);
    let decide = |text: &str| {
        let facts = RequestFacts {
            text: Some(text),
            body_len: text.len(),
            ..RequestFacts::default()
        };
        black_box(policy.decide(&workers, &facts));
    };
    for i in 0..n {
        prompts.write(i, 0, &mut text);
        decide(&text);
    }
    let mut repeat = Vec::with_capacity(lookups as usize);
    let mut fresh = Vec::with_capacity(lookups as usize);
    for k in 0..lookups {
        prompts.write(mix(k) % n, 0, &mut text);
        let start = Instant::now();
        decide(&text);
        repeat.push(start.elapsed());
        prompts.write(k, 1 + k, &mut text);
        let start = Instant::now();
        decide(&text);
        fresh.push(start.elapsed());
    }
    print("cache_aware select, repeat prompt", &summarize(repeat));
    print("cache_aware select, new prompt", &summarize(fresh));
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let benching = args.iter().any(|a| a == "--bench");
    let mut sizes: Vec<u64> = args.iter().filter_map(|a| a.parse().ok()).collect();
    if sizes.is_empty() {
        sizes = if benching {
            vec![10_000, 100_000, 1_000_000]
        } else {
            vec![1_000]
        };
    }
    let lookups = if benching { 100_000 } else { 1_000 };
    let prompts = Prompts::new();
    for n in sizes {
        tree_at(&prompts, n, lookups);
        select_at(&prompts, n, lookups);
    }
}

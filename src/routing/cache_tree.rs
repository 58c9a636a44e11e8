//! An approximate, multi-tenant radix tree over request text.
//!
//! It approximates which prefixes each worker (tenant) holds in its KV cache: every
//! selection inserts the request text for the chosen tenant, and a match finds the longest
//! prefix of a new request held by any acceptable tenant. Each node records the tenants
//! that hold the whole path from the root to the end of its edge, with a last-access time
//! per tenant for LRU trimming.
//!
//! Concurrency: each node has its own `RwLock` and no operation on the hot path holds more
//! than one node lock at a time, so threads only meet on the nodes they both touch, and
//! then mostly as readers (refreshing a last-access time is an atomic store under a read
//! lock). A split happens *in place*: the node keeps its identity and the upper part of
//! its edge, and a new child takes the lower part, its children and a copy of its tenants.
//! A reader that holds a node therefore always sees a consistent edge and children, and
//! parents never need rewriting on a split. The control thread (eviction, tenant removal)
//! takes a parent's lock before a child's, the only order in which two are ever held.
//!
//! The tree is approximate by design: a race between an insert and an eviction can lose a
//! mark or leave a stale one; the next insert or pass repairs it.
//!
//! Text is compared byte-wise and every cut is moved back to a character boundary, so an
//! edge never splits a UTF-8 character. All walks are iterative (and `Drop` too), so a deep
//! tree cannot overflow the stack.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// A tenant (worker) as the tree knows it: a small number handed out by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TenantId(pub u32);

/// One tenant's hold on a node.
#[derive(Debug)]
struct Mark {
    tenant: TenantId,
    /// Last insert through this node for this tenant (caller's clock).
    last: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// The text from the parent to this node; empty only at the root.
    edge: Box<str>,
    edge_chars: usize,
    /// Sorted by first character.
    children: Vec<(char, Arc<Node>)>,
    /// Sorted by tenant.
    tenants: Vec<Mark>,
}

impl State {
    fn child(&self, first: char) -> Option<&Arc<Node>> {
        self.children
            .binary_search_by_key(&first, |(c, _)| *c)
            .ok()
            .map(|i| &self.children[i].1)
    }

    fn mark(&self, tenant: TenantId) -> Option<&Mark> {
        self.tenants
            .binary_search_by_key(&tenant, |m| m.tenant)
            .ok()
            .map(|i| &self.tenants[i])
    }

    fn holds(&self, tenant: TenantId) -> bool {
        self.mark(tenant).is_some()
    }
}

#[derive(Debug, Default)]
struct Node {
    state: RwLock<State>,
}

impl Node {
    fn leaf(edge: &str, edge_chars: usize, tenant: TenantId, now: u64) -> Node {
        Node {
            state: RwLock::new(State {
                edge: edge.into(),
                edge_chars,
                children: Vec::new(),
                tenants: vec![Mark {
                    tenant,
                    last: AtomicU64::new(now),
                }],
            }),
        }
    }

    /// A panic elsewhere cannot leave a node half-updated in a way that matters (every
    /// update is a single push, remove or split of owned values), so poison is ignored.
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for Node {
    /// Tears a subtree down iteratively; the default recursive drop could overflow the
    /// stack on a deep chain of nodes.
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        let mut pending = std::mem::take(&mut state.children);
        while let Some((_, child)) = pending.pop() {
            if let Ok(mut node) = Arc::try_unwrap(child) {
                let state = node.state.get_mut().unwrap_or_else(PoisonError::into_inner);
                pending.append(&mut state.children);
            }
        }
    }
}

/// Length in bytes of the longest common prefix of `a` and `b` that ends on a character
/// boundary of both.
fn common_prefix(a: &str, b: &str) -> usize {
    let (x, y) = (a.as_bytes(), b.as_bytes());
    let limit = x.len().min(y.len());
    let mut n = 0;
    while n + 8 <= limit && x[n..n + 8] == y[n..n + 8] {
        n += 8;
    }
    while n < limit && x[n] == y[n] {
        n += 1;
    }
    while n > 0 && !(a.is_char_boundary(n) && b.is_char_boundary(n)) {
        n -= 1;
    }
    n
}

/// The best match of a text against the tree.
#[derive(Debug, Default)]
pub struct Match {
    /// Matched length in bytes (a character boundary of the text).
    pub bytes: usize,
    /// Matched length in characters.
    pub chars: usize,
    /// The deepest node reached that an acceptable tenant holds.
    holder: Option<Arc<Node>>,
}

impl Match {
    /// Calls `f` for each tenant that holds the matched prefix (acceptable or not; the
    /// caller filters again).
    pub fn for_each_tenant(&self, mut f: impl FnMut(TenantId)) {
        if let Some(node) = &self.holder {
            for mark in &node.read().tenants {
                f(mark.tenant);
            }
        }
    }
}

/// Figures about a tree, as of an eviction pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Characters held, summed across tenants (a prefix held by three counts thrice).
    pub chars: usize,
    /// Distinct characters stored in the tree.
    pub stored_chars: usize,
    /// Tenants holding at least one character.
    pub tenants: usize,
}

/// One node as seen by a control-thread walk.
struct Seen {
    node: Arc<Node>,
    /// Index of the parent in the walk; `None` for the root.
    parent: Option<usize>,
    edge_chars: usize,
    marks: Vec<(TenantId, u64)>,
}

/// The tree. See the module documentation for its concurrency rules.
#[derive(Debug, Default)]
pub struct CacheTree {
    root: Arc<Node>,
    stored_chars: AtomicUsize,
}

/// What one insert step leaves to do.
enum Step {
    Done,
    Descend(Arc<Node>),
}

/// What a read-locked look at a node found during an insert.
enum Look {
    /// The edge is covered; `rest` goes on into this child, past this many bytes.
    Child(usize, Arc<Node>),
    /// The edge is covered and the text ends here.
    End,
    /// A split or a new leaf is needed: redo under the write lock.
    Write,
}

impl CacheTree {
    pub fn new() -> CacheTree {
        CacheTree::default()
    }

    /// Distinct characters stored now.
    pub fn stored_chars(&self) -> usize {
        self.stored_chars.load(Ordering::Relaxed)
    }

    /// Records that `tenant` holds `text`, at time `now`. New nodes are only added while
    /// the tree stores fewer than `growth_limit` characters; past it the existing path is
    /// still refreshed, so memory stays bounded between eviction passes.
    pub fn insert(&self, text: &str, tenant: TenantId, now: u64, growth_limit: usize) {
        let mut rest = text;
        let mut step = self.insert_step(&self.root, &mut rest, tenant, now, growth_limit);
        while let Step::Descend(node) = step {
            step = self.insert_step(&node, &mut rest, tenant, now, growth_limit);
        }
    }

    /// One node of an insert. `rest` starts where `node`'s edge starts; the edge is
    /// compared and the child chosen under one lock hold, so a concurrent split of this
    /// node (which only shortens its edge) cannot make the two disagree.
    fn insert_step(
        &self,
        node: &Node,
        rest: &mut &str,
        tenant: TenantId,
        now: u64,
        growth_limit: usize,
    ) -> Step {
        let seen = {
            let state = node.read();
            let k = common_prefix(&state.edge, rest);
            let tail = rest.get(k..).unwrap_or_default();
            match tail.chars().next() {
                _ if k < state.edge.len() => Look::Write,
                None => Look::End,
                Some(first) => state
                    .child(first)
                    .map_or(Look::Write, |child| Look::Child(k, child.clone())),
            }
        };
        match seen {
            Look::End => {
                touch(node, tenant, now);
                Step::Done
            }
            Look::Child(k, child) => {
                touch(node, tenant, now);
                *rest = rest.get(k..).unwrap_or_default();
                Step::Descend(child)
            }
            Look::Write => self.insert_locked(&mut node.write(), rest, tenant, now, growth_limit),
        }
    }

    /// The slow path of an insert step, all under the node's write lock: split the edge
    /// where the text leaves it, mark, then descend or add the remaining text as a leaf.
    fn insert_locked(
        &self,
        state: &mut State,
        rest: &mut &str,
        tenant: TenantId,
        now: u64,
        growth_limit: usize,
    ) -> Step {
        let k = common_prefix(&state.edge, rest);
        if k < state.edge.len() {
            split(state, k);
            if k < state.edge.len() {
                return Step::Done;
            }
        }
        touch_locked(state, tenant, now);
        let tail = rest.get(k..).unwrap_or_default();
        let Some(first) = tail.chars().next() else {
            return Step::Done;
        };
        if let Some(child) = state.child(first) {
            *rest = tail;
            return Step::Descend(child.clone());
        }
        let chars = tail.chars().count();
        if self.stored_chars().saturating_add(chars) <= growth_limit {
            let at = state.children.partition_point(|(c, _)| *c < first);
            let leaf = Node::leaf(tail, chars, tenant, now);
            state.children.insert(at, (first, Arc::new(leaf)));
            self.stored_chars.fetch_add(chars, Ordering::Relaxed);
        }
        Step::Done
    }

    /// The longest prefix of `text` held by a tenant for which `acceptable` is true.
    ///
    /// Tenancy is prefix-closed (a tenant on a node is on all its ancestors), so the walk
    /// stops at the first node no acceptable tenant holds.
    pub fn longest_match(&self, text: &str, mut acceptable: impl FnMut(TenantId) -> bool) -> Match {
        let mut best = Match::default();
        let (mut bytes, mut chars) = (0usize, 0usize);
        let mut rest = text;
        let mut current: Option<Arc<Node>> = None;
        loop {
            let node: &Node = current.as_deref().unwrap_or(&self.root);
            let (next, held) = {
                let state = node.read();
                let mut held = false;
                let mut whole_edge = true;
                if current.is_some() {
                    let k = common_prefix(&state.edge, rest);
                    if k == 0 || !state.tenants.iter().any(|m| acceptable(m.tenant)) {
                        break;
                    }
                    whole_edge = k == state.edge.len();
                    let part = if whole_edge {
                        state.edge_chars
                    } else {
                        state.edge.get(..k).map_or(0, |s| s.chars().count())
                    };
                    bytes += k;
                    chars += part;
                    rest = rest.get(k..).unwrap_or_default();
                    held = true;
                }
                let next = match rest.chars().next() {
                    Some(first) if whole_edge => state.child(first).cloned(),
                    _ => None,
                };
                (next, held)
            };
            if held {
                best = Match {
                    bytes,
                    chars,
                    holder: current.take(),
                };
            }
            match next {
                Some(child) => current = Some(child),
                None => break,
            }
        }
        best
    }

    /// Removes every mark of `tenant` and the nodes left without tenants.
    pub fn remove_tenant(&self, tenant: TenantId) {
        self.strip(|t| t == tenant);
    }

    /// One eviction pass: drops the marks of tenants for which `retired` is true, then
    /// trims each tenant's least recently used leaves until it holds at most `max_chars`
    /// characters, and removes nodes left without tenants.
    pub fn evict(&self, max_chars: usize, retired: impl Fn(TenantId) -> bool) -> TreeStats {
        self.strip(retired);
        let seen = self.walk();
        let mut totals: HashMap<TenantId, usize> = HashMap::new();
        for entry in &seen {
            for &(tenant, _) in &entry.marks {
                *totals.entry(tenant).or_default() += entry.edge_chars;
            }
        }
        let mut trimmed = false;
        for (tenant, total) in totals.iter_mut() {
            if *total > max_chars {
                *total = trim_tenant(&seen, *tenant, *total, max_chars);
                trimmed = true;
            }
        }
        if trimmed {
            self.prune(&seen);
        }
        TreeStats {
            chars: totals.values().sum(),
            stored_chars: self.stored_chars(),
            tenants: totals.values().filter(|&&chars| chars > 0).count(),
        }
    }

    /// Drops the marks of tenants for which `gone` is true, then prunes.
    fn strip(&self, gone: impl Fn(TenantId) -> bool) {
        let seen = self.walk();
        for entry in &seen {
            if entry.marks.iter().any(|&(t, _)| gone(t)) {
                entry.node.write().tenants.retain(|m| !gone(m.tenant));
            }
        }
        self.prune(&seen);
    }

    /// Every node, parents before children (iterative, read locks one at a time).
    fn walk(&self) -> Vec<Seen> {
        let mut seen = Vec::new();
        let mut stack = vec![(self.root.clone(), None)];
        while let Some((node, parent)) = stack.pop() {
            let index = seen.len();
            let (edge_chars, marks) = {
                let state = node.read();
                stack.extend(
                    state
                        .children
                        .iter()
                        .map(|(_, child)| (child.clone(), Some(index))),
                );
                let marks = state
                    .tenants
                    .iter()
                    .map(|m| (m.tenant, m.last.load(Ordering::Relaxed)))
                    .collect();
                (state.edge_chars, marks)
            };
            seen.push(Seen {
                node,
                parent,
                edge_chars,
                marks,
            });
        }
        seen
    }

    /// Detaches nodes without tenants and children, deepest first, so a chain of emptied
    /// nodes goes in one pass.
    fn prune(&self, seen: &[Seen]) {
        for entry in seen.iter().rev() {
            let Some(parent) = entry.parent.and_then(|p| seen.get(p)) else {
                continue;
            };
            let mut parent_state = parent.node.write();
            let removable = {
                let state = entry.node.read();
                state.tenants.is_empty() && state.children.is_empty()
            };
            if !removable {
                continue;
            }
            if let Some(at) = parent_state
                .children
                .iter()
                .position(|(_, child)| Arc::ptr_eq(child, &entry.node))
            {
                parent_state.children.remove(at);
                let chars = entry.node.read().edge_chars;
                self.stored_chars.fetch_sub(chars, Ordering::Relaxed);
            }
        }
    }
}

/// Refreshes or adds `tenant`'s mark on `node`. The common case (already marked) needs
/// only a read lock and, at most once per clock tick, an atomic store.
fn touch(node: &Node, tenant: TenantId, now: u64) {
    {
        let state = node.read();
        if let Some(mark) = state.mark(tenant) {
            if mark.last.load(Ordering::Relaxed) < now {
                mark.last.fetch_max(now, Ordering::Relaxed);
            }
            return;
        }
    }
    touch_locked(&mut node.write(), tenant, now);
}

fn touch_locked(state: &mut State, tenant: TenantId, now: u64) {
    match state.tenants.binary_search_by_key(&tenant, |m| m.tenant) {
        Ok(at) => {
            state.tenants[at].last.fetch_max(now, Ordering::Relaxed);
        }
        Err(at) => state.tenants.insert(
            at,
            Mark {
                tenant,
                last: AtomicU64::new(now),
            },
        ),
    }
}

/// Splits a node's edge at byte `k` in place: the node keeps `edge[..k]`, a new child takes
/// the rest with the node's children and a copy of its tenants (who hold the whole edge).
fn split(state: &mut State, k: usize) {
    let (Some(upper), Some(lower)) = (state.edge.get(..k), state.edge.get(k..)) else {
        return;
    };
    let Some(first) = lower.chars().next() else {
        return;
    };
    if upper.is_empty() {
        return;
    }
    let upper_chars = upper.chars().count();
    let tenants = state
        .tenants
        .iter()
        .map(|m| Mark {
            tenant: m.tenant,
            last: AtomicU64::new(m.last.load(Ordering::Relaxed)),
        })
        .collect();
    let lower = Node {
        state: RwLock::new(State {
            edge: lower.into(),
            edge_chars: state.edge_chars - upper_chars,
            children: std::mem::take(&mut state.children),
            tenants,
        }),
    };
    state.edge = upper.into();
    state.edge_chars = upper_chars;
    state.children = vec![(first, Arc::new(lower))];
}

/// Removes `tenant`'s least recently used leaves (nodes it holds where none of the
/// children does) until it holds at most `max_chars`; returns what it holds after.
fn trim_tenant(seen: &[Seen], tenant: TenantId, mut total: usize, max_chars: usize) -> usize {
    let last_of = |i: usize| {
        seen[i]
            .marks
            .iter()
            .find(|(t, _)| *t == tenant)
            .map(|&(_, last)| last)
    };
    // Children (in the walk) holding the tenant, per node.
    let mut holding_children = vec![0usize; seen.len()];
    for entry in seen {
        if let Some(parent) = entry.parent {
            if entry.marks.iter().any(|(t, _)| *t == tenant) {
                holding_children[parent] += 1;
            }
        }
    }
    let mut leaves: BinaryHeap<Reverse<(u64, usize)>> = (0..seen.len())
        .filter(|&i| holding_children[i] == 0)
        .filter_map(|i| last_of(i).map(|last| Reverse((last, i))))
        .collect();
    while total > max_chars {
        let Some(Reverse((_, i))) = leaves.pop() else {
            break;
        };
        if !unmark_leaf(&seen[i].node, tenant) {
            continue;
        }
        total = total.saturating_sub(seen[i].edge_chars);
        if let Some(parent) = seen[i].parent {
            holding_children[parent] = holding_children[parent].saturating_sub(1);
            if holding_children[parent] == 0 {
                if let Some(last) = last_of(parent) {
                    leaves.push(Reverse((last, parent)));
                }
            }
        }
    }
    total
}

/// Removes `tenant` from `node` unless a child holds it now (an insert raced the pass).
fn unmark_leaf(node: &Node, tenant: TenantId) -> bool {
    let mut state = node.write();
    if state.children.iter().any(|(_, c)| c.read().holds(tenant)) {
        return false;
    }
    match state.tenants.binary_search_by_key(&tenant, |m| m.tenant) {
        Ok(at) => {
            state.tenants.remove(at);
            true
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: TenantId = TenantId(0);
    const B: TenantId = TenantId(1);
    const NO_LIMIT: usize = usize::MAX;

    fn only(t: TenantId) -> impl FnMut(TenantId) -> bool {
        move |x| x == t
    }

    fn tenants_of(m: &Match) -> Vec<TenantId> {
        let mut out = Vec::new();
        m.for_each_tenant(|t| out.push(t));
        out
    }

    #[test]
    fn matches_the_longest_prefix_per_tenant() {
        let tree = CacheTree::new();
        tree.insert("hello world", A, 1, NO_LIMIT);
        tree.insert("hello there", B, 2, NO_LIMIT);
        let m = tree.longest_match("hello world!", |_| true);
        assert_eq!((m.bytes, m.chars), (11, 11));
        assert_eq!(tenants_of(&m), [A]);
        let m = tree.longest_match("hello world", only(B));
        assert_eq!(m.chars, 6, "B holds only `hello `");
        assert_eq!(tenants_of(&m), [A, B]);
        let m = tree.longest_match("goodbye", |_| true);
        assert_eq!(m.chars, 0);
        assert!(tenants_of(&m).is_empty());
        assert_eq!(tree.stored_chars(), "hello world".len() + "there".len());
    }

    #[test]
    fn a_prefix_of_an_edge_matches_partially() {
        let tree = CacheTree::new();
        tree.insert("abcdef", A, 1, NO_LIMIT);
        assert_eq!(tree.longest_match("abcxyz", |_| true).chars, 3);
        tree.insert("abc", B, 1, NO_LIMIT);
        assert_eq!(tree.longest_match("abcdef", only(B)).chars, 3);
        assert_eq!(tree.longest_match("abcdef", only(A)).chars, 6);
        assert_eq!(tree.stored_chars(), 6, "a split stores nothing new");
    }

    #[test]
    fn multi_byte_and_emoji_prefixes_split_on_character_boundaries() {
        let tree = CacheTree::new();
        // "é" (C3 A9) and "ê" (C3 AA) share their first byte; 🦀 and 🦊 share three.
        tree.insert("café🦀", A, 1, NO_LIMIT);
        tree.insert("cafê🦊", B, 1, NO_LIMIT);
        tree.insert("café🦊", B, 1, NO_LIMIT);
        let m = tree.longest_match("café🦀🦀", |_| true);
        assert_eq!((m.bytes, m.chars), ("café🦀".len(), 5));
        let m = tree.longest_match("cafê", only(A));
        assert_eq!((m.bytes, m.chars), (3, 3));
        let m = tree.longest_match("café🦐", only(B));
        assert_eq!((m.bytes, m.chars), ("café".len(), 4));
        let m = tree.longest_match("日本語のテキスト", |_| true);
        assert_eq!(m.bytes, 0);
        tree.insert("日本語のテキスト", A, 2, NO_LIMIT);
        let m = tree.longest_match("日本語の文章", only(A));
        assert_eq!((m.bytes, m.chars), ("日本語の".len(), 4));
    }

    #[test]
    fn growth_stops_at_the_limit_but_paths_refresh() {
        let tree = CacheTree::new();
        tree.insert("0123456789", A, 1, 12);
        tree.insert("abcdef", A, 1, 12);
        assert_eq!(tree.stored_chars(), 10);
        assert_eq!(tree.longest_match("abcdef", |_| true).chars, 0);
        tree.insert("0123456789", B, 2, 12);
        assert_eq!(tree.longest_match("0123456789", only(B)).chars, 10);
    }

    #[test]
    fn eviction_trims_least_recently_used_leaves_per_tenant() {
        let tree = CacheTree::new();
        tree.insert("shared prefix/old", A, 1, NO_LIMIT);
        tree.insert("shared prefix/new", A, 5, NO_LIMIT);
        tree.insert("shared prefix/new", B, 5, NO_LIMIT);
        // A holds 14 + 3 + 3 = 20 chars, B 17.
        let stats = tree.evict(17, |_| false);
        assert_eq!(
            stats,
            TreeStats {
                chars: 34,
                stored_chars: 17,
                tenants: 2
            }
        );
        assert_eq!(tree.longest_match("shared prefix/old", only(A)).chars, 14);
        assert_eq!(tree.longest_match("shared prefix/new", only(A)).chars, 17);
        // Down to nothing: every node goes.
        let stats = tree.evict(0, |_| false);
        assert_eq!((stats.chars, stats.stored_chars, stats.tenants), (0, 0, 0));
        assert_eq!(tree.longest_match("shared", |_| true).chars, 0);
    }

    #[test]
    fn removing_a_tenant_frees_what_only_it_held() {
        let tree = CacheTree::new();
        tree.insert("common/a-only", A, 1, NO_LIMIT);
        tree.insert("common/b-only", B, 1, NO_LIMIT);
        tree.remove_tenant(A);
        assert_eq!(tree.longest_match("common/a-only", |_| true).chars, 7);
        assert_eq!(tree.stored_chars(), "common/b-only".len());
        let stats = tree.evict(usize::MAX, |t| t == B);
        assert_eq!(stats, TreeStats::default());
    }

    #[test]
    fn deep_trees_neither_recurse_nor_overflow() {
        let tree = CacheTree::new();
        let text: String = "ab".repeat(20_000);
        // Each longer prefix splits the chain one node deeper.
        for end in (1..text.len()).step_by(7) {
            tree.insert(&text[..end], A, end as u64, NO_LIMIT);
        }
        assert_eq!(tree.longest_match(&text, |_| true).bytes, text.len() - 1);
        let stats = tree.evict(100, |_| false);
        assert!(stats.chars <= 100, "{stats:?}");
        drop(tree);
    }

    /// The fuzz target's invariants over a seeded random mix of operations on texts of
    /// one-, two-, three- and four-byte characters.
    #[test]
    fn random_operations_keep_the_invariants() {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let alphabet = ['a', 'b', 'é', 'ß', '日', '本', '🦀', '🦊'];
        let tree = CacheTree::new();
        for clock in 0..5000u64 {
            let len = next(24) as usize;
            let text: String = (0..len).map(|_| alphabet[next(8) as usize]).collect();
            let tenant = TenantId(next(6) as u32);
            match next(10) {
                0..=4 => {
                    tree.insert(&text, tenant, clock, NO_LIMIT);
                    assert_eq!(tree.longest_match(&text, only(tenant)).bytes, text.len());
                }
                5 | 6 => {
                    let m = tree.longest_match(&text, |t| t.0 % 2 == tenant.0 % 2);
                    assert!(m.bytes <= text.len() && text.is_char_boundary(m.bytes));
                    assert_eq!(m.chars, text[..m.bytes].chars().count());
                }
                7 | 8 => {
                    let max = next(200) as usize;
                    let stats = tree.evict(max, |t| t.0 == 5);
                    assert!(stats.chars <= max * stats.tenants, "{stats:?} over {max}");
                    assert!(stats.stored_chars <= stats.chars, "{stats:?}");
                }
                _ => {
                    tree.remove_tenant(tenant);
                    assert_eq!(tree.longest_match(&text, only(tenant)).bytes, 0);
                }
            }
        }
    }

    #[test]
    fn concurrent_inserts_and_matches_stay_consistent() {
        let tree = CacheTree::new();
        let prefixes: Vec<String> = (0..4).map(|p| format!("system {p} 🦀 ")).collect();
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (tree, prefixes) = (&tree, &prefixes);
                s.spawn(move || {
                    for i in 0..500u64 {
                        let text = format!("{}question {} from {t}", prefixes[i as usize % 4], i);
                        tree.insert(&text, TenantId(t), i, NO_LIMIT);
                        let m = tree.longest_match(&text, only(TenantId(t)));
                        assert_eq!(m.bytes, text.len(), "own insert is visible");
                        assert!(text.is_char_boundary(m.bytes));
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..20 {
                    tree.evict(usize::MAX, |_| false);
                }
            });
        });
        for t in 0..4u32 {
            for i in 0..500u64 {
                let text = format!("{}question {} from {t}", prefixes[i as usize % 4], i);
                assert_eq!(
                    tree.longest_match(&text, only(TenantId(t))).bytes,
                    text.len()
                );
            }
        }
        let stats = tree.evict(usize::MAX, |_| false);
        assert_eq!(stats.tenants, 4);
        assert!(stats.chars >= stats.stored_chars);
    }
}

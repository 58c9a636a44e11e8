//! Arbitrary operations on the cache-aware radix tree: insert, match, evict and tenant
//! removal over arbitrary (lossily decoded) text. Checks: no panic; a match never exceeds
//! the text and ends on a character boundary, with a character count that agrees; what a
//! tenant just inserted matches whole; an eviction pass leaves every tenant within its
//! bound and stores no character nobody holds; a removed tenant matches nothing.
//!
//! Input layout: a sequence of operations `<op> <tenant> <len> <len bytes of text>`;
//! `op % 5` picks insert, insert under a small growth limit, match, evict (bound = the
//! length byte × 4) or remove; tenants are `tenant % 8`.

use tollgate::routing::cache_tree::{CacheTree, TenantId};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let tree = CacheTree::new();
    let mut rest = data;
    let mut clock = 0u64;
    while let [op, tenant, len, tail @ ..] = rest {
        let take = (*len as usize).min(tail.len());
        let (bytes, next) = tail.split_at(take);
        rest = next;
        clock += 1;
        let text = String::from_utf8_lossy(bytes);
        let tenant = TenantId(u32::from(*tenant % 8));
        match op % 5 {
            0 => {
                tree.insert(&text, tenant, clock, usize::MAX);
                let found = tree.longest_match(&text, |t| t == tenant);
                assert_eq!(found.bytes, text.len(), "own insert matches whole");
            }
            1 => tree.insert(&text, tenant, clock, 64),
            2 => {
                let found = tree.longest_match(&text, |t| t.0 % 2 == tenant.0 % 2);
                assert!(found.bytes <= text.len());
                assert!(text.is_char_boundary(found.bytes));
                assert_eq!(found.chars, text[..found.bytes].chars().count());
                found.for_each_tenant(|_| {});
            }
            3 => {
                let max = usize::from(*len) * 4;
                let stats = tree.evict(max, |t| t.0 == 7);
                assert!(stats.chars <= max * stats.tenants, "{stats:?} over {max}");
                assert!(stats.stored_chars <= stats.chars, "{stats:?}");
            }
            _ => {
                tree.remove_tenant(tenant);
                assert_eq!(tree.longest_match(&text, |t| t == tenant).bytes, 0);
            }
        }
    }
}

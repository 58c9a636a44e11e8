//! The Conversations API's body and query checks (`conversations::items`, `::metadata`,
//! `::page`) on arbitrary bytes. Checks: no panic; what passes keeps the rules: at most 20
//! items, each with a well-formed id and a type spec 2 stores (a message with a role and a
//! content array), references with a well-formed id; metadata an object of at most 16
//! strings (a patch: strings and nulls); a list query's `limit` from 1 to 100 and a
//! well-formed `after`.
//!
//! Input layout: the first byte picks the check (0 initial items, 1 added items, 2 new
//! metadata, 3 metadata patch, 4 list query, modulo 5); the rest is the body (or query).

use serde_json::Value;
use tollgate::conversations::items::{self, Entry, Support};
use tollgate::conversations::{ids, metadata, page};

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    match pick % 5 {
        0 | 1 => {
            let Ok(Value::Array(list)) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let required = pick % 5 == 1;
            let sent = list.len();
            if let Ok(entries) = items::check(list, required) {
                assert!(entries.len() <= 20 && entries.len() == sent);
                assert!(!required || !entries.is_empty());
                for entry in entries {
                    assert!(ids::is_well_formed(entry.id()));
                    if let Entry::New { id, item, .. } = entry {
                        assert_eq!(item["id"], Value::from(id));
                        let kind = item["type"].as_str().expect("a string type");
                        let support = items::support(kind).expect("a stored type");
                        assert_ne!(support, Support::Reference);
                        if kind == "message" {
                            assert!(item["role"].is_string());
                            assert!(item["content"].is_array());
                        }
                    }
                }
            }
        }
        2 | 3 => {
            let Ok(value) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let patch = pick % 5 == 3;
            let checked = if patch {
                metadata::check_patch(value)
            } else {
                metadata::check_new(Some(value))
            };
            if let Ok(text) = checked {
                let back: serde_json::Map<String, Value> =
                    serde_json::from_str(&text).expect("metadata is an object");
                let set = back.values().filter(|v| v.is_string()).count();
                assert!(set <= 16);
                assert!(back
                    .values()
                    .all(|v| v.is_string() || (patch && v.is_null())));
            }
        }
        _ => {
            let Ok(query) = std::str::from_utf8(rest) else {
                return;
            };
            if let Ok(q) = page::parse_query(Some(query)) {
                assert!((1..=100).contains(&q.limit));
                if let Some(after) = q.after {
                    assert!(ids::is_well_formed(&after));
                }
            }
        }
    }
}

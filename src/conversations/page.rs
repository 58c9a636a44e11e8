//! Listing a conversation's items: the query (`limit` 1 to 100, default 100 as spec 2
//! says; `order` `asc` or `desc`, default `desc`; `after`, an item id) and the list object
//! `{object: "list", data, first_id, last_id, has_more}`.
//!
//! `has_more` is true when the page holds `limit` items, literally as spec 2 puts it (a
//! page that ends exactly at the last item says so too; the next page is then empty).

use serde::Serialize;
use serde_json::value::RawValue;

use super::ids;
use crate::history::{ItemRecord, ItemsQuery, Order};

/// Default and largest `limit`.
pub const DEFAULT_LIMIT: usize = 100;
pub const MAX_LIMIT: usize = 100;

/// The list query of `GET …/items`; the error is the message of the 400. Parameters other
/// than `limit`, `order` and `after` (OpenAI's `include`) are accepted and ignored; a
/// parameter given twice takes its last value.
pub fn parse_query(query: Option<&str>) -> Result<ItemsQuery, String> {
    let mut out = ItemsQuery {
        limit: DEFAULT_LIMIT,
        order: Order::Desc,
        after: None,
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "limit" => {
                out.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LIMIT).contains(n))
                    .ok_or_else(|| {
                        format!("Invalid 'limit': an integer from 1 to {MAX_LIMIT} is expected")
                    })?;
            }
            "order" => {
                out.order = match value {
                    "asc" => Order::Asc,
                    "desc" => Order::Desc,
                    _ => return Err("Invalid 'order': 'asc' or 'desc' is expected".into()),
                };
            }
            "after" if value.is_empty() => out.after = None,
            "after" => {
                ids::check_item(value, "'after'")?;
                out.after = Some(value.to_owned());
            }
            _ => {}
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct List<'a> {
    object: &'static str,
    data: Vec<&'a RawValue>,
    first_id: Option<&'a str>,
    last_id: Option<&'a str>,
    has_more: bool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// The list object of `items` (stored JSON objects) with `has_more` as given and, when
/// there are any, the `warnings` of the items just added. The error names a stored item
/// that is not JSON.
pub fn render(
    items: &[ItemRecord],
    has_more: bool,
    warnings: &[String],
) -> Result<Vec<u8>, String> {
    let data = items
        .iter()
        .map(|item| raw(&item.item, &item.id))
        .collect::<Result<Vec<_>, _>>()?;
    let list = List {
        object: "list",
        data,
        first_id: items.first().map(|item| item.id.as_str()),
        last_id: items.last().map(|item| item.id.as_str()),
        has_more,
        warnings,
    };
    serde_json::to_vec(&list).map_err(|err| format!("the item list could not be written: {err}"))
}

/// A stored item's JSON, checked to be JSON.
pub fn raw<'a>(json: &'a str, id: &str) -> Result<&'a RawValue, String> {
    serde_json::from_str(json).map_err(|_| format!("the stored item {id} is unreadable"))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    #[test]
    fn defaults_are_limit_100_and_desc() {
        let q = parse_query(None).unwrap();
        assert_eq!(
            q,
            ItemsQuery {
                limit: 100,
                order: Order::Desc,
                after: None
            }
        );
        assert_eq!(parse_query(Some("")).unwrap(), q);
        assert_eq!(parse_query(Some("include=x&after=")).unwrap(), q);
    }

    #[test]
    fn limit_order_and_after_are_read() {
        let q = parse_query(Some("limit=2&order=asc&after=msg_1")).unwrap();
        assert_eq!(q.limit, 2);
        assert_eq!(q.order, Order::Asc);
        assert_eq!(q.after.as_deref(), Some("msg_1"));
        assert_eq!(parse_query(Some("limit=100")).unwrap().limit, 100);
        assert_eq!(parse_query(Some("limit=1")).unwrap().limit, 1);
        assert_eq!(
            parse_query(Some("order=desc&order=asc")).unwrap().order,
            Order::Asc
        );
    }

    #[test]
    fn bad_values_are_refused() {
        for query in [
            "limit=0",
            "limit=101",
            "limit=-1",
            "limit=abc",
            "limit=",
            "limit=1.5",
            "order=up",
            "order=",
            "after=a%2Fb",
            "after=a/b",
        ] {
            assert!(parse_query(Some(query)).is_err(), "{query}");
        }
    }

    fn record(id: &str) -> ItemRecord {
        ItemRecord {
            id: id.into(),
            created_at: 1,
            item: json!({"id": id, "type": "message"}).to_string(),
        }
    }

    #[test]
    fn lists_name_their_ends_and_warnings_only_when_there_are_some() {
        let page = render(&[record("a"), record("b")], true, &[]).unwrap();
        let page: Value = serde_json::from_slice(&page).unwrap();
        assert_eq!(
            page,
            json!({"object": "list", "data": [{"id": "a", "type": "message"},
                {"id": "b", "type": "message"}], "first_id": "a", "last_id": "b",
                "has_more": true})
        );
        let empty: Value = serde_json::from_slice(&render(&[], false, &[]).unwrap()).unwrap();
        assert_eq!(
            empty,
            json!({"object": "list", "data": [], "first_id": null, "last_id": null,
                "has_more": false})
        );
        let warned = render(&[record("a")], false, &["w".into()]).unwrap();
        let warned: Value = serde_json::from_slice(&warned).unwrap();
        assert_eq!(warned["warnings"], json!(["w"]));
    }

    #[test]
    fn a_corrupt_item_is_an_error() {
        let mut bad = record("a");
        bad.item = "{".into();
        assert!(render(&[bad], false, &[]).is_err());
    }
}

//! The items a client adds to a conversation (`POST …/items`, the `items` of
//! `POST /v1/conversations`): how many, which types, what a message needs, and the shape an
//! item is stored in.
//!
//! Spec 2 sorts item types in three: fully supported (`message`, `reasoning`,
//! `mcp_list_tools`, `mcp_call`, `item_reference`), stored with a `warnings` entry in the
//! answer (the tool calls and outputs a response of this gateway does not replay yet), and
//! every other type, refused with 400. An item without `type` is a message. A message
//! needs a `role` and a `content`; a string content is stored as one text part, the way
//! OpenAI stores it (`input_text`, or `output_text` for the assistant). An item without an
//! id gets one with its type's prefix (`history::new_item_id`).

use serde_json::{Map, Value};

use super::ids;
use crate::history::MAX_ITEMS_PER_CREATE;

/// Types stored and read back in full.
const FULLY_SUPPORTED: [&str; 4] = ["message", "reasoning", "mcp_list_tools", "mcp_call"];

/// Types stored as given, with a `warnings` entry in the answer.
const STORED_WITH_WARNING: [&str; 14] = [
    "function_call",
    "function_call_output",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "web_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_approval_request",
    "mcp_approval_response",
    "custom_tool_call",
    "custom_tool_call_output",
];

/// The reference type: an item of another conversation of the same owner, by id.
pub const ITEM_REFERENCE: &str = "item_reference";

/// Roles a message may have.
const ROLES: [&str; 4] = ["user", "assistant", "system", "developer"];

/// How far an item type is supported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Support {
    Full,
    /// Stored, with a warning in the answer.
    Warned,
    /// `item_reference`: resolved to the item it names.
    Reference,
}

/// What spec 2 says of an item type; `None` for a type it refuses.
pub fn support(kind: &str) -> Option<Support> {
    if kind == ITEM_REFERENCE {
        Some(Support::Reference)
    } else if FULLY_SUPPORTED.contains(&kind) {
        Some(Support::Full)
    } else if STORED_WITH_WARNING.contains(&kind) {
        Some(Support::Warned)
    } else {
        None
    }
}

/// One checked item of a request.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    /// An item to store: its JSON object with `id` and `type` set (`created_at` is added
    /// when it is stored).
    New {
        id: String,
        item: Map<String, Value>,
        /// The `warnings` entry of a type not fully supported.
        warning: Option<String>,
    },
    /// An `item_reference`: the stored item of this id is added.
    Reference { id: String },
}

impl Entry {
    /// The id the entry adds to the conversation.
    pub fn id(&self) -> &str {
        match self {
            Entry::New { id, .. } | Entry::Reference { id } => id,
        }
    }
}

/// Checks a request's items (`items` as parsed) and shapes each for storage. The error is
/// the message of the 400. `required` says whether an empty list is refused (it is for
/// `POST …/items`, not for the optional initial items of a new conversation).
pub fn check(items: Vec<Value>, required: bool) -> Result<Vec<Entry>, String> {
    if items.len() > MAX_ITEMS_PER_CREATE {
        return Err(format!(
            "Too many items: at most {MAX_ITEMS_PER_CREATE} can be added at a time, {} were sent",
            items.len()
        ));
    }
    if required && items.is_empty() {
        return Err("'items' must hold at least one item".into());
    }
    items
        .into_iter()
        .enumerate()
        .map(|(index, item)| check_one(index, item))
        .collect()
}

/// One item, the `index`-th of its request.
fn check_one(index: usize, item: Value) -> Result<Entry, String> {
    let Value::Object(mut item) = item else {
        return Err(format!("items[{index}] must be an object"));
    };
    let kind = match item.get("type") {
        None | Some(Value::Null) => "message".to_owned(),
        Some(Value::String(kind)) => kind.clone(),
        Some(_) => return Err(format!("items[{index}].type must be a string")),
    };
    let Some(support) = support(&kind) else {
        return Err(format!(
            "items[{index}]: unsupported item type '{}'",
            clip(&kind)
        ));
    };
    let id = match item.get("id") {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) => {
            ids::check_item(id, &format!("items[{index}].id"))?;
            Some(id.clone())
        }
        Some(_) => return Err(format!("items[{index}].id must be a string")),
    };
    if support == Support::Reference {
        let id = id.ok_or_else(|| format!("items[{index}]: an item_reference needs an 'id'"))?;
        return Ok(Entry::Reference { id });
    }
    if kind == "message" {
        check_message(index, &mut item)?;
    }
    let id = id.unwrap_or_else(|| crate::history::new_item_id(&kind));
    item.insert("id".into(), Value::String(id.clone()));
    item.insert("type".into(), Value::String(kind.clone()));
    let warning = (support == Support::Warned)
        .then(|| format!("items[{index}]: item type '{kind}' is stored but not fully supported"));
    Ok(Entry::New { id, item, warning })
}

/// A message: a known role, a content of text or parts (a string becomes one text part),
/// `status` `completed` unless given.
fn check_message(index: usize, item: &mut Map<String, Value>) -> Result<(), String> {
    let role = match item.get("role") {
        Some(Value::String(role)) if ROLES.contains(&role.as_str()) => role.clone(),
        Some(Value::String(role)) => {
            return Err(format!(
                "items[{index}].role '{}' is not one of user, assistant, system, developer",
                clip(role)
            ))
        }
        Some(_) => return Err(format!("items[{index}].role must be a string")),
        None => return Err(format!("items[{index}]: a message needs a 'role'")),
    };
    let content = match item.remove("content") {
        Some(Value::String(text)) => {
            let part = if role == "assistant" {
                serde_json::json!({"type": "output_text", "text": text, "annotations": []})
            } else {
                serde_json::json!({"type": "input_text", "text": text})
            };
            Value::Array(vec![part])
        }
        Some(Value::Array(parts)) => {
            for (n, part) in parts.iter().enumerate() {
                if !matches!(part.get("type"), Some(Value::String(_))) {
                    return Err(format!(
                        "items[{index}].content[{n}] must be an object with a string 'type'"
                    ));
                }
            }
            Value::Array(parts)
        }
        Some(_) => {
            return Err(format!(
                "items[{index}].content must be a string or an array of content parts"
            ))
        }
        None => return Err(format!("items[{index}]: a message needs a 'content'")),
    };
    item.insert("content".into(), content);
    match item.get("status") {
        None | Some(Value::Null) => {
            item.insert("status".into(), Value::String("completed".into()));
        }
        Some(Value::String(_)) => {}
        Some(_) => return Err(format!("items[{index}].status must be a string")),
    }
    Ok(())
}

/// A client string in a message, cut to a readable length.
fn clip(text: &str) -> String {
    const MAX: usize = 64;
    match text.char_indices().nth(MAX) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn one(item: Value) -> Result<Entry, String> {
        check(vec![item], true).map(|mut entries| entries.remove(0))
    }

    fn new_item(entry: Entry) -> (String, Value, Option<String>) {
        match entry {
            Entry::New { id, item, warning } => (id, Value::Object(item), warning),
            Entry::Reference { .. } => panic!("not a new item"),
        }
    }

    #[test]
    fn at_most_twenty_items_and_at_least_one_when_required() {
        let msg = json!({"role": "user", "content": "hi"});
        assert!(check(vec![msg.clone(); 20], true).is_ok());
        let err = check(vec![msg; 21], true).unwrap_err();
        assert!(err.contains("at most 20"), "{err}");
        assert!(check(vec![], true).is_err());
        assert_eq!(check(vec![], false), Ok(vec![]));
    }

    #[test]
    fn an_item_without_type_is_a_message_with_a_text_part() {
        let (id, item, warning) = new_item(one(json!({"role": "user", "content": "hi"})).unwrap());
        assert!(id.starts_with("msg_"));
        assert_eq!(warning, None);
        assert_eq!(
            item,
            json!({"role": "user", "content": [{"type": "input_text", "text": "hi"}],
                "status": "completed", "id": id, "type": "message"})
        );
        let (_, item, _) = new_item(
            one(json!({"type": "message", "role": "assistant", "content": "ok"})).unwrap(),
        );
        assert_eq!(
            item["content"],
            json!([{"type": "output_text", "text": "ok", "annotations": []}])
        );
    }

    #[test]
    fn a_message_needs_a_role_and_a_content() {
        assert!(one(json!({"content": "hi"})).unwrap_err().contains("role"));
        assert!(one(json!({"role": "robot", "content": "hi"})).is_err());
        assert!(one(json!({"role": 1, "content": "hi"})).is_err());
        assert!(one(json!({"role": "user"}))
            .unwrap_err()
            .contains("content"));
        assert!(one(json!({"role": "user", "content": 5})).is_err());
        assert!(one(json!({"role": "user", "content": [{"text": "x"}]})).is_err());
        let parts = json!([{"type": "input_text", "text": "x"}]);
        let (_, item, _) = new_item(one(json!({"role": "user", "content": parts})).unwrap());
        assert_eq!(item["content"], parts);
    }

    #[test]
    fn types_are_full_warned_or_refused() {
        let (id, _, warning) = new_item(one(json!({"type": "reasoning", "summary": []})).unwrap());
        assert!(id.starts_with("rs_"));
        assert_eq!(warning, None);
        let (id, item, warning) = new_item(
            one(json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}))
                .unwrap(),
        );
        assert!(id.starts_with("fc_"));
        assert_eq!(item["name"], "f");
        assert!(warning.unwrap().contains("function_call"));
        for kind in STORED_WITH_WARNING {
            assert_eq!(support(kind), Some(Support::Warned));
        }
        for kind in FULLY_SUPPORTED {
            assert_eq!(support(kind), Some(Support::Full));
        }
        let err = one(json!({"type": "teleport"})).unwrap_err();
        assert!(err.contains("unsupported item type 'teleport'"), "{err}");
        assert!(one(json!({"type": 3})).is_err());
        assert!(one(json!("text")).is_err());
    }

    #[test]
    fn ids_are_kept_checked_or_generated() {
        let (id, item, _) =
            new_item(one(json!({"id": "msg_mine", "role": "user", "content": "x"})).unwrap());
        assert_eq!(id, "msg_mine");
        assert_eq!(item["id"], "msg_mine");
        assert!(one(json!({"id": "bad id", "role": "user", "content": "x"})).is_err());
        assert!(one(json!({"id": 7, "role": "user", "content": "x"})).is_err());
    }

    #[test]
    fn a_reference_needs_an_id() {
        assert_eq!(
            one(json!({"type": "item_reference", "id": "msg_1"})),
            Ok(Entry::Reference { id: "msg_1".into() })
        );
        assert!(one(json!({"type": "item_reference"})).is_err());
        assert!(one(json!({"type": "item_reference", "id": "../x"})).is_err());
    }

    #[test]
    fn long_types_are_clipped_in_messages() {
        let err = one(json!({"type": "x".repeat(1000)})).unwrap_err();
        assert!(err.len() < 200, "{err}");
    }
}

//! Ids of the Conversations API: checks of the ids a client sends (in the path, in a body,
//! in the `after` cursor) and generation of new ones.
//!
//! An id is at most [`MAX_ID_LEN`] bytes of `[A-Za-z0-9_-]`, so it is safe to store, to
//! log and to put back in a path; a conversation id starts with `conv_`. A malformed id is
//! refused before any store call.

/// Longest id accepted, in bytes.
pub const MAX_ID_LEN: usize = 128;

/// Prefix of conversation ids.
pub const CONVERSATION_PREFIX: &str = "conv_";

/// Whether `id` is a well-formed id of any kind: 1 to [`MAX_ID_LEN`] bytes of
/// `[A-Za-z0-9_-]`.
pub fn is_well_formed(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Checks a conversation id; the error is the message of the 400.
pub fn check_conversation(id: &str) -> Result<(), String> {
    if !id.starts_with(CONVERSATION_PREFIX) || id.len() == CONVERSATION_PREFIX.len() {
        return Err("Invalid conversation ID: it must start with 'conv_'".into());
    }
    if !is_well_formed(id) {
        return Err(format!(
            "Invalid conversation ID: at most {MAX_ID_LEN} characters of A-Z, a-z, 0-9, '_' and '-'"
        ));
    }
    Ok(())
}

/// Checks an item id (`what` names where it came from: `item_id`, `after`, `items[3].id`).
pub fn check_item(id: &str, what: &str) -> Result<(), String> {
    if is_well_formed(id) {
        Ok(())
    } else {
        Err(format!(
            "Invalid {what}: an item ID is 1 to {MAX_ID_LEN} characters of A-Z, a-z, 0-9, '_' and '-'"
        ))
    }
}

/// A new conversation id: `conv_` and 32 random hex digits.
pub fn new_conversation() -> String {
    format!("{CONVERSATION_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_ids_need_the_prefix_and_safe_characters() {
        assert!(check_conversation("conv_abc123").is_ok());
        assert!(check_conversation("conv_a-b_C").is_ok());
        assert!(check_conversation("conv_").is_err());
        assert!(check_conversation("abc").is_err());
        assert!(check_conversation("resp_abc").is_err());
        assert!(check_conversation("conv_a.b").is_err());
        assert!(check_conversation("conv_a%20b").is_err());
        assert!(check_conversation("conv_é").is_err());
        let long = format!("conv_{}", "a".repeat(MAX_ID_LEN));
        assert!(check_conversation(&long).is_err());
        let longest = format!("conv_{}", "a".repeat(MAX_ID_LEN - 5));
        assert!(check_conversation(&longest).is_ok());
    }

    #[test]
    fn item_ids_are_checked_for_characters_and_length() {
        assert!(check_item("msg_1", "item_id").is_ok());
        assert!(check_item("", "item_id").is_err());
        assert!(check_item("a/b", "item_id").is_err());
        assert!(check_item(&"a".repeat(MAX_ID_LEN + 1), "item_id").is_err());
    }

    #[test]
    fn new_ids_are_well_formed_and_distinct() {
        let a = new_conversation();
        assert!(check_conversation(&a).is_ok());
        assert_eq!(a.len(), 5 + 32);
        assert_ne!(a, new_conversation());
        assert!(crate::history::new_item_id("message").starts_with("msg_"));
        assert!(crate::history::new_item_id("reasoning").starts_with("rs_"));
        assert!(is_well_formed(&crate::history::new_item_id(
            "function_call_output"
        )));
    }
}

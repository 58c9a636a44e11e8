//! Ids of stored items: an item that arrives without one (a Responses input or output item,
//! an item added to a conversation) gets its type's OpenAI prefix and 32 random hex digits.
//! One place, so a Responses turn and the Conversations API name items alike.

/// A new id for an item of type `kind` that came without one: the type's OpenAI prefix and
/// 32 random hex digits.
pub fn new_item_id(kind: &str) -> String {
    format!("{}{}", item_prefix(kind), uuid::Uuid::new_v4().simple())
}

/// The id prefix of an item type, as OpenAI's ids of that type start.
fn item_prefix(kind: &str) -> &'static str {
    match kind {
        "message" => "msg_",
        "reasoning" => "rs_",
        "mcp_list_tools" => "mcpl_",
        "mcp_call" => "mcp_",
        "mcp_approval_request" => "mcpr_",
        "mcp_approval_response" => "mcpa_",
        "function_call" => "fc_",
        "function_call_output" => "fco_",
        "file_search_call" => "fs_",
        "computer_call" => "cu_",
        "computer_call_output" => "cuo_",
        "web_search_call" => "ws_",
        "image_generation_call" => "ig_",
        "code_interpreter_call" => "ci_",
        "local_shell_call" => "lsh_",
        "local_shell_call_output" => "lsho_",
        "custom_tool_call" => "ctc_",
        "custom_tool_call_output" => "ctco_",
        _ => "item_",
    }
}

/// Longest id the history store keeps, in bytes. Every id the gateway makes is far
/// shorter (`resp_`, `conv_`, an item prefix, and 32 hex digits).
pub const MAX_STORED_ID_BYTES: usize = 256;

/// Longest piece of a client's input an error message repeats, in characters.
pub const MAX_ECHO_CHARS: usize = 64;

/// Whether `id` can name a stored record: 1 to [`MAX_STORED_ID_BYTES`] bytes of printable
/// ASCII without spaces (`!` to `~`). Anything else names nothing: the store answers it as
/// absent without asking its server, so a NUL byte, a control character or a 200 KB id
/// never reaches a database (where it would be an encoding error, not an unknown id).
pub fn is_storable_id(id: &str) -> bool {
    (1..=MAX_STORED_ID_BYTES).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_graphic())
}

/// A client's string as an error message may repeat it: at most [`MAX_ECHO_CHARS`]
/// characters, then `...` when it was longer; control characters (a NUL included) shown as
/// `?`. An error stays short and printable whatever was sent.
pub fn shown(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(MAX_ECHO_CHARS)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if value.chars().nth(MAX_ECHO_CHARS).is_some() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storable_ids_are_short_printable_ascii() {
        assert!(is_storable_id("resp_0123abcd"));
        assert!(is_storable_id(&new_item_id("message")));
        assert!(is_storable_id(&"a".repeat(MAX_STORED_ID_BYTES)));
        assert!(!is_storable_id(&"a".repeat(MAX_STORED_ID_BYTES + 1)));
        assert!(!is_storable_id(""));
        for bad in ["resp_\0", "resp 1", "resp_\n", "resp_é", "resp_\u{7f}"] {
            assert!(!is_storable_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn shown_cuts_long_input_and_hides_control_characters() {
        assert_eq!(shown("resp_1"), "resp_1");
        let long = "x".repeat(200_000);
        let cut = shown(&long);
        assert_eq!(cut.len(), MAX_ECHO_CHARS + 3);
        assert!(cut.ends_with("..."));
        assert_eq!(
            shown(&"é".repeat(MAX_ECHO_CHARS)),
            "é".repeat(MAX_ECHO_CHARS)
        );
        assert_eq!(shown("a\0b"), "a?b");
    }
}

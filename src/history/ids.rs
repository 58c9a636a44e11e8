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

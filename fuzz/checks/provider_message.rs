//! The provider backend's Messages response check and re-serialisation
//! (`transport::provider::message::reserialize`) on arbitrary bytes. Checks: no
//! panic; what passes was JSON and comes out as JSON equal in value (fields, block types and
//! numbers the gateway does not model are kept); what is refused is not written.
//!
//! Input layout: the whole input is the provider's body.

use serde_json::Value;
use tollgate::transport::provider::message::reserialize;

/// One input through the checks above (the fuzz target's body).
pub fn check(data: &[u8]) {
    let Ok(out) = reserialize(data) else {
        return;
    };
    let written: Value = serde_json::from_slice(&out).expect("the re-serialised body is JSON");
    if let Ok(read) = serde_json::from_slice::<Value>(data) {
        assert_eq!(written, read, "re-serialised, equal in value");
    }
    assert_eq!(written["type"], "message");
}

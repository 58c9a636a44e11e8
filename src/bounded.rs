//! Bounds on the client-supplied strings the gateway keeps beyond one request.
//!
//! A client chooses the `model` of its body, its routing keys and parts of its request
//! line. Where such a string outlives the request — as a metrics label value, a key of a
//! long-lived map, or a log field — its length must be bounded as well as the number of
//! distinct values: 40 requests naming unique 2 MB models would otherwise make every later
//! `/metrics` scrape gigabytes long. Each owner applies the bound that suits it (a label
//! becomes `other`, a map key its digest, a log field its clipped prefix); the numbers
//! live here so they are decided once.

/// Longest label value kept as its own series; a longer client string is `other`. Real
/// model ids and paths are far shorter.
pub const LABEL_BYTES: usize = 256;

/// Longest client string used as a key of a long-lived map (policy trees, sticky keys)
/// as it is; longer ones are keyed by a digest or share a default entry.
pub const KEY_BYTES: usize = 256;

/// Longest client string written into a log field; longer ones are clipped.
pub const LOG_BYTES: usize = 512;

/// The longest prefix of `text` of at most `max_bytes` bytes that ends on a character
/// boundary.
pub fn prefix_within(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// `text` as a log field: at most [`LOG_BYTES`] bytes.
pub fn log_field(text: &str) -> &str {
    prefix_within(text, LOG_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_never_splits_a_character() {
        assert_eq!(prefix_within("héllo", 2), "h");
        assert_eq!(prefix_within("héllo", 3), "hé");
        assert_eq!(prefix_within("🦀🦀", 7), "🦀");
        assert_eq!(prefix_within("abc", 10), "abc");
        assert_eq!(prefix_within("🦀", 0), "");
    }

    #[test]
    fn log_fields_are_clipped() {
        let long = "x".repeat(LOG_BYTES * 4);
        assert_eq!(log_field(&long).len(), LOG_BYTES);
        assert_eq!(log_field("short"), "short");
    }
}

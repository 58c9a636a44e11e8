//! Label values without per-request allocation, and the cardinality caps of spec 3.
//!
//! A label value is either a static string (methods, route templates, reasons, status
//! codes) or a shared one (model names, worker URLs) interned once; label sets are small
//! arrays of `(name, value)` pairs, so looking a series up hashes a few pointers' worth of
//! data and allocates nothing.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock, RwLock};

use prometheus_client::encoding::{EncodeLabelValue, LabelValueEncoder};

/// One label value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Label {
    Static(&'static str),
    Shared(Arc<str>),
}

impl Label {
    pub fn as_str(&self) -> &str {
        match self {
            Label::Static(s) => s,
            Label::Shared(s) => s,
        }
    }
}

impl From<&'static str> for Label {
    fn from(s: &'static str) -> Label {
        Label::Static(s)
    }
}

impl EncodeLabelValue for Label {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

/// A label set of `N` pairs.
pub type Labels<const N: usize> = [(&'static str, Label); N];

/// Distinct `model` values that keep their own series; later new ones become `other`.
pub const MODEL_CAP: usize = 1024;

/// The `model` label values admitted so far (spec 3 "Limits": the first 1,024 distinct
/// values keep their own series, admitted values are never evicted).
#[derive(Debug, Default)]
pub struct ModelLabels {
    admitted: RwLock<HashMap<Box<str>, Arc<str>>>,
}

impl ModelLabels {
    /// The label for `model`: its own (interned) value while under the cap, else `other`.
    /// A value longer than [`crate::bounded::LABEL_BYTES`] is `other` too: it would cost
    /// its length in memory and in every scrape, and names no real model.
    pub fn get(&self, model: &str) -> Label {
        if model.len() > crate::bounded::LABEL_BYTES {
            return Label::Static("other");
        }
        if let Ok(admitted) = self.admitted.read() {
            if let Some(v) = admitted.get(model) {
                return Label::Shared(v.clone());
            }
            if admitted.len() >= MODEL_CAP {
                return Label::Static("other");
            }
        }
        let Ok(mut admitted) = self.admitted.write() else {
            return Label::Static("other");
        };
        if let Some(v) = admitted.get(model) {
            return Label::Shared(v.clone());
        }
        if admitted.len() >= MODEL_CAP {
            return Label::Static("other");
        }
        let value: Arc<str> = Arc::from(model);
        admitted.insert(Box::from(model), value.clone());
        Label::Shared(value)
    }
}

/// The `method` label: the known methods, any other is `OTHER`.
pub fn method(m: &http::Method) -> &'static str {
    METHODS[method_index(m)]
}

/// Every `method` label value.
pub const METHODS: [&str; 8] = [
    "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "OTHER",
];

/// The index of a method's label in [`METHODS`].
pub fn method_index(m: &http::Method) -> usize {
    match *m {
        http::Method::GET => 0,
        http::Method::POST => 1,
        http::Method::PUT => 2,
        http::Method::DELETE => 3,
        http::Method::PATCH => 4,
        http::Method::HEAD => 5,
        http::Method::OPTIONS => 6,
        _ => 7,
    }
}

/// A status code as a static label value ("100" to "999").
pub fn status(code: u16) -> &'static str {
    static CODES: OnceLock<Vec<String>> = OnceLock::new();
    let codes = CODES.get_or_init(|| (100..1000u16).map(|c| c.to_string()).collect());
    codes
        .get(usize::from(code).wrapping_sub(100))
        .map_or("other", String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_capped_and_never_evicted() {
        let labels = ModelLabels::default();
        for i in 0..MODEL_CAP {
            assert_eq!(labels.get(&format!("m{i}")).as_str(), format!("m{i}"));
        }
        assert_eq!(labels.get("late").as_str(), "other");
        assert_eq!(labels.get("m0").as_str(), "m0");
        assert_eq!(labels.get(&format!("m{}", MODEL_CAP - 1)).as_str(), "m1023");
    }

    #[test]
    fn long_models_are_other_and_take_no_slot() {
        let labels = ModelLabels::default();
        let long = "m".repeat(crate::bounded::LABEL_BYTES + 1);
        assert_eq!(labels.get(&long).as_str(), "other");
        let longest = "m".repeat(crate::bounded::LABEL_BYTES);
        assert_eq!(labels.get(&longest).as_str(), longest);
        assert_eq!(labels.admitted.read().map(|a| a.len()).unwrap_or(0), 1);
    }

    #[test]
    fn methods_and_statuses() {
        assert_eq!(method(&http::Method::PATCH), "PATCH");
        assert_eq!(method(&http::Method::TRACE), "OTHER");
        assert_eq!(status(200), "200");
        assert_eq!(status(599), "599");
        assert_eq!(status(42), "other");
    }
}

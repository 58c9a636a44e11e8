//! The event lines on stdout that tests read to learn what the gateway asked for.
//!
//! One line per event, `word key=value ...`, written whole and flushed at once so a test
//! reading the pipe line by line never sees half an event.

use std::fmt;
use std::io::Write;

use tollgate::engine::grpc::sglang::sampling_params::Constraint;
use tollgate::engine::grpc::sglang::{GenerateRequest, SamplingParams};

/// Writes one line; a closed stdout is not the engine's problem, so errors are dropped.
pub fn line(args: fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
    let _ = out.flush();
}

/// A request id as one whitespace-free token: whitespace, control characters and
/// backslashes are escaped (`\u{..}`, `\\`), anything else is printed as is.
pub struct Id<'a>(pub &'a str);

impl fmt::Display for Id<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c == '\\' {
                f.write_str("\\\\")?;
            } else if c.is_whitespace() || c.is_control() {
                write!(f, "\\u{{{:x}}}", c as u32)?;
            } else {
                write!(f, "{c}")?;
            }
        }
        if self.0.is_empty() {
            f.write_str("\"\"")?;
        }
        Ok(())
    }
}

/// The `generate` line: what the gateway sent, compactly.
pub fn generate(request: &GenerateRequest) {
    let input_ids = request
        .tokenized
        .as_ref()
        .map_or(0, |tokenized| tokenized.input_ids.len());
    let default = SamplingParams::default();
    let params = request.sampling_params.as_ref().unwrap_or(&default);
    let max_new_tokens = params
        .max_new_tokens
        .map_or_else(|| "none".to_string(), |n| n.to_string());
    // JSON keeps stop strings with spaces or quotes on one parseable token.
    let stop = serde_json::to_string(&params.stop).unwrap_or_default();
    let stop_ids = serde_json::to_string(&params.stop_token_ids).unwrap_or_default();
    line(format_args!(
        "generate request_id={} input_ids={input_ids} max_new_tokens={max_new_tokens} \
         stream={} temperature={} top_p={} top_k={} min_p={} stop_token_ids={stop_ids} \
         stop={stop} ignore_eos={}{}",
        Id(&request.request_id),
        request.stream,
        params.temperature,
        params.top_p,
        params.top_k,
        params.min_p,
        params.ignore_eos,
        constraint(params),
    ));
}

/// ` json_schema=<schema>` when the request constrains the output (the mock does not
/// follow it: it only says what it was asked); nothing otherwise.
fn constraint(params: &SamplingParams) -> String {
    match &params.constraint {
        Some(Constraint::JsonSchema(schema)) => format!(" json_schema={schema}"),
        Some(_) => " constraint=other".to_owned(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_stay_one_token() {
        assert_eq!(Id("req-1").to_string(), "req-1");
        assert_eq!(Id("a b\nc").to_string(), "a\\u{20}b\\u{a}c");
        assert_eq!(Id("x\\u{20}").to_string(), "x\\\\u{20}");
        assert_eq!(Id("").to_string(), "\"\"");
        assert_eq!(Id("é世").to_string(), "é世");
    }
}

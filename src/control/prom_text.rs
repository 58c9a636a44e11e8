//! A small reader and re-writer of the Prometheus text exposition format (version 0.0.4),
//! for what the gateway does with engines' `/metrics`: read a few load gauges (the load
//! monitor) and merge several engines' pages into one with a `worker_addr` label on every
//! sample (`GET /engine_metrics`).
//!
//! Engine pages are untrusted input, so nothing here panics or trusts a line: a line that
//! does not parse is skipped. Parsing borrows from the page; label values keep their
//! escaped spelling so a re-written sample passes them on byte for byte.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;

/// One line of an exposition page.
#[derive(Debug, Clone, PartialEq)]
pub enum Line<'a> {
    /// `# HELP <family> <text>`.
    Help {
        family: &'a str,
    },
    /// `# TYPE <family> <type>`.
    Type {
        family: &'a str,
    },
    /// Any other comment, or an empty line.
    Other,
    Sample(Sample<'a>),
}

/// A sample line: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    pub name: &'a str,
    /// Label pairs in page order, values still escaped.
    pub labels: Vec<(&'a str, &'a str)>,
    pub value: f64,
    pub timestamp: Option<i64>,
    /// The value and timestamp exactly as written, so a re-written line keeps them.
    value_text: &'a str,
}

impl<'a> Sample<'a> {
    /// The unescaped value of label `name`, if the sample has it.
    pub fn label(&self, name: &str) -> Option<Cow<'a, str>> {
        self.labels
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, raw)| unescape(raw))
    }
}

/// Classifies one line (without its line break); `None` for a malformed line.
pub fn parse_line(line: &str) -> Option<Line<'_>> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let trimmed = line.trim_start_matches([' ', '\t']);
    if trimmed.is_empty() {
        return Some(Line::Other);
    }
    if let Some(comment) = trimmed.strip_prefix('#') {
        return Some(parse_comment(comment));
    }
    parse_sample(trimmed).map(Line::Sample)
}

/// `HELP` and `TYPE` name a family; every other comment is just a comment. A `HELP` or
/// `TYPE` line without a valid metric name is malformed, not a comment: passing it on
/// would corrupt the merged page.
fn parse_comment(comment: &str) -> Line<'_> {
    let mut words = comment
        .trim_start_matches([' ', '\t'])
        .splitn(3, [' ', '\t']);
    let keyword = words.next().unwrap_or("");
    let family = words.next().unwrap_or("");
    if !matches!(keyword, "HELP" | "TYPE") || !is_metric_name(family) {
        return Line::Other;
    }
    if keyword == "HELP" {
        Line::Help { family }
    } else {
        let kind = words.next().unwrap_or("").trim();
        if matches!(
            kind,
            "counter" | "gauge" | "histogram" | "summary" | "untyped"
        ) {
            Line::Type { family }
        } else {
            Line::Other
        }
    }
}

fn parse_sample(line: &str) -> Option<Sample<'_>> {
    let name_end = line
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return None;
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    // Blanks may separate the name from its labels.
    if let Some(after_brace) = rest.trim_start_matches([' ', '\t']).strip_prefix('{') {
        rest = parse_labels(after_brace, &mut labels)?;
    }
    // At least one blank separates the series from its value.
    let value_text = rest.trim_start_matches([' ', '\t']);
    if value_text.len() == rest.len() {
        return None;
    }
    let value_text = value_text.trim_end_matches([' ', '\t']);
    let mut parts = value_text.split([' ', '\t']).filter(|p| !p.is_empty());
    let value = parse_value(parts.next()?)?;
    let timestamp = match parts.next() {
        Some(ts) => Some(ts.parse::<i64>().ok()?),
        None => None,
    };
    if parts.next().is_some() {
        return None;
    }
    Some(Sample {
        name,
        labels,
        value,
        timestamp,
        value_text,
    })
}

/// Reads `name="value", ...}` (after the `{`); returns what follows the `}`.
fn parse_labels<'a>(mut rest: &'a str, labels: &mut Vec<(&'a str, &'a str)>) -> Option<&'a str> {
    loop {
        rest = rest.trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some(after);
        }
        let name_end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let name = &rest[..name_end];
        if !is_label_name(name) {
            return None;
        }
        rest = rest[name_end..].trim_start_matches([' ', '\t']);
        rest = rest.strip_prefix('=')?.trim_start_matches([' ', '\t']);
        rest = rest.strip_prefix('"')?;
        let end = closing_quote(rest)?;
        labels.push((name, &rest[..end]));
        rest = rest[end + 1..].trim_start_matches([' ', '\t']);
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return None;
        }
    }
}

/// Index of the quote that ends an escaped label value; `None` when the value is not
/// closed or uses an escape the format does not have.
fn closing_quote(value: &str) -> Option<usize> {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return Some(i),
            b'\\' => match bytes.get(i + 1) {
                Some(b'\\' | b'"' | b'n') => i += 2,
                _ => return None,
            },
            _ => i += 1,
        }
    }
    None
}

/// A sample value: a float, `NaN`, `+Inf` or `-Inf`.
fn parse_value(text: &str) -> Option<f64> {
    match text {
        "NaN" => Some(f64::NAN),
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        // Rust's float syntax is a superset for finite numbers but also takes spellings
        // such as `inf` or `infinity` that the format does not; only digits may start one.
        _ if text
            .trim_start_matches(['+', '-'])
            .starts_with(|c: char| c.is_ascii_digit() || c == '.') =>
        {
            text.parse().ok()
        }
        _ => None,
    }
}

fn is_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A label value as written in a page, unescaped.
pub fn unescape(raw: &str) -> Cow<'_, str> {
    if !raw.contains('\\') {
        return Cow::Borrowed(raw);
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// A label value escaped for a page.
pub fn escape(value: &str) -> Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(value.len() + 8);
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Writes `sample` with label `name="escaped_value"` added (replacing a label of that name
/// the sample already had, so the line stays valid), followed by a line break.
pub fn write_with_label(out: &mut String, sample: &Sample<'_>, name: &str, escaped_value: &str) {
    out.push_str(sample.name);
    out.push('{');
    for (label, raw) in sample.labels.iter().filter(|(label, _)| *label != name) {
        // Writing into a String cannot fail.
        let _ = write!(out, "{label}=\"{raw}\",");
    }
    let _ = writeln!(out, "{name}=\"{escaped_value}\"}} {}", sample.value_text);
}

/// Suffixes a sample name may add to its family's name (histograms, summaries, counters).
const FAMILY_SUFFIXES: [&str; 5] = ["_bucket", "_sum", "_count", "_total", "_created"];

/// Whether a sample called `name` belongs to family `family`.
fn in_family(name: &str, family: &str) -> bool {
    name.strip_prefix(family)
        .is_some_and(|rest| rest.is_empty() || FAMILY_SUFFIXES.contains(&rest))
}

/// Several engines' pages merged into one: every sample gains a label naming its engine,
/// `HELP` and `TYPE` appear once per family, and all samples of a family stay together
/// (the format wants a family's lines in one group), families in order of first sight.
/// Comments other than `HELP` and `TYPE`, blank lines and malformed lines are dropped.
#[derive(Debug, Default)]
pub struct Merged {
    families: Vec<Family>,
    by_name: HashMap<String, usize>,
    bytes: usize,
}

#[derive(Debug, Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    samples: String,
}

impl Merged {
    pub fn new() -> Merged {
        Merged::default()
    }

    /// Adds one engine's page, labelling each sample `label="value"` (`value` unescaped).
    pub fn add(&mut self, page: &str, label: &str, value: &str) {
        let value = escape(value);
        // The family declared last on this page, which its samples follow.
        let mut current: Option<(usize, &str)> = None;
        for line in page.split('\n') {
            match parse_line(line) {
                Some(Line::Help { family }) => {
                    let index = self.family(family);
                    current = Some((index, family));
                    self.keep_meta(index, line, |f| &mut f.help);
                }
                Some(Line::Type { family }) => {
                    let index = self.family(family);
                    current = Some((index, family));
                    self.keep_meta(index, line, |f| &mut f.kind);
                }
                Some(Line::Sample(sample)) => {
                    let index = match current {
                        Some((index, family)) if in_family(sample.name, family) => index,
                        _ => self.family(sample.name),
                    };
                    if let Some(family) = self.families.get_mut(index) {
                        let before = family.samples.len();
                        write_with_label(&mut family.samples, &sample, label, &value);
                        self.bytes += family.samples.len() - before;
                    }
                }
                Some(Line::Other) | None => {}
            }
        }
    }

    /// Keeps a `HELP` or `TYPE` line unless the family already has one (the first engine's
    /// wins; two would make the page invalid).
    fn keep_meta(
        &mut self,
        index: usize,
        line: &str,
        slot: fn(&mut Family) -> &mut Option<String>,
    ) {
        let Some(family) = self.families.get_mut(index) else {
            return;
        };
        let slot = slot(family);
        if slot.is_none() {
            let line = line.trim_start_matches([' ', '\t']).trim_end_matches('\r');
            self.bytes += line.len() + 1;
            *slot = Some(line.to_owned());
        }
    }

    /// Bytes of the merged page so far.
    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The merged page.
    pub fn finish(self) -> String {
        let mut out = String::with_capacity(self.bytes);
        for family in self.families {
            for meta in [family.help, family.kind].into_iter().flatten() {
                out.push_str(&meta);
                out.push('\n');
            }
            out.push_str(&family.samples);
        }
        out
    }

    /// The index of family `name`, created empty if new.
    fn family(&mut self, name: &str) -> usize {
        if let Some(index) = self.by_name.get(name) {
            return *index;
        }
        let index = self.families.len();
        self.families.push(Family::default());
        self.by_name.insert(name.to_owned(), index);
        index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(line: &str) -> Sample<'_> {
        match parse_line(line) {
            Some(Line::Sample(s)) => s,
            other => panic!("{line:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn samples_with_and_without_labels_and_timestamps() {
        let s = sample("sglang:num_running_reqs 3");
        assert_eq!(
            (s.name, s.value, s.timestamp),
            ("sglang:num_running_reqs", 3.0, None)
        );
        assert!(s.labels.is_empty());
        let s =
            sample("vllm:num_requests_waiting{model_name=\"m\",engine=\"0\"} 2.5 1700000000000");
        assert_eq!(s.labels, [("model_name", "m"), ("engine", "0")]);
        assert_eq!((s.value, s.timestamp), (2.5, Some(1_700_000_000_000)));
        let s = sample("  x { a = \"1\" , } +Inf");
        assert_eq!(s.labels, [("a", "1")]);
        assert_eq!(s.value, f64::INFINITY);
        assert!(sample("x{} NaN").value.is_nan());
        assert_eq!(sample("x -Inf\r").value, f64::NEG_INFINITY);
        assert_eq!(sample("x 1e-3").value, 0.001);
    }

    #[test]
    fn escaped_label_values_are_kept_raw_and_unescaped_on_demand() {
        let s = sample(r#"m{path="a\"b\\c\nd",x="}"} 1"#);
        assert_eq!(s.labels[0], ("path", r#"a\"b\\c\nd"#));
        assert_eq!(s.label("path").as_deref(), Some("a\"b\\c\nd"));
        assert_eq!(s.label("x").as_deref(), Some("}"));
        assert_eq!(s.label("missing"), None);
        assert_eq!(escape("a\"b\\c\nd"), r#"a\"b\\c\nd"#);
        assert_eq!(unescape(&escape("q\"\\\n")), "q\"\\\n");
    }

    #[test]
    fn comments_help_and_type() {
        assert_eq!(
            parse_line("# HELP sglang:token_usage The token usage."),
            Some(Line::Help {
                family: "sglang:token_usage"
            })
        );
        assert_eq!(
            parse_line("# TYPE x_seconds histogram"),
            Some(Line::Type {
                family: "x_seconds"
            })
        );
        assert_eq!(parse_line("# TYPE x bogus"), Some(Line::Other));
        assert_eq!(parse_line("# HELP 9bad text"), Some(Line::Other));
        assert_eq!(parse_line("# just a note"), Some(Line::Other));
        assert_eq!(parse_line("#"), Some(Line::Other));
        assert_eq!(parse_line(""), Some(Line::Other));
    }

    #[test]
    fn malformed_lines_are_refused() {
        for bad in [
            "9x 1",
            "x",
            "x{a=\"1\"}",
            "x{a=\"1\"}1",
            "x 1 2 3",
            "x abc",
            "x inf",
            "x 1 1.5",
            "x{a=1} 1",
            "x{a=\"1\" b=\"2\"} 1",
            "x{a=\"unterminated} 1",
            "x{a=\"bad\\escape\"} 1",
            "x{=\"v\"} 1",
            "x{a=\"1\"",
            "{a=\"1\"} 1",
            "x\u{e9} 1",
        ] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_label_is_added_with_or_without_existing_labels() {
        let mut out = String::new();
        write_with_label(&mut out, &sample("up 1"), "worker_addr", "http://a:1");
        write_with_label(
            &mut out,
            &sample("sglang:x{model_name=\"q\\\"m\"} 2 17"),
            "worker_addr",
            "http://a:1",
        );
        write_with_label(
            &mut out,
            &sample("y{worker_addr=\"spoofed\",b=\"2\"} 3"),
            "worker_addr",
            "http://a:1",
        );
        assert_eq!(
            out,
            "up{worker_addr=\"http://a:1\"} 1\n\
             sglang:x{model_name=\"q\\\"m\",worker_addr=\"http://a:1\"} 2 17\n\
             y{b=\"2\",worker_addr=\"http://a:1\"} 3\n"
        );
        for line in out.lines() {
            assert!(parse_line(line).is_some(), "{line}");
        }
    }

    #[test]
    fn pages_merge_with_one_help_and_type_per_family_and_grouped_samples() {
        let a = "# HELP sglang:num_running_reqs Running.\n\
                 # TYPE sglang:num_running_reqs gauge\n\
                 sglang:num_running_reqs{model_name=\"m\"} 3\n\
                 # TYPE lat histogram\n\
                 lat_bucket{le=\"1\"} 1\n\
                 lat_bucket{le=\"+Inf\"} 2\n\
                 lat_sum 0.5\n\
                 lat_count 2\n\
                 # EOF\n";
        let b = "# HELP sglang:num_running_reqs Running (other text).\r\n\
                 # TYPE sglang:num_running_reqs gauge\r\n\
                 sglang:num_running_reqs{model_name=\"m\"} 5\r\n\
                 garbage line here\n\
                 # TYPE lat histogram\n\
                 lat_count 7\n";
        let mut merged = Merged::new();
        merged.add(a, "worker_addr", "http://a");
        merged.add(b, "worker_addr", "http://b\"");
        let len = merged.len();
        let text = merged.finish();
        assert_eq!(text.len(), len);
        assert_eq!(
            text,
            "# HELP sglang:num_running_reqs Running.\n\
             # TYPE sglang:num_running_reqs gauge\n\
             sglang:num_running_reqs{model_name=\"m\",worker_addr=\"http://a\"} 3\n\
             sglang:num_running_reqs{model_name=\"m\",worker_addr=\"http://b\\\"\"} 5\n\
             # TYPE lat histogram\n\
             lat_bucket{le=\"1\",worker_addr=\"http://a\"} 1\n\
             lat_bucket{le=\"+Inf\",worker_addr=\"http://a\"} 2\n\
             lat_sum{worker_addr=\"http://a\"} 0.5\n\
             lat_count{worker_addr=\"http://a\"} 2\n\
             lat_count{worker_addr=\"http://b\\\"\"} 7\n"
        );
    }

    #[test]
    fn undeclared_samples_form_their_own_family() {
        let mut merged = Merged::new();
        merged.add("# TYPE a gauge\na 1\nb 2\na_total 3\n", "w", "1");
        assert_eq!(
            merged.finish(),
            "# TYPE a gauge\na{w=\"1\"} 1\na_total{w=\"1\"} 3\nb{w=\"1\"} 2\n"
        );
        assert!(Merged::new().is_empty());
    }
}

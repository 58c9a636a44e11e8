//! The `tojson` filter as transformers defines it: Python's `json.dumps(x,
//! ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)`. Tool
//! schemas reach the model through it, so every space matters: Python's default separators
//! are `", "` and `": "` (`","` between items once `indent` is set), non-ASCII text is kept
//! as it is, nothing is HTML-escaped, keys keep their order, floats print as Python's `repr`.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt::Write as _;

use minijinja::value::{Kwargs, Rest, Value, ValueKind};
use minijinja::{Error, ErrorKind};

use super::py::{self, NonFinite};

/// How `json.dumps` was asked to write.
struct Options {
    ensure_ascii: bool,
    /// The text one nesting level indents by; `None` writes everything on one line.
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

/// The filter: `value | tojson(ensure_ascii, indent, separators, sort_keys)`, each argument
/// also accepted by name, in the order transformers' Python signature gives them.
pub(super) fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if args.len() > NAMES.len() {
        return Err(Error::from(ErrorKind::TooManyArguments));
    }
    let mut given: [Option<Value>; 4] = Default::default();
    for (slot, name) in given.iter_mut().zip(NAMES) {
        if kwargs.has(name) {
            *slot = Some(kwargs.get::<Value>(name)?);
        }
    }
    for (slot, arg) in given.iter_mut().zip(args.iter()) {
        if slot.is_some() {
            return Err(Error::new(
                ErrorKind::TooManyArguments,
                "tojson got an argument both by position and by name",
            ));
        }
        *slot = Some(arg.clone());
    }
    kwargs.assert_all_used()?;
    let [ensure_ascii, indent, separators, sort_keys] = given;
    let indent = indent
        .filter(|v| !v.is_none())
        .map(indent_text)
        .transpose()?;
    let (item_separator, key_separator) = match separators.filter(|v| !v.is_none()) {
        Some(pair) => separator_pair(&pair)?,
        None if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        None => (", ".to_owned(), ": ".to_owned()),
    };
    let options = Options {
        ensure_ascii: ensure_ascii.is_some_and(|v| v.is_true()),
        indent,
        item_separator,
        key_separator,
        sort_keys: sort_keys.is_some_and(|v| v.is_true()),
    };
    let mut out = String::new();
    write_value(&mut out, value, &options, 0)?;
    Ok(Value::from(out))
}

/// Python takes an integer (that many spaces, none when negative) or a string.
fn indent_text(indent: Value) -> Result<String, Error> {
    if let Some(text) = indent.as_str() {
        return Ok(text.to_owned());
    }
    match indent.kind() {
        ValueKind::Bool => Ok(if indent.is_true() { " " } else { "" }.to_owned()),
        _ if indent.is_integer() => {
            let spaces = i64::try_from(indent)?.clamp(0, 64);
            Ok(" ".repeat(spaces as usize))
        }
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson indent must be an integer or a string",
        )),
    }
}

fn separator_pair(pair: &Value) -> Result<(String, String), Error> {
    let wrong = || {
        Error::new(
            ErrorKind::InvalidOperation,
            "tojson separators must be a pair of strings",
        )
    };
    if !matches!(pair.kind(), ValueKind::Seq) || pair.len() != Some(2) {
        return Err(wrong());
    }
    let part = |i: usize| -> Result<String, Error> {
        let item = pair.get_item(&Value::from(i))?;
        item.as_str().map(str::to_owned).ok_or_else(wrong)
    };
    Ok((part(0)?, part(1)?))
}

fn not_serializable(kind: &str) -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        format!("object of type {kind} is not JSON serializable"),
    )
}

fn write_value(
    out: &mut String,
    value: &Value,
    options: &Options,
    depth: usize,
) -> Result<(), Error> {
    if depth > py::MAX_DEPTH {
        return Err(py::too_deep());
    }
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => py::write_number(out, value, NonFinite::Json),
        ValueKind::String => write_string(
            out,
            value.as_str().unwrap_or_default(),
            options.ensure_ascii,
        ),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, ('[', ']'), &items, options, depth, |out, item| {
                write_value(out, item, options, depth + 1)
            })?;
        }
        ValueKind::Map => {
            // Key and value together: looking each key up again would hash it.
            let mut entries: Vec<(Value, Value)> = value
                .as_object()
                .and_then(|map| map.try_iter_pairs())
                .ok_or_else(|| not_serializable("map"))?
                .collect();
            if options.sort_keys {
                sort_entries(&mut entries)?;
            }
            write_container(
                out,
                ('{', '}'),
                &entries,
                options,
                depth,
                |out, (key, item)| {
                    write_key(out, key, options)?;
                    out.push_str(&options.key_separator);
                    write_value(out, item, options, depth + 1)
                },
            )?;
        }
        ValueKind::Undefined => return Err(not_serializable("Undefined")),
        other => return Err(not_serializable(&other.to_string())),
    }
    Ok(())
}

/// Writes `[..]` or `{..}` with Python's layout: on one line without an indent, else each
/// item on its own line one level in, the closing bracket back on the parent's level.
fn write_container<T>(
    out: &mut String,
    (open, close): (char, char),
    items: &[T],
    options: &Options,
    depth: usize,
    mut write_item: impl FnMut(&mut String, &T) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(indent) = &options.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
            }
        }
    };
    newline(out, depth + 1);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&options.item_separator);
            newline(out, depth + 1);
        }
        write_item(out, item)?;
    }
    newline(out, depth);
    out.push(close);
    Ok(())
}

/// Python turns the keys it accepts into strings: numbers as their repr, `True` as `true`,
/// `None` as `null`; any other key type is an error.
fn write_key(out: &mut String, key: &Value, options: &Options) -> Result<(), Error> {
    let text: Cow<'_, str> = match key.kind() {
        ValueKind::String => Cow::Borrowed(key.as_str().unwrap_or_default()),
        ValueKind::Number => {
            let mut text = String::new();
            py::write_number(&mut text, key, NonFinite::Json);
            Cow::Owned(text)
        }
        ValueKind::Bool => Cow::Borrowed(if key.is_true() { "true" } else { "false" }),
        ValueKind::None => Cow::Borrowed("null"),
        other => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson keys must be str, int, float, bool or None, not {other}"),
            ))
        }
    };
    write_string(out, &text, options.ensure_ascii);
    Ok(())
}

/// `sort_keys`: Python sorts the keys themselves, and cannot order a string against a number.
fn sort_entries(entries: &mut [(Value, Value)]) -> Result<(), Error> {
    let mut mixed = false;
    entries.sort_by(|(a, _), (b, _)| {
        if (a.kind() == ValueKind::String) != (b.kind() == ValueKind::String) {
            mixed = true;
            return Ordering::Equal;
        }
        a.cmp(b)
    });
    if mixed {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            "tojson cannot sort keys of different types",
        ));
    }
    Ok(())
}

/// A JSON string as Python writes it: `"`, `\` and the ASCII controls escaped (`\n`, `\r`,
/// `\t`, `\b`, `\f` by name, the rest as `\u00XX`); with `ensure_ascii`, also everything
/// outside `' '..='~'`, as UTF-16 `\uXXXX` units.
fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if c < ' ' || (ensure_ascii && c > '~') => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::Environment;

    fn render(source: &str, ctx: serde_json::Value) -> String {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        let ctx = crate::chat::template::input::value(&ctx).unwrap();
        env.render_str(source, ctx).unwrap()
    }

    #[test]
    fn defaults_match_python_json_dumps() {
        let ctx =
            serde_json::json!({"x": {"b": [1, 2.5, null, true], "a": "héllo \"世界\" 🎉 <&>\n"}});
        assert_eq!(
            render("{{ x | tojson }}", ctx),
            r#"{"b": [1, 2.5, null, true], "a": "héllo \"世界\" 🎉 <&>\n"}"#
        );
    }

    #[test]
    fn indent_separators_sort_keys_and_ascii() {
        let ctx = serde_json::json!({"x": {"b": [1, {}], "a": "é🎉", "c": []}});
        assert_eq!(
            render("{{ x | tojson(indent=2) }}", ctx.clone()),
            "{\n  \"b\": [\n    1,\n    {}\n  ],\n  \"a\": \"é🎉\",\n  \"c\": []\n}"
        );
        assert_eq!(
            render(
                "{{ x | tojson(separators=(',', ':'), sort_keys=true) }}",
                ctx.clone()
            ),
            r#"{"a":"é🎉","b":[1,{}],"c":[]}"#
        );
        assert_eq!(
            render("{{ x.a | tojson(true) }}", ctx.clone()),
            r#""\u00e9\ud83c\udf89""#
        );
        assert_eq!(
            render("{{ x.b | tojson(indent='\t') }}", ctx),
            "[\n\t1,\n\t{}\n]"
        );
    }

    #[test]
    fn errors_are_values() {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        for source in [
            "{{ nothing | tojson }}",
            "{{ 1 | tojson(indent=1.5) }}",
            "{{ 1 | tojson(separators='x') }}",
            "{{ {'a': 1, 2: 3} | tojson(sort_keys=true) }}",
            "{{ 1 | tojson(false, indent=2, ensure_ascii=true) }}",
            "{{ 1 | tojson(1, 2, 3, 4, 5) }}",
        ] {
            assert!(env.render_str(source, ()).is_err(), "{source}");
        }
    }
}

//! Values printed the way Python prints them. Chat templates are written against Python's
//! Jinja2, where `{{ x }}` is `str(x)`: `None`, `True`, `1.0`, `['a', 'b']`, `{'k': 1}`.
//! MiniJinja's own formatting says `none`, `true`, `[\"a\", \"b\"]`, so a template that prints
//! a null content or a list would give a different prompt than the model was trained on.

use std::fmt::Write as _;

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// How deep a value may nest before printing it is refused. Values from the request are at
/// most 128 deep (serde_json's parse limit); only a template that puts a namespace inside
/// itself goes deeper, and that one would never end.
pub(super) const MAX_DEPTH: usize = 256;

pub(super) fn too_deep() -> Error {
    Error::new(
        ErrorKind::InvalidOperation,
        "value nested too deeply to print",
    )
}

/// Appends Python's `str(value)`; undefined prints as nothing, as in Jinja2.
pub(super) fn write_str(out: &mut String, value: &Value) -> Result<(), Error> {
    match value.kind() {
        ValueKind::Undefined => Ok(()),
        ValueKind::String => {
            out.push_str(value.as_str().unwrap_or_default());
            Ok(())
        }
        _ => write_repr(out, value, 0),
    }
}

/// Python's `str(value)` as a new string (the `string` filter, `join`).
pub(super) fn to_str(value: &Value) -> Result<String, Error> {
    let mut out = String::new();
    write_str(&mut out, value)?;
    Ok(out)
}

/// Appends Python's `repr(value)`: how a value looks inside a printed list or dict.
fn write_repr(out: &mut String, value: &Value, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    match value.kind() {
        ValueKind::Undefined => out.push_str("Undefined"),
        ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if value.is_true() { "True" } else { "False" }),
        ValueKind::Number => write_number(out, value, NonFinite::Python),
        ValueKind::String => write_repr_str(out, value.as_str().unwrap_or_default()),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            for (i, item) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &item, depth + 1)?;
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            for (i, key) in value.try_iter()?.enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_repr(out, &key, depth + 1)?;
                out.push_str(": ");
                write_repr(out, &value.get_item(&key)?, depth + 1)?;
            }
            out.push('}');
        }
        // Macros, bytes and the like have no Python counterpart a template could print.
        _ => {
            let _ = write!(out, "{value}");
        }
    }
    Ok(())
}

/// What a float that is not finite prints as: Python's `repr` or its `json` module.
#[derive(Clone, Copy)]
pub(super) enum NonFinite {
    Python,
    Json,
}

/// Appends a number: integers in decimal, floats as Python's `repr(float)`.
pub(super) fn write_number(out: &mut String, value: &Value, non_finite: NonFinite) {
    if value.is_integer() {
        let _ = write!(out, "{value}");
    } else {
        write_float(
            out,
            f64::try_from(value.clone()).unwrap_or(f64::NAN),
            non_finite,
        );
    }
}

/// Python's `repr(float)`: the shortest digits that read back to the same float, in fixed
/// notation for decimal exponents from -4 to 15 (always with a fractional part) and in
/// scientific notation with a signed, at least two-digit exponent otherwise.
pub(super) fn write_float(out: &mut String, x: f64, non_finite: NonFinite) {
    if !x.is_finite() {
        out.push_str(match (non_finite, x.is_nan(), x > 0.0) {
            (NonFinite::Python, true, _) => "nan",
            (NonFinite::Python, false, true) => "inf",
            (NonFinite::Python, false, false) => "-inf",
            (NonFinite::Json, true, _) => "NaN",
            (NonFinite::Json, false, true) => "Infinity",
            (NonFinite::Json, false, false) => "-Infinity",
        });
        return;
    }
    // Rust's `{:e}` gives the shortest round-tripping digits, as Python's repr does:
    // `d[.ddd]e<exp>`.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if x.is_sign_negative() {
        out.push('-');
    }
    if !(-4..16).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let whole = exp as usize + 1;
        if digits.len() <= whole {
            out.push_str(&digits);
            for _ in digits.len()..whole {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            out.push_str(&digits[..whole]);
            out.push('.');
            out.push_str(&digits[whole..]);
        }
    }
}

/// Python's `repr(str)`: single quotes unless the text has a single quote and no double one,
/// backslash escapes for the quote, backslash and non-printable characters.
fn write_repr_str(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !is_printable(c) => {
                let code = u32::from(c);
                let _ = match code {
                    0..=0xff => write!(out, "\\x{code:02x}"),
                    0x100..=0xffff => write!(out, "\\u{code:04x}"),
                    _ => write!(out, "\\U{code:08x}"),
                };
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python's `str.isprintable` for the characters a chat is likely to hold: controls, the
/// separators other than the ASCII space, format characters (zero-width ones, the byte-order
/// mark), surrogates and private use. Unassigned code points, which Python also escapes, are
/// printed as they are: telling them apart needs the Unicode database.
fn is_printable(c: char) -> bool {
    !matches!(u32::from(c),
        0x00..=0x1f | 0x7f..=0xa0 | 0xad
        | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x1680 | 0x180e
        | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f
        | 0x3000 | 0xd800..=0xf8ff | 0xfeff | 0xfff9..=0xfffb
        | 0x110bd | 0x1bca0..=0x1bca3 | 0x1d173..=0x1d17a
        | 0xe0001 | 0xe0020..=0xe007f | 0xf0000..=0x10ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn float(x: f64) -> String {
        let mut out = String::new();
        write_float(&mut out, x, NonFinite::Python);
        out
    }

    #[test]
    fn floats_print_as_python_repr() {
        for (x, want) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1.5e-4, "0.00015"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (2.5e-7, "2.5e-07"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (123.456, "123.456"),
            (-3.25, "-3.25"),
            (1e300, "1e+300"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ] {
            assert_eq!(float(x), want, "{x:e}");
        }
    }

    #[test]
    fn values_print_as_python_str() {
        let value = super::super::input::value(&serde_json::json!({
            "a": [1, 2.0, "it's", "say \"hi\"", null, true, "tab\there\u{200b}"],
        }))
        .unwrap();
        assert_eq!(
            to_str(&value).unwrap(),
            r#"{'a': [1, 2.0, "it's", 'say "hi"', None, True, 'tab\there\u200b']}"#
        );
        assert_eq!(to_str(&Value::UNDEFINED).unwrap(), "");
        assert_eq!(to_str(&Value::from("plain")).unwrap(), "plain");
    }
}

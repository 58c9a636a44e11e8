//! Where a Hugging Face model directory keeps its chat template, in the order transformers
//! prefers: an explicit file, then `chat_template.jinja`, then the `chat_template` entry of
//! `tokenizer_config.json`, a string or a list of named templates of which `default` is used.

use std::io;
use std::path::Path;

use serde_json::Value as Json;

use super::TemplateError;

/// Template files larger than this are refused: real ones are a few KiB, and the whole file
/// is read into memory.
const MAX_FILE: u64 = 16 << 20;

/// The template of the model in `dir`: `explicit` when given (it must exist), else the first
/// of `dir/chat_template.jinja` and `dir/tokenizer_config.json`'s `chat_template`. `Ok(None)`
/// when the directory has none, so the caller can say the model cannot chat.
pub fn find_template(dir: &Path, explicit: Option<&Path>) -> Result<Option<String>, TemplateError> {
    if let Some(path) = explicit {
        return match read(path)? {
            Some(source) => Ok(Some(source)),
            None => Err(TemplateError::Load {
                path: path.to_owned(),
                reason: "no such file".to_owned(),
            }),
        };
    }
    if let Some(source) = read(&dir.join("chat_template.jinja"))? {
        return Ok(Some(source));
    }
    let config_path = dir.join("tokenizer_config.json");
    let Some(config) = read(&config_path)? else {
        return Ok(None);
    };
    let load_error = |reason: String| TemplateError::Load {
        path: config_path.clone(),
        reason,
    };
    let config: Json = serde_json::from_str(&config).map_err(|e| load_error(e.to_string()))?;
    match config.get("chat_template") {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(source)) => Ok(Some(source.clone())),
        Some(Json::Array(named)) => named_default(named).map_err(load_error),
        Some(_) => Err(load_error(
            "`chat_template` is neither a string nor a list".to_owned(),
        )),
    }
}

/// The `default` entry of a `[{name, template}]` list; `None` when there is no such entry
/// (transformers then asks the caller to name one, which an OpenAI request cannot).
fn named_default(named: &[Json]) -> Result<Option<String>, String> {
    for entry in named {
        let (Some(name), Some(template)) = (
            entry.get("name").and_then(Json::as_str),
            entry.get("template").and_then(Json::as_str),
        ) else {
            return Err(
                "a `chat_template` list entry lacks a string `name` or `template`".to_owned(),
            );
        };
        if name == "default" {
            return Ok(Some(template.to_owned()));
        }
    }
    Ok(None)
}

/// The file's text; `None` when there is no such file.
fn read(path: &Path) -> Result<Option<String>, TemplateError> {
    let load_error = |reason: String| TemplateError::Load {
        path: path.to_owned(),
        reason,
    };
    let size = match std::fs::metadata(path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(load_error(e.to_string())),
    };
    if size > MAX_FILE {
        return Err(load_error(format!("larger than {MAX_FILE} bytes")));
    }
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|e| load_error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "tollgate-find-template-{name}-{}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn preference_order() {
        let dir = scratch("order");
        assert_eq!(find_template(&dir, None).unwrap(), None);

        fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"chat_template": "from config"}"#,
        )
        .unwrap();
        assert_eq!(
            find_template(&dir, None).unwrap().as_deref(),
            Some("from config")
        );

        fs::write(dir.join("chat_template.jinja"), "from jinja file").unwrap();
        assert_eq!(
            find_template(&dir, None).unwrap().as_deref(),
            Some("from jinja file")
        );

        let explicit = dir.join("mine.jinja");
        fs::write(&explicit, "explicit").unwrap();
        assert_eq!(
            find_template(&dir, Some(&explicit)).unwrap().as_deref(),
            Some("explicit")
        );

        let missing = dir.join("missing.jinja");
        assert!(matches!(
            find_template(&dir, Some(&missing)),
            Err(TemplateError::Load { .. })
        ));
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn named_templates_use_default() {
        let dir = scratch("named");
        fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"chat_template": [{"name": "tool_use", "template": "tools"}, {"name": "default", "template": "plain"}]}"#,
        )
        .unwrap();
        assert_eq!(find_template(&dir, None).unwrap().as_deref(), Some("plain"));

        fs::write(
            dir.join("tokenizer_config.json"),
            r#"{"chat_template": [{"name": "tool_use", "template": "tools"}]}"#,
        )
        .unwrap();
        assert_eq!(find_template(&dir, None).unwrap(), None);

        fs::write(dir.join("tokenizer_config.json"), r#"{"chat_template": 7}"#).unwrap();
        assert!(matches!(
            find_template(&dir, None),
            Err(TemplateError::Load { .. })
        ));

        fs::write(dir.join("tokenizer_config.json"), "{not json").unwrap();
        assert!(matches!(
            find_template(&dir, None),
            Err(TemplateError::Load { .. })
        ));
        fs::remove_dir_all(dir).unwrap();
    }
}

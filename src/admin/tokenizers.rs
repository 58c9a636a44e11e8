//! `/v1/tokenizers` routes (spec 1, "Tokenizer management"): registration answers 202 at
//! once and the load runs in the background ([`crate::control::tokenizers`]); the other
//! routes read the registry. Refusals use the shapes spec 1 gives these routes: the 202
//! shape with status `failed` (409, 503), `{error: {message, type}}` (404 of get and
//! status), `{success: false, message}` (404 of delete); an unusable body is plain text
//! (415, 400, 422), as for `/workers`.

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;

use super::{json_response, Admin};
use crate::control::spec_body::is_json_content_type;
use crate::control::tokenizers::{AddError, AddRequest, Registered, Removed};
use crate::http::body::RespBody;
use crate::http::error::{respond::admin_error, respond::AdminErrorBody};
use crate::http::reply;

/// Largest body of `POST /v1/tokenizers` (a name and two paths).
pub const MAX_BODY: u64 = 16 * 1024;
/// Longest tokenizer name.
const MAX_NAME: usize = 128;
/// Longest source or template path.
const MAX_PATH: usize = 4096;

/// The body of `POST /v1/tokenizers`; unknown fields are ignored.
#[derive(Deserialize)]
struct AddBody {
    name: String,
    source: String,
    #[serde(default)]
    chat_template_path: Option<String>,
}

/// `POST /v1/tokenizers`.
pub fn create(admin: &Admin, headers: &HeaderMap, body: &[u8]) -> Response<RespBody> {
    let request = match parse(headers.get(CONTENT_TYPE), body) {
        Ok(request) => request,
        Err((status, message)) => return admin_error(status, AdminErrorBody::text(message)),
    };
    let name = request.name.clone();
    match admin.tokenizers.add(request) {
        Ok(id) => {
            let body = json!({
                "id": id,
                "status": "pending",
                "message": format!(
                    "Tokenizer '{name}' is loading; poll /v1/tokenizers/{id}/status"
                ),
            });
            reply::json(StatusCode::ACCEPTED, Bytes::from(body.to_string()))
        }
        Err(AddError::NameTaken(existing)) => admin_error(
            StatusCode::CONFLICT,
            AdminErrorBody::FailedJob {
                id: &existing.to_string(),
                message: &format!("Tokenizer '{name}' is already registered"),
            },
        ),
        Err(AddError::Unavailable(message)) => admin_error(
            StatusCode::SERVICE_UNAVAILABLE,
            // Nothing was registered, so there is no ID to report.
            AdminErrorBody::FailedJob {
                id: "",
                message: &message,
            },
        ),
    }
}

/// `GET /v1/tokenizers`.
pub fn list(admin: &Admin) -> Response<RespBody> {
    let tokenizers: Vec<_> = admin.tokenizers.list().iter().map(|t| object(t)).collect();
    json_response(StatusCode::OK, &json!({ "tokenizers": tokenizers }))
}

/// `GET /v1/tokenizers/{tokenizer_id}`: by ID or name.
pub fn get(admin: &Admin, key: Option<&str>) -> Response<RespBody> {
    let key = key.unwrap_or_default();
    match admin.tokenizers.get(key) {
        Some(tokenizer) => json_response(StatusCode::OK, &object(&tokenizer)),
        None => admin_error(
            StatusCode::NOT_FOUND,
            AdminErrorBody::Typed {
                kind: "tokenizer_not_found",
                message: &format!("Tokenizer '{key}' not found"),
            },
        ),
    }
}

/// `GET /v1/tokenizers/{tokenizer_id}/status`: a loaded tokenizer by ID or name, a job
/// under way or failed by its ID.
pub fn status(admin: &Admin, key: Option<&str>) -> Response<RespBody> {
    let key = key.unwrap_or_default();
    let Some(view) = admin.tokenizers.status(key) else {
        return admin_error(
            StatusCode::NOT_FOUND,
            AdminErrorBody::Typed {
                kind: "not_found",
                message: &format!("No tokenizer or load job '{key}'"),
            },
        );
    };
    let mut body = json!({
        "id": view.id,
        "status": view.status.as_str(),
        "message": view.message,
    });
    if let Some(size) = view.vocab_size {
        body["vocab_size"] = json!(size);
    }
    json_response(StatusCode::OK, &body)
}

/// `DELETE /v1/tokenizers/{tokenizer_id}`: by ID or name. Workers already using the
/// tokenizer keep it.
pub fn delete(admin: &Admin, key: Option<&str>) -> Response<RespBody> {
    let key = key.unwrap_or_default();
    let message = match admin.tokenizers.remove(key) {
        Some(Removed::Tokenizer(name)) => format!("Tokenizer '{name}' removed"),
        Some(Removed::Job(id)) => format!("Tokenizer load job {id} removed"),
        None => {
            return admin_error(
                StatusCode::NOT_FOUND,
                AdminErrorBody::Unsuccessful {
                    message: &format!("Tokenizer '{key}' not found"),
                },
            )
        }
    };
    json_response(
        StatusCode::OK,
        &json!({ "success": true, "message": message }),
    )
}

/// The tokenizer object, with the encoder chosen at load: `"fast-bpe"` or `"huggingface"`,
/// and `encoder_note` saying what the fast path runs or why it was not taken.
fn object(tokenizer: &Registered) -> serde_json::Value {
    let encoder = &tokenizer.language.encoder;
    json!({
        "id": tokenizer.id,
        "name": tokenizer.name,
        "source": tokenizer.source,
        "vocab_size": tokenizer.vocab_size(),
        "encoder": encoder.kind(),
        "encoder_note": encoder.note(),
    })
}

/// The registration body, or the status and text of its refusal: 415 without a JSON
/// content type, 400 for malformed JSON or unusable values, 422 for a missing field or
/// one of the wrong type.
fn parse(
    content_type: Option<&HeaderValue>,
    body: &[u8],
) -> Result<AddRequest, (StatusCode, String)> {
    if !content_type.is_some_and(|v| is_json_content_type(v.as_bytes())) {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "request body must be sent with Content-Type: application/json".into(),
        ));
    }
    let body: AddBody = serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => (StatusCode::UNPROCESSABLE_ENTITY, e.to_string()),
        _ => (StatusCode::BAD_REQUEST, format!("malformed JSON body: {e}")),
    })?;
    let bad = |message: String| (StatusCode::BAD_REQUEST, message);
    check_name(&body.name).map_err(bad)?;
    if body.source.trim().is_empty() || body.source.len() > MAX_PATH {
        return Err(bad(format!(
            "source must be a local directory or tokenizer.json path of 1 to {MAX_PATH} bytes"
        )));
    }
    let chat_template_path = body.chat_template_path.filter(|p| !p.is_empty());
    if chat_template_path
        .as_ref()
        .is_some_and(|p| p.len() > MAX_PATH)
    {
        return Err(bad(format!(
            "chat_template_path is longer than {MAX_PATH} bytes"
        )));
    }
    Ok(AddRequest {
        name: body.name,
        source: body.source,
        chat_template_path,
    })
}

/// A name must be usable as the last segment of `/v1/tokenizers/{name}` as written:
/// printable ASCII without `/`, `?`, `#`, `%`.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(format!("name must be 1 to {MAX_NAME} characters long"));
    }
    let usable = |c: char| c.is_ascii_graphic() && !matches!(c, '/' | '?' | '#' | '%');
    if !name.chars().all(usable) {
        return Err(format!(
            "name '{}' must be printable ASCII without spaces, '/', '?', '#' or '%', so that \
             /v1/tokenizers/{{name}} can address it",
            name.escape_default()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_type() -> HeaderValue {
        HeaderValue::from_static("application/json")
    }

    fn refusal(body: &str) -> StatusCode {
        parse(Some(&json_type()), body.as_bytes()).unwrap_err().0
    }

    #[test]
    fn bodies_are_checked_in_the_order_a_client_meets_them() {
        let ok = parse(
            Some(&json_type()),
            br#"{"name":"q","source":"/m","chat_template_path":"/t","extra":1}"#,
        )
        .unwrap();
        assert_eq!(ok.name, "q");
        assert_eq!(ok.chat_template_path.as_deref(), Some("/t"));
        assert_eq!(
            parse(None, br#"{"name":"q","source":"/m"}"#).unwrap_err().0,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        assert_eq!(refusal("{"), StatusCode::BAD_REQUEST);
        assert_eq!(
            refusal(r#"{"source":"/m"}"#),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            refusal(r#"{"name":1,"source":"/m"}"#),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(
            refusal(r#"{"name":"","source":"/m"}"#),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            refusal(r#"{"name":"a/b","source":"/m"}"#),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            refusal(r#"{"name":"a b","source":"/m"}"#),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(
            refusal(r#"{"name":"q","source":" "}"#),
            StatusCode::BAD_REQUEST
        );
        let null_template = parse(
            Some(&json_type()),
            br#"{"name":"q","source":"/m","chat_template_path":null}"#,
        )
        .unwrap();
        assert_eq!(null_template.chat_template_path, None);
    }
}

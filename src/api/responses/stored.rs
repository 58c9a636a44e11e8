//! The stored-response routes: `GET`, `DELETE`, `cancel` and `input_items` of
//! `/v1/responses/{response_id}`, answered from the history store (spec 2).
//!
//! Responses the gateway ran itself (gRPC engines) are stored there when `store` is
//! true; responses of HTTP workers are the workers' own and are not found here. Every
//! lookup is the caller's: another tenant's response answers exactly like an unknown one.
//! Responses never run in the background, so a stored response is over and `cancel`
//! answers why it cannot be cancelled.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::auth::gate::Tenant;
use crate::history::{History, Owner};
use crate::http::body::RespBody;
use crate::http::error::{GatewayError, StorageStep};
use crate::http::reply;
use crate::http::route::{path_param, Route};

/// The caller's space in the history store: its tenant (put on the request by the
/// data-plane authentication), or the shared space.
pub fn owner_of(head: &http::request::Parts) -> Owner {
    head.extensions
        .get::<Tenant>()
        .map_or_else(Owner::shared, |tenant| Owner::tenant(tenant.0.clone()))
}

/// Answers one stored-response route for `owner`; `path` is the request's.
pub async fn serve(
    history: &dyn History,
    owner: &Owner,
    route: Route,
    path: &str,
) -> Result<Response<RespBody>, GatewayError> {
    let not_found = GatewayError::ResponseNotFound {
        code: if route == Route::ResponseCancel {
            "response_not_found"
        } else {
            "not_found"
        },
    };
    let Some(id) = path_param(path, 2) else {
        return Err(not_found);
    };
    if route == Route::ResponseDelete {
        return match history.delete_response(owner, id).await {
            Ok(true) => Ok(json_reply(
                &json!({"id": id, "object": "response.deleted", "deleted": true}),
            )),
            Ok(false) => Err(not_found),
            Err(err) => Err(GatewayError::storage(StorageStep::Other, err)),
        };
    }
    let record = history
        .get_response(owner, id)
        .await
        .map_err(|err| GatewayError::storage(StorageStep::Other, err))?
        .ok_or(not_found)?;
    match route {
        Route::ResponseCancel => Err(GatewayError::CancelRefused {
            code: match record.status.as_str() {
                "completed" => "response_already_completed",
                "failed" => "response_already_failed",
                _ => "cancellation_not_supported",
            },
        }),
        Route::ResponseInputItems => {
            let items: Vec<Value> = serde_json::from_str(&record.input_items).map_err(|err| {
                GatewayError::storage(StorageStep::Other, format!("stored input items: {err}"))
            })?;
            let items: Vec<Value> = items.into_iter().map(with_id).collect();
            let first = items.first().map_or(Value::Null, |i| i["id"].clone());
            let last = items.last().map_or(Value::Null, |i| i["id"].clone());
            Ok(json_reply(&json!({
                "object": "list",
                "data": items,
                "first_id": first,
                "last_id": last,
                "has_more": false,
            })))
        }
        _ => Ok(reply::json(StatusCode::OK, record.object)),
    }
}

/// An item as listed: one without an id gets a generated `msg_` id (spec 2).
fn with_id(mut item: Value) -> Value {
    if let Value::Object(map) = &mut item {
        if !matches!(map.get("id"), Some(Value::String(_))) {
            let id = format!("msg_{}", uuid::Uuid::new_v4().simple());
            map.insert("id".into(), Value::String(id));
        }
    }
    item
}

fn json_reply(value: &Value) -> Response<RespBody> {
    reply::json(StatusCode::OK, value.to_string())
}

//! The errors the gateway answers itself, and the one place they become HTTP responses
//! ([`respond`]).
//!
//! Data-plane errors use the gateway envelope `{error:{type,code,message,param:null}}`,
//! where `type` is the status's reason phrase, with the code repeated in `X-GW-Error-Code`.
//! [`GatewayError::spec`] is the error table: status, code, router-metrics label and whether
//! the connection closes, one row per error. Administration refusals, whose shapes spec 1
//! leaves unshared, are built by [`respond::admin_error`]; successes by [`super::reply`].
//! This module knows no body type: the responses are built in [`respond`], so the bodies'
//! error events can render these errors without a circle.

pub mod respond;

use std::fmt;

use http::{Response, StatusCode};
use serde::Serialize;

use super::tls::TlsFailure;
use super::upload::ReadError;

/// Header carrying the gateway error code.
pub const ERROR_CODE_HEADER: &str = "x-gw-error-code";

/// Every error the gateway itself answers on the data plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayError {
    /// No routable worker for the request.
    NoAvailableWorkers,
    /// A request for a prefill worker (count_tokens under prefill/decode disaggregation)
    /// finds none ready.
    NoPrefillServers,
    /// Under `--enable-igw`: no registered worker serves the requested model (spec 2).
    ModelNotFound,
    /// The request cannot be served as asked (the gateway read it for its own pipeline).
    InvalidRequest { message: String },
    /// A Messages body that is not JSON, or lacks a required field, or has one of the wrong
    /// type (spec 2: 400 `invalid_request_error` / `json_parse_error`).
    MessagesMalformed { message: String },
    /// A Messages body that parses but breaks a rule (`max_tokens` 0, no messages,
    /// `tool_choice` without `tools`): 400 `invalid_request_error` with code 400.
    MessagesInvalid { message: String },
    /// A `/v1/responses` body that is not JSON, or lacks a required field, or has one of the
    /// wrong type (spec 2: 400 `invalid_request_error` / `json_parse_error`).
    ResponsesMalformed { message: String },
    /// A `/v1/responses` body that parses but breaks a rule (a value out of range, two
    /// fields that exclude each other): 400 `invalid_request_error` with code 400.
    ResponsesInvalid { message: String },
    /// A `/v1/messages/count_tokens` body the gateway cannot forward: plain text, as spec 2
    /// says (400 not JSON, 415 not declared JSON, 422 a field missing or mistyped).
    CountTokensBody { fault: BodyFault, message: String },
    /// The backend behind the request does not serve this endpoint at all (spec 2's 501
    /// rows: count_tokens on gRPC engines and the provider): plain text.
    NotServedByBackend {
        route: &'static str,
        backend: &'static str,
    },
    /// The model's chat template refused the conversation or failed on it.
    ChatTemplate { message: String },
    /// The prompt is longer than the context window the worker advertises.
    ContextLengthExceeded { prompt_tokens: usize, window: u32 },
    /// A prompt so long in bytes that it cannot fit the context window, whatever its
    /// tokens: refused before it is tokenized.
    PromptTooLong {
        bytes: usize,
        at_least: usize,
        window: u32,
    },
    /// The prompts being tokenized at once hold the gateway's whole budget for that, past
    /// the request's deadline.
    PromptBudgetFull,
    /// A gRPC engine reported a failed generation.
    EngineFailed { message: String },
    /// A route of the contract that this build does not serve yet.
    NotImplemented { route: &'static str },
    /// A provider's success body is not what its API promises (spec 2: `parse_error`).
    ProviderParse { message: String },
    /// None of the request's MCP servers connected (the provider backend's tool loop).
    McpConnectionFailed,
    /// The model still called MCP tools after the loop's last round.
    McpMaxIterations { rounds: usize },
    /// The request body is larger than `--max-payload-size`.
    PayloadTooLarge { limit: u64 },
    /// The worker could not be reached (refused, unreachable, connect timeout).
    UpstreamConnect,
    /// The worker dropped the connection or sent an invalid response.
    UpstreamBroken,
    /// The worker did not answer within the request timeout.
    UpstreamTimeout,
    /// The worker sent nothing for `--stream-stall-timeout-secs` (`secs`) in the middle of
    /// its response.
    UpstreamStalled { secs: u64 },
    /// The TLS handshake with an https worker failed (untrusted, wrong host, expired, ...).
    UpstreamTls { failure: TlsFailure },
    /// The worker's transport is registered but not served by this build (gRPC, ZMQ, TLS).
    UnsupportedTransport { transport: &'static str },
    /// The client's body broke off while the gateway read it (it had to look inside).
    ClientBodyBroken,
    /// The client did not finish sending its body in time: `--request-body-timeout-secs`
    /// for a body the gateway reads, `--request-body-idle-timeout-secs` of silence on any.
    ClientBodyTimeout,
    /// The request head breaks a rule of RFC 9110/9112 that hyper leaves to the
    /// application (two `Authorization` fields, a missing or repeated `Host`).
    InvalidHeaders { reason: &'static str },
    /// The request uses a transfer coding other than `chunked` (RFC 9112 §6.1: 501).
    UnsupportedTransferCoding,
    /// Routing must read this body whole, and the bytes held for all requests together
    /// would pass `--max-buffered-request-total-bytes`.
    BufferBudgetFull,
    /// Under `--dp-aware` a request chosen for a data-parallel rank must carry a JSON
    /// object, where the gateway sets `data_parallel_rank`.
    BodyNotJsonObject,
    /// A worker answered an error status that the gateway reports in its own envelope
    /// (information routes in prefill/decode mode).
    WorkerStatus { status: StatusCode },
    /// Every admission token is taken and the admission queue is full (or disabled).
    AdmissionQueueFull,
    /// The request waited `--queue-timeout-secs` in the admission queue.
    AdmissionQueueTimeout,
    /// One request's media is larger than `--multimodal-max-inflight-bytes`.
    MultimodalTooLarge { limit: u64 },
    /// The media budget stayed full for the whole wait.
    MultimodalBudgetFull,
    /// Every candidate worker is overloaded; the client should come back after
    /// `retry_after_secs` (the load-monitor interval, when reports refresh).
    OverloadShed { retry_after_secs: u64 },
    /// `previous_response_id` names no stored response of the caller (spec 2: 400).
    PreviousResponseNotFound { id: String },
    /// No such conversation (or another tenant's, or deleted): 404
    /// `conversation_not_found`, for the conversation routes and for a Responses request
    /// that names one.
    ConversationNotFound,
    /// A stored response the caller does not have: `not_found` (get, delete,
    /// input_items) or `response_not_found` (cancel), as spec 2 names them.
    ResponseNotFound { code: &'static str },
    /// `cancel` of a stored response on gRPC: it already ended, or cannot be cancelled.
    CancelRefused { code: &'static str },
    /// The history store failed (spec 2's storage codes: which step failed).
    Storage { step: StorageStep, message: String },
    /// A Responses `mcp` tool's server could not be connected or listed (spec 2: 424).
    McpServerUnreachable { label: String, reason: String },
    /// An input item the gRPC chat pipeline cannot represent (media in a message or a
    /// function output).
    ConvertRequestFailed { message: String },

    // The Conversations API (`/v1/conversations`, spec 2): bodies `{"error": <message>}`,
    // but for the structured `item_already_in_conversation`.
    /// A conversation request body that is not JSON (or not an object): 400
    /// `json_parse_error`.
    ConversationMalformed { message: String },
    /// A conversation request that breaks a rule (malformed id, too many items, unknown
    /// item type, metadata past its bounds, a bad list query): 400, code `400`.
    ConversationInvalid { message: String },
    /// The conversation is there, the item (or an `item_reference`'s item) is not.
    ConversationItemNotFound { message: String },
    /// An item whose id the conversation already holds (or twice in one request).
    ItemAlreadyInConversation,
    /// The history store failed or did not answer in time.
    StorageError { message: String },
}

/// Which use of the history store failed: spec 2 names each its own code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageStep {
    /// Reading the `previous_response_id` a request continues.
    LoadChain,
    /// Reading the conversation a request continues.
    CheckConversation,
    /// Any other read or write.
    Other,
}

impl GatewayError {
    /// The history store failed at `step`; `err` names what failed (never a password: the
    /// store's errors are written so).
    pub fn storage(step: StorageStep, err: impl fmt::Display) -> GatewayError {
        GatewayError::Storage {
            step,
            message: err.to_string(),
        }
    }
}

impl StorageStep {
    pub fn code(self) -> &'static str {
        match self {
            StorageStep::LoadChain => "load_previous_response_chain_failed",
            StorageStep::CheckConversation => "check_conversation_failed",
            StorageStep::Other => "storage_error",
        }
    }
}

/// Why a count_tokens body was refused, which decides its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFault {
    /// 400: not JSON.
    Syntax,
    /// 415: not sent as `application/json`.
    MediaType,
    /// 422: JSON, but a required field is missing or has the wrong type.
    Field,
}

/// The body an error is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The gateway envelope `{error:{type,code,message,param:null}}`.
    Envelope,
    /// `{error:{message,type:"invalid_request_error",code}}` with `code` the string
    /// `json_parse_error` (spec 2's parse failures).
    ParseError,
    /// `{error:{message,type:"invalid_request_error",code:400}}` (spec 2's rule failures:
    /// the code is the number 400).
    RuleBroken,
    /// The message as `text/plain`.
    PlainText,
    /// `{error: <message>}`: the Conversations API's errors (spec 2).
    BareMessage,
    /// `{error:{message,type:"invalid_request_error",param,code}}` with `code` the error's
    /// code: the Conversations API's `item_already_in_conversation`.
    Structured { param: &'static str },
}

/// What the gateway does with one error: a row of the error table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorSpec {
    pub status: StatusCode,
    /// The machine-readable code (envelope `code`, `X-GW-Error-Code`, metrics `error_code`).
    pub code: &'static str,
    /// The `error_type` of `gw_router_request_errors_total`; `None` for refusals that turn
    /// a request away before routing (admission, the request-buffer budget).
    pub router_error: Option<&'static str>,
    /// Whether the connection closes after the answer: the request body was not read to
    /// its end, so where the next request would start is unknown.
    pub closes: bool,
    /// The body it is written as.
    pub shape: Shape,
}

/// `router_error` labels (spec 3, `gw_router_request_errors_total`).
const NO_WORKERS: Option<&str> = Some("no_workers");
const TIMEOUT: Option<&str> = Some("timeout");
const BACKEND: Option<&str> = Some("backend_error");
const VALIDATION: Option<&str> = Some("validation_error");
const INTERNAL: Option<&str> = Some("internal_error");
const BEFORE_ROUTING: Option<&str> = None;
/// `closes` values, named so a row reads as a sentence.
const CLOSE: bool = true;
const KEEP: bool = false;

impl GatewayError {
    /// The error table: every fact about an error but its message, in one row:
    /// (status, code, router-metrics label, whether the connection closes).
    pub fn spec(&self) -> ErrorSpec {
        use GatewayError as G;
        use StatusCode as S;
        #[rustfmt::skip]
        let (status, code, router_error, closes) = match self {
            G::NoAvailableWorkers =>          (S::SERVICE_UNAVAILABLE, "no_available_workers",            NO_WORKERS,     KEEP),
            G::NoPrefillServers =>            (S::SERVICE_UNAVAILABLE, "no_prefill_servers",              NO_WORKERS,     KEEP),
            G::ModelNotFound =>               (S::NOT_FOUND,           "model_not_found",                 NO_WORKERS,     KEEP),
            G::OverloadShed { .. } =>         (S::SERVICE_UNAVAILABLE, "worker_overload_protection_shed", NO_WORKERS,     KEEP),
            G::NotImplemented { .. } =>       (S::NOT_IMPLEMENTED,     "not_implemented",                 INTERNAL,       KEEP),
            G::ProviderParse { .. } =>        (S::BAD_GATEWAY,         "parse_error",                     BACKEND,        KEEP),
            G::McpConnectionFailed =>         (S::BAD_GATEWAY,         "mcp_connection_failed",           BACKEND,        KEEP),
            G::McpMaxIterations { .. } =>     (S::BAD_GATEWAY,         "mcp_max_iterations",              BACKEND,        KEEP),
            G::InvalidRequest { .. } =>       (S::BAD_REQUEST,         "invalid_request",                 VALIDATION,     KEEP),
            G::MessagesMalformed { .. } =>    (S::BAD_REQUEST,         "json_parse_error",                VALIDATION,     KEEP),
            G::MessagesInvalid { .. } =>      (S::BAD_REQUEST,         "400",                             VALIDATION,     KEEP),
            G::ResponsesMalformed { .. } =>   (S::BAD_REQUEST,         "json_parse_error",                VALIDATION,     KEEP),
            G::ResponsesInvalid { .. } =>     (S::BAD_REQUEST,         "400",                             VALIDATION,     KEEP),
            G::CountTokensBody { fault, .. } => (fault.status(),       "invalid_request_body",            VALIDATION,     KEEP),
            G::NotServedByBackend { .. } =>   (S::NOT_IMPLEMENTED,     "not_implemented",                 INTERNAL,       KEEP),
            G::ChatTemplate { .. } =>         (S::BAD_REQUEST,         "chat_template_error",             VALIDATION,     KEEP),
            G::ContextLengthExceeded { .. } => (S::BAD_REQUEST,        "context_length_exceeded",         VALIDATION,     KEEP),
            G::PromptTooLong { .. } =>        (S::BAD_REQUEST,         "context_length_exceeded",         VALIDATION,     KEEP),
            G::PromptBudgetFull =>            (S::SERVICE_UNAVAILABLE, "prompt_budget_full",              BEFORE_ROUTING, KEEP),
            G::EngineFailed { .. } =>         (S::BAD_GATEWAY,         "worker_generation_failed",        BACKEND,        KEEP),
            G::UpstreamConnect =>             (S::BAD_GATEWAY,         "worker_connect_failed",           BACKEND,        KEEP),
            G::UpstreamBroken =>              (S::BAD_GATEWAY,         "worker_connection_error",         BACKEND,        KEEP),
            G::UpstreamTls { .. } =>          (S::BAD_GATEWAY,         "worker_tls_failed",               BACKEND,        KEEP),
            G::UnsupportedTransport { .. } => (S::BAD_GATEWAY,         "worker_transport_unsupported",    BACKEND,        KEEP),
            G::WorkerStatus { status } =>     (*status,                "upstream_error",                  BACKEND,        KEEP),
            G::UpstreamTimeout =>             (S::GATEWAY_TIMEOUT,     "worker_timeout",                  TIMEOUT,        KEEP),
            G::UpstreamStalled { .. } =>      (S::GATEWAY_TIMEOUT,     "worker_timeout",                  TIMEOUT,        KEEP),
            G::PayloadTooLarge { .. } =>      (S::PAYLOAD_TOO_LARGE,   "payload_too_large",               VALIDATION,     CLOSE),
            G::ClientBodyBroken =>            (S::BAD_REQUEST,         "invalid_request_body",            VALIDATION,     CLOSE),
            G::BodyNotJsonObject =>           (S::BAD_REQUEST,         "invalid_request_body",            VALIDATION,     KEEP),
            G::ClientBodyTimeout =>           (S::REQUEST_TIMEOUT,     "request_timeout",                 VALIDATION,     CLOSE),
            G::InvalidHeaders { .. } =>       (S::BAD_REQUEST,         "invalid_request_headers",         VALIDATION,     CLOSE),
            G::UnsupportedTransferCoding =>   (S::NOT_IMPLEMENTED,     "unsupported_transfer_coding",     VALIDATION,     CLOSE),
            G::BufferBudgetFull =>            (S::SERVICE_UNAVAILABLE, "request_buffer_budget_full",      BEFORE_ROUTING, CLOSE),
            G::AdmissionQueueFull =>          (S::TOO_MANY_REQUESTS,   "admission_queue_full",            BEFORE_ROUTING, KEEP),
            G::AdmissionQueueTimeout =>       (S::SERVICE_UNAVAILABLE, "admission_queue_timeout",         BEFORE_ROUTING, KEEP),
            G::MultimodalTooLarge { .. } =>   (S::PAYLOAD_TOO_LARGE,   "multimodal_payload_too_large",    BEFORE_ROUTING, KEEP),
            G::MultimodalBudgetFull =>        (S::TOO_MANY_REQUESTS,   "multimodal_inflight_budget",      BEFORE_ROUTING, KEEP),
            G::PreviousResponseNotFound { .. } => (S::BAD_REQUEST,     "previous_response_not_found",     VALIDATION,     KEEP),
            G::ResponseNotFound { code } =>   (S::NOT_FOUND,           *code,                             VALIDATION,     KEEP),
            G::CancelRefused { code } =>      (S::BAD_REQUEST,         *code,                             VALIDATION,     KEEP),
            G::Storage { step, .. } =>        (S::INTERNAL_SERVER_ERROR, step.code(),                     INTERNAL,       KEEP),
            G::ConvertRequestFailed { .. } => (S::BAD_REQUEST,         "convert_request_failed",          VALIDATION,     KEEP),
            G::McpServerUnreachable { .. } => (S::FAILED_DEPENDENCY,   "connect_mcp_server_failed",       BACKEND,        KEEP),
            // Conversations never reach routing.
            G::ConversationMalformed { .. } => (S::BAD_REQUEST,        "json_parse_error",                BEFORE_ROUTING, KEEP),
            G::ConversationInvalid { .. } =>  (S::BAD_REQUEST,         "400",                             BEFORE_ROUTING, KEEP),
            G::ConversationNotFound =>        (S::NOT_FOUND,           "conversation_not_found",          BEFORE_ROUTING, KEEP),
            G::ConversationItemNotFound { .. } => (S::NOT_FOUND,       "not_found",                       BEFORE_ROUTING, KEEP),
            G::ItemAlreadyInConversation =>   (S::BAD_REQUEST,         "item_already_in_conversation",    BEFORE_ROUTING, KEEP),
            G::StorageError { .. } =>         (S::INTERNAL_SERVER_ERROR, "storage_error",                 BEFORE_ROUTING, KEEP),
        };
        let shape = match self {
            G::MessagesMalformed { .. } | G::ResponsesMalformed { .. } => Shape::ParseError,
            G::MessagesInvalid { .. } | G::ResponsesInvalid { .. } => Shape::RuleBroken,
            G::CountTokensBody { .. } | G::NotServedByBackend { .. } => Shape::PlainText,
            G::ItemAlreadyInConversation => Shape::Structured { param: "items" },
            G::ConversationMalformed { .. }
            | G::ConversationInvalid { .. }
            | G::ConversationNotFound
            | G::ConversationItemNotFound { .. }
            | G::StorageError { .. } => Shape::BareMessage,
            _ => Shape::Envelope,
        };
        ErrorSpec {
            status,
            code,
            router_error,
            closes,
            shape,
        }
    }

    pub fn status(&self) -> StatusCode {
        self.spec().status
    }

    /// The machine-readable code (envelope `code`, `X-GW-Error-Code`, metrics `error_code`).
    pub fn code(&self) -> &'static str {
        self.spec().code
    }

    /// The `error_type` of `gw_router_request_errors_total`, or `None` for a refusal
    /// before routing.
    pub fn router_error(&self) -> Option<&'static str> {
        self.spec().router_error
    }

    /// The answer to a client body that could not be read, for a route whose body limit
    /// is `limit`: the one mapping of [`ReadError`], for data and administration routes.
    pub fn from_read(err: ReadError, limit: u64) -> GatewayError {
        match err {
            ReadError::TooLarge => GatewayError::PayloadTooLarge { limit },
            ReadError::Broken => GatewayError::ClientBodyBroken,
            ReadError::TooSlow => GatewayError::ClientBodyTimeout,
        }
    }
}

impl fmt::Display for GatewayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GatewayError::NoAvailableWorkers => f.write_str("no available workers"),
            GatewayError::NoPrefillServers => f.write_str("no prefill worker is available"),
            // The model is not repeated: it is the client's string, of any length.
            GatewayError::ModelNotFound => f.write_str("no worker serves the requested model"),
            GatewayError::InvalidRequest { message }
            | GatewayError::MessagesMalformed { message }
            | GatewayError::MessagesInvalid { message }
            | GatewayError::ResponsesMalformed { message }
            | GatewayError::ResponsesInvalid { message }
            | GatewayError::CountTokensBody { message, .. }
            | GatewayError::ConversationMalformed { message }
            | GatewayError::ConversationInvalid { message }
            | GatewayError::ConversationItemNotFound { message }
            | GatewayError::StorageError { message } => f.write_str(message),
            GatewayError::ConversationNotFound => f.write_str("Conversation not found"),
            GatewayError::ItemAlreadyInConversation => f.write_str("Item already in conversation"),
            GatewayError::NotServedByBackend { route, backend } => {
                write!(f, "{route} is not served by {backend} backends")
            }
            GatewayError::ChatTemplate { message } => write!(f, "chat template: {message}"),
            GatewayError::ContextLengthExceeded {
                prompt_tokens,
                window,
            } => write!(
                f,
                "the prompt is {prompt_tokens} tokens; the model's context window is {window}"
            ),
            GatewayError::PromptTooLong {
                bytes,
                at_least,
                window,
            } => write!(
                f,
                "the prompt's {bytes} bytes are at least {at_least} tokens; the model's \
                 context window is {window}"
            ),
            GatewayError::PromptBudgetFull => f.write_str(
                "the gateway is tokenizing too many prompts right now; retry later",
            ),
            GatewayError::EngineFailed { message } => {
                write!(f, "the engine failed the generation: {message}")
            }
            GatewayError::NotImplemented { route } => {
                write!(f, "{route} is not implemented by this gateway yet")
            }
            GatewayError::ProviderParse { message } => {
                write!(f, "the provider's response could not be parsed: {message}")
            }
            GatewayError::McpConnectionFailed => {
                f.write_str("none of the request's MCP servers could be connected")
            }
            GatewayError::McpMaxIterations { rounds } => write!(
                f,
                "the model was still calling MCP tools after {rounds} rounds"
            ),
            GatewayError::PayloadTooLarge { limit } => {
                write!(
                    f,
                    "request body exceeds the maximum payload size of {limit} bytes"
                )
            }
            GatewayError::UpstreamConnect => f.write_str("could not connect to the worker"),
            GatewayError::UpstreamTls { failure } => f.write_str(failure.describe()),
            GatewayError::UpstreamBroken => {
                f.write_str("the worker closed the connection or sent an invalid response")
            }
            GatewayError::UpstreamTimeout => {
                f.write_str("the worker did not answer within the request timeout")
            }
            GatewayError::UpstreamStalled { secs } => {
                write!(f, "the worker sent nothing for {secs} s in the middle of the response")
            }
            GatewayError::UnsupportedTransport { transport } => {
                write!(f, "{transport} workers are not served by this gateway yet")
            }
            GatewayError::ClientBodyBroken => f.write_str("the request body broke off"),
            GatewayError::BodyNotJsonObject => f.write_str(
                "the request body must be a JSON object: this gateway (--dp-aware) sets \
                 data_parallel_rank in it",
            ),
            GatewayError::ClientBodyTimeout => {
                f.write_str("the request body did not arrive in time")
            }
            GatewayError::InvalidHeaders { reason } => write!(f, "invalid request headers: {reason}"),
            GatewayError::UnsupportedTransferCoding => {
                f.write_str("only the chunked transfer coding is supported")
            }
            GatewayError::BufferBudgetFull => f.write_str(
                "the gateway holds too many request bodies right now; retry later",
            ),
            GatewayError::WorkerStatus { status } => {
                write!(f, "the worker answered {}", status.as_u16())
            }
            GatewayError::PreviousResponseNotFound { id } => {
                write!(f, "previous response {id:?} not found")
            }
            GatewayError::ResponseNotFound { .. } => f.write_str("response not found"),
            GatewayError::CancelRefused { code } => f.write_str(match *code {
                "response_already_completed" => "the response is already completed",
                "response_already_failed" => "the response already failed",
                _ => "this response cannot be cancelled: it is not running in the background",
            }),
            GatewayError::Storage { message, .. } => write!(f, "history store: {message}"),
            GatewayError::ConvertRequestFailed { message } => f.write_str(message),
            GatewayError::McpServerUnreachable { label, reason } => {
                write!(f, "the MCP server {label:?} could not be connected: {reason}")
            }
            GatewayError::AdmissionQueueFull => f.write_str(
                "too many requests in flight and the admission queue is full; retry later",
            ),
            GatewayError::AdmissionQueueTimeout => {
                f.write_str("the request waited too long in the admission queue")
            }
            GatewayError::MultimodalTooLarge { limit } => write!(
                f,
                "the request's media exceeds the in-flight media budget of {limit} bytes"
            ),
            GatewayError::MultimodalBudgetFull => {
                f.write_str("the in-flight media budget is full; retry later")
            }
            GatewayError::OverloadShed { retry_after_secs } => write!(
                f,
                "every worker that could serve this request is overloaded; retry after {retry_after_secs} s"
            ),
        }
    }
}

impl std::error::Error for GatewayError {}

impl BodyFault {
    pub fn status(self) -> StatusCode {
        match self {
            BodyFault::Syntax => StatusCode::BAD_REQUEST,
            BodyFault::MediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            BodyFault::Field => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Inner<'a>,
}

#[derive(Serialize)]
struct Inner<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    code: &'a str,
    message: &'a str,
    param: Option<()>,
}

/// The gateway error code of a response, set by [`error_response`] (the one writer of
/// gateway errors) in the response's extensions, so the HTTP metrics learn the code
/// without reading back the response's own `X-GW-Error-Code` header. A response without
/// it (a success, a relayed worker answer, an administration refusal) has no code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCode(pub &'static str);

impl ErrorCode {
    /// The code `resp` carries, or `""` (the metrics label of "no gateway error").
    pub fn of<B>(resp: &Response<B>) -> &'static str {
        resp.extensions().get::<ErrorCode>().map_or("", |c| c.0)
    }
}

/// The gateway envelope `{error:{type,code,message,param:null}}` of `err`, as JSON: the
/// body of [`error_response`], and the payload of the terminal event that ends a relayed
/// OpenAI-style stream which broke off (`super::body`).
pub fn envelope_json(err: &GatewayError) -> Vec<u8> {
    let spec = err.spec();
    let message = err.to_string();
    serde_json::to_vec(&Envelope {
        error: Inner {
            kind: spec.status.canonical_reason().unwrap_or("Error"),
            code: spec.code,
            message: &message,
            param: None,
        },
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use http::header::{ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER};

    use super::respond::{
        admin_error, error_response, method_not_allowed, not_found, AdminErrorBody,
    };
    use super::*;
    use crate::http::body::RespBody;
    use crate::http::reply;

    #[test]
    fn envelope_has_every_field() {
        let resp = error_response(&GatewayError::NoAvailableWorkers);
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()[ERROR_CODE_HEADER], "no_available_workers");
        let body = resp.into_body().into_full().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["type"], "Service Unavailable");
        assert_eq!(v["error"]["code"], "no_available_workers");
        assert!(v["error"]["param"].is_null());
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no available"));
    }

    #[test]
    fn admission_and_overload_errors_have_their_codes() {
        for (err, status, code) in [
            (
                GatewayError::AdmissionQueueFull,
                429,
                "admission_queue_full",
            ),
            (
                GatewayError::AdmissionQueueTimeout,
                503,
                "admission_queue_timeout",
            ),
            (
                GatewayError::MultimodalTooLarge { limit: 5 },
                413,
                "multimodal_payload_too_large",
            ),
            (
                GatewayError::MultimodalBudgetFull,
                429,
                "multimodal_inflight_budget",
            ),
            (
                GatewayError::InvalidHeaders { reason: "x" },
                400,
                "invalid_request_headers",
            ),
            (
                GatewayError::UnsupportedTransferCoding,
                501,
                "unsupported_transfer_coding",
            ),
            (
                GatewayError::BufferBudgetFull,
                503,
                "request_buffer_budget_full",
            ),
        ] {
            let resp = error_response(&err);
            assert_eq!(resp.status(), status);
            assert_eq!(resp.headers()[ERROR_CODE_HEADER], code);
            assert_eq!(ErrorCode::of(&resp), code);
            assert!(!resp.headers().contains_key(RETRY_AFTER));
        }
        let resp = error_response(&GatewayError::OverloadShed {
            retry_after_secs: 10,
        });
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()[RETRY_AFTER], "10");
        assert_eq!(
            resp.headers()[ERROR_CODE_HEADER],
            "worker_overload_protection_shed"
        );
    }

    #[test]
    fn payload_too_large_closes() {
        let resp = error_response(&GatewayError::PayloadTooLarge { limit: 10 });
        assert_eq!(resp.status(), 413);
        assert_eq!(resp.headers()[CONNECTION], "close");
    }

    #[test]
    fn the_code_rides_in_the_extensions_of_errors_only() {
        let resp = error_response(&GatewayError::UpstreamTimeout);
        assert_eq!(ErrorCode::of(&resp), "worker_timeout");
        assert_eq!(ErrorCode::of(&reply::empty(StatusCode::OK)), "");
        let refusal = admin_error(StatusCode::FORBIDDEN, AdminErrorBody::text("no"));
        assert_eq!(ErrorCode::of(&refusal), "");
        assert!(!refusal.headers().contains_key(ERROR_CODE_HEADER));
    }

    #[test]
    fn router_labels_and_closing_follow_the_table() {
        assert_eq!(
            GatewayError::NoAvailableWorkers.router_error(),
            Some("no_workers")
        );
        assert_eq!(
            GatewayError::UpstreamTimeout.router_error(),
            Some("timeout")
        );
        assert_eq!(GatewayError::AdmissionQueueFull.router_error(), None);
        assert_eq!(GatewayError::BufferBudgetFull.router_error(), None);
        let worker = GatewayError::WorkerStatus {
            status: StatusCode::IM_A_TEAPOT,
        };
        assert_eq!(worker.status(), StatusCode::IM_A_TEAPOT);
        assert_eq!(worker.router_error(), Some("backend_error"));
        // An unread body closes the connection; a read one that is not an object does not.
        assert!(!error_response(&GatewayError::BodyNotJsonObject)
            .headers()
            .contains_key(CONNECTION));
        assert_eq!(
            error_response(&GatewayError::ClientBodyBroken).headers()[CONNECTION],
            "close"
        );
    }

    #[test]
    fn provider_backend_errors() {
        let unserved = error_response(&GatewayError::NotServedByBackend {
            route: "/v1/chat/completions",
            backend: "Anthropic provider",
        });
        assert_eq!(unserved.status(), 501);
        assert_eq!(
            unserved.headers()[CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
        let text = unserved.into_body().into_full().unwrap();
        assert!(text.starts_with(b"/v1/chat/completions is not served"));

        let parse = error_response(&GatewayError::ProviderParse {
            message: "missing field `content`".into(),
        });
        assert_eq!(parse.status(), 502);
        assert_eq!(parse.headers()[ERROR_CODE_HEADER], "parse_error");
        assert_eq!(ErrorCode::of(&parse), "parse_error");
        let body: serde_json::Value =
            serde_json::from_slice(&parse.into_body().into_full().unwrap()).unwrap();
        assert_eq!(body["error"]["code"], "parse_error");
        assert_eq!(body["error"]["type"], "Bad Gateway");
    }

    #[test]
    fn read_errors_map_once() {
        assert_eq!(
            GatewayError::from_read(ReadError::TooLarge, 7),
            GatewayError::PayloadTooLarge { limit: 7 }
        );
        assert_eq!(
            GatewayError::from_read(ReadError::Broken, 7),
            GatewayError::ClientBodyBroken
        );
        assert_eq!(
            GatewayError::from_read(ReadError::TooSlow, 7),
            GatewayError::ClientBodyTimeout
        );
    }

    #[test]
    fn conversation_errors_have_their_two_shapes() {
        let body = |resp: Response<RespBody>| {
            let bytes = resp.into_body().into_full().unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()
        };
        let missing = error_response(&GatewayError::ConversationNotFound);
        assert_eq!(missing.status(), 404);
        assert_eq!(
            missing.headers()[ERROR_CODE_HEADER],
            "conversation_not_found"
        );
        assert_eq!(
            body(missing),
            serde_json::json!({"error": "Conversation not found"})
        );
        let invalid = error_response(&GatewayError::ConversationInvalid {
            message: "bad id".into(),
        });
        assert_eq!(invalid.status(), 400);
        assert_eq!(invalid.headers()[ERROR_CODE_HEADER], "400");
        assert_eq!(body(invalid), serde_json::json!({"error": "bad id"}));
        let store = error_response(&GatewayError::StorageError {
            message: "down".into(),
        });
        assert_eq!(store.status(), 500);
        assert_eq!(store.headers()[ERROR_CODE_HEADER], "storage_error");
        let taken = error_response(&GatewayError::ItemAlreadyInConversation);
        assert_eq!(taken.status(), 400);
        assert_eq!(
            body(taken),
            serde_json::json!({"error": {"message": "Item already in conversation",
                "type": "invalid_request_error", "param": "items",
                "code": "item_already_in_conversation"}})
        );
    }

    #[test]
    fn method_not_allowed_lists_the_methods() {
        let resp = method_not_allowed("GET, HEAD");
        assert_eq!(resp.status(), 405);
        assert_eq!(resp.headers()[ALLOW], "GET, HEAD");
        assert_eq!(not_found().status(), 404);
    }

    #[test]
    fn admin_refusals_keep_their_three_shapes() {
        let coded = admin_error(
            StatusCode::NOT_FOUND,
            AdminErrorBody::Coded {
                code: "WORKER_NOT_FOUND",
                message: "gone",
            },
        );
        assert_eq!(coded.headers()[CONTENT_TYPE], "application/json");
        let body = coded.into_body().into_full().unwrap();
        assert_eq!(&body[..], br#"{"error":"gone","code":"WORKER_NOT_FOUND"}"#);

        let text = admin_error(
            StatusCode::SERVICE_UNAVAILABLE,
            AdminErrorBody::text(format!("No {}", "models")),
        );
        assert_eq!(text.status(), 503);
        assert_eq!(text.headers()[CONTENT_TYPE], "text/plain; charset=utf-8");
        assert_eq!(&text.into_body().into_full().unwrap()[..], b"No models");

        let empty = admin_error(StatusCode::UNAUTHORIZED, AdminErrorBody::Empty);
        assert_eq!(empty.status(), 401);
        assert!(empty.into_body().into_full().unwrap().is_empty());
    }

    #[test]
    fn tokenizer_refusals_have_their_shapes() {
        let body = |resp: Response<RespBody>| {
            assert_eq!(resp.headers()[CONTENT_TYPE], "application/json");
            resp.into_body().into_full().unwrap()
        };
        let typed = AdminErrorBody::Typed {
            kind: "not_found",
            message: "gone",
        };
        assert_eq!(
            &body(admin_error(StatusCode::NOT_FOUND, typed))[..],
            br#"{"error":{"message":"gone","type":"not_found"}}"#
        );
        let job = AdminErrorBody::FailedJob {
            id: "x",
            message: "taken",
        };
        assert_eq!(
            &body(admin_error(StatusCode::CONFLICT, job))[..],
            br#"{"id":"x","status":"failed","message":"taken"}"#
        );
        let removal = AdminErrorBody::Unsuccessful { message: "gone" };
        assert_eq!(
            &body(admin_error(StatusCode::NOT_FOUND, removal))[..],
            br#"{"success":false,"message":"gone"}"#
        );
        let parse = AdminErrorBody::Failed { message: "bad" };
        assert_eq!(
            &body(admin_error(StatusCode::BAD_REQUEST, parse))[..],
            br#"{"error":"bad","success":false}"#
        );
    }
}

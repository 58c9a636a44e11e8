//! The route table of the main listener (and the one route of the metrics listener).
//!
//! [`match_route`] is a hand-written matcher: it walks the path segment by segment with
//! nested `match`es on string slices, so it needs no allocation, no hashing and no regex.
//! A path first resolves to a resource (one path template); the method then picks the
//! [`Route`] or yields [`RouteMatch::MethodNotAllowed`].
//!
//! Rules:
//! - Paths are case-sensitive and must start with `/`; the caller passes `uri.path()` (no
//!   query string). An empty segment anywhere (`//`, a trailing `/`) is [`RouteMatch::NotFound`].
//! - A path parameter is one non-empty segment; the matcher does not validate it (handlers
//!   do, e.g. a non-UUID `worker_id` gets 400). The RL `{path}` parameter is the rest of the
//!   path: one or more non-empty segments.
//! - `HEAD` matches wherever `GET` does (as `GET` routes do in common HTTP frameworks; hyper
//!   drops the response body of a `HEAD` request).
//! - `/metrics` is served only by the metrics listener ([`match_metrics_route`]); `/ha/*`
//!   (removed in v1.5.0) is unknown.

use http::Method;

/// Outcome of matching a request line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteMatch {
    Found(Route),
    /// The path is a known template but not for this method: 405.
    MethodNotAllowed,
    /// No template matches: a bare 404, not recorded in HTTP metrics.
    NotFound,
}

/// Authentication group of a route (spec 1, "Route groups").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteGroup {
    /// No authentication.
    Public,
    /// Inference and utility routes: `--api-key` or tenant keys.
    DataPlane,
    /// Administration: control-plane keys / JWT with the admin role, or `--api-key`.
    ControlPlane,
}

/// The `endpoint` label of the router metrics (spec 3, "Router").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    Chat,
    Generate,
    Completions,
    Responses,
    Messages,
    Embeddings,
    Classify,
    Rerank,
    AudioTranscriptions,
    Realtime,
    RealtimeSessions,
    RealtimeClientSecrets,
    RealtimeTranscription,
    Other,
}

impl Endpoint {
    pub const ALL: &'static [Endpoint] = &[
        Endpoint::Chat,
        Endpoint::Generate,
        Endpoint::Completions,
        Endpoint::Responses,
        Endpoint::Messages,
        Endpoint::Embeddings,
        Endpoint::Classify,
        Endpoint::Rerank,
        Endpoint::AudioTranscriptions,
        Endpoint::Realtime,
        Endpoint::RealtimeSessions,
        Endpoint::RealtimeClientSecrets,
        Endpoint::RealtimeTranscription,
        Endpoint::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Generate => "generate",
            Endpoint::Completions => "completions",
            Endpoint::Responses => "responses",
            Endpoint::Messages => "messages",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Classify => "classify",
            Endpoint::Rerank => "rerank",
            Endpoint::AudioTranscriptions => "audio_transcriptions",
            Endpoint::Realtime => "realtime",
            Endpoint::RealtimeSessions => "realtime_sessions",
            Endpoint::RealtimeClientSecrets => "realtime_client_secrets",
            Endpoint::RealtimeTranscription => "realtime_transcription",
            Endpoint::Other => "other",
        }
    }
}

/// Declares [`Route`] and its per-variant facts from one table, so `ALL`, the templates,
/// methods, groups, endpoints and upstream paths cannot disagree about the variant list.
macro_rules! route_table {
    ($(
        $(#[$doc:meta])*
        $name:ident = $method:ident $template:literal, $group:ident, $endpoint:ident, $upstream:expr;
    )*) => {
        /// One variant per (method, path template) of the spec.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Route {
            $( $(#[$doc])* $name, )*
        }

        impl Route {
            /// Every route, in table order.
            pub const ALL: &'static [Route] = &[ $( Route::$name, )* ];

            /// The path template, e.g. `/workers/{worker_id}`: the metrics `path` label.
            pub fn template(self) -> &'static str {
                match self { $( Route::$name => $template, )* }
            }

            /// The method the route is declared with (`HEAD` requests match `GET` routes).
            pub fn method(self) -> Method {
                match self { $( Route::$name => Method::$method, )* }
            }

            /// Authentication group.
            pub fn group(self) -> RouteGroup {
                match self { $( Route::$name => RouteGroup::$group, )* }
            }

            /// The router metrics `endpoint` label.
            pub fn endpoint(self) -> Endpoint {
                match self { $( Route::$name => Endpoint::$endpoint, )* }
            }

            /// For routes forwarded verbatim to an HTTP worker: the worker path.
            pub fn upstream_path(self) -> Option<&'static str> {
                match self { $( Route::$name => $upstream, )* }
            }
        }
    };
}

route_table! {
    // Public.
    /// `GET /health`: same as `/liveness`.
    Health = GET "/health", Public, Other, None;
    Liveness = GET "/liveness", Public, Other, None;
    Readiness = GET "/readiness", Public, Other, None;
    HealthGenerate = GET "/health_generate", Public, Other, Some("/health_generate");
    EngineMetrics = GET "/engine_metrics", Public, Other, None;
    Loads = GET "/loads", Public, Other, None;
    Models = GET "/v1/models", Public, Other, None;
    GetModelInfo = GET "/get_model_info", Public, Other, Some("/get_model_info");
    GetServerInfo = GET "/get_server_info", Public, Other, Some("/get_server_info");
    /// `GET /metrics`, on the metrics listener only.
    Metrics = GET "/metrics", Public, Other, None;

    // Data plane.
    Tokenize = POST "/v1/tokenize", DataPlane, Other, Some("/v1/tokenize");
    Detokenize = POST "/v1/detokenize", DataPlane, Other, Some("/v1/detokenize");
    Generate = POST "/generate", DataPlane, Generate, Some("/generate");
    Rerank = POST "/rerank", DataPlane, Rerank, Some("/rerank");
    RerankV1 = POST "/v1/rerank", DataPlane, Rerank, Some("/v1/rerank");
    Classify = POST "/v1/classify", DataPlane, Classify, Some("/v1/classify");
    Embeddings = POST "/v1/embeddings", DataPlane, Embeddings, Some("/v1/embeddings");
    Interactions = POST "/v1/interactions", DataPlane, Other, None;
    ChatCompletions = POST "/v1/chat/completions", DataPlane, Chat, Some("/v1/chat/completions");
    Completions = POST "/v1/completions", DataPlane, Completions, Some("/v1/completions");
    AudioTranscriptions = POST "/v1/audio/transcriptions", DataPlane, AudioTranscriptions,
        Some("/v1/audio/transcriptions");
    /// `GET /v1/realtime`: WebSocket upgrade.
    RealtimeWebsocket = GET "/v1/realtime", DataPlane, Realtime, None;
    RealtimeSessions = POST "/v1/realtime/sessions", DataPlane, RealtimeSessions, None;
    RealtimeClientSecrets = POST "/v1/realtime/client_secrets", DataPlane,
        RealtimeClientSecrets, None;
    RealtimeTranscriptionSessions = POST "/v1/realtime/transcription_sessions", DataPlane,
        RealtimeTranscription, None;
    /// `POST /v1/realtime/calls`: WebRTC call setup.
    RealtimeCalls = POST "/v1/realtime/calls", DataPlane, Realtime, None;
    Messages = POST "/v1/messages", DataPlane, Messages, Some("/v1/messages");
    MessagesCountTokens = POST "/v1/messages/count_tokens", DataPlane, Messages,
        Some("/v1/messages/count_tokens");
    ResponsesCreate = POST "/v1/responses", DataPlane, Responses, Some("/v1/responses");
    ResponseGet = GET "/v1/responses/{response_id}", DataPlane, Responses, None;
    ResponseCancel = POST "/v1/responses/{response_id}/cancel", DataPlane, Responses, None;
    ResponseDelete = DELETE "/v1/responses/{response_id}", DataPlane, Responses, None;
    ResponseInputItems = GET "/v1/responses/{response_id}/input_items", DataPlane, Responses,
        None;
    ConversationsCreate = POST "/v1/conversations", DataPlane, Other, None;
    ConversationGet = GET "/v1/conversations/{conversation_id}", DataPlane, Other, None;
    ConversationUpdate = POST "/v1/conversations/{conversation_id}", DataPlane, Other, None;
    ConversationDelete = DELETE "/v1/conversations/{conversation_id}", DataPlane, Other, None;
    ConversationItemsList = GET "/v1/conversations/{conversation_id}/items", DataPlane, Other,
        None;
    ConversationItemsCreate = POST "/v1/conversations/{conversation_id}/items", DataPlane,
        Other, None;
    ConversationItemGet = GET "/v1/conversations/{conversation_id}/items/{item_id}", DataPlane,
        Other, None;
    ConversationItemDelete = DELETE "/v1/conversations/{conversation_id}/items/{item_id}",
        DataPlane, Other, None;

    // Control plane.
    WorkersList = GET "/workers", ControlPlane, Other, None;
    WorkersCreate = POST "/workers", ControlPlane, Other, None;
    WorkerGet = GET "/workers/{worker_id}", ControlPlane, Other, None;
    WorkerPatch = PATCH "/workers/{worker_id}", ControlPlane, Other, None;
    /// `PUT /workers/{worker_id}`: replace the spec and re-register.
    WorkerReplace = PUT "/workers/{worker_id}", ControlPlane, Other, None;
    WorkerDelete = DELETE "/workers/{worker_id}", ControlPlane, Other, None;
    TokenizersList = GET "/v1/tokenizers", ControlPlane, Other, None;
    TokenizersCreate = POST "/v1/tokenizers", ControlPlane, Other, None;
    TokenizerGet = GET "/v1/tokenizers/{tokenizer_id}", ControlPlane, Other, None;
    TokenizerDelete = DELETE "/v1/tokenizers/{tokenizer_id}", ControlPlane, Other, None;
    TokenizerStatus = GET "/v1/tokenizers/{tokenizer_id}/status", ControlPlane, Other, None;
    WasmList = GET "/wasm", ControlPlane, Other, None;
    WasmAdd = POST "/wasm", ControlPlane, Other, None;
    WasmDelete = DELETE "/wasm/{module_uuid}", ControlPlane, Other, None;
    FlushCache = POST "/flush_cache", ControlPlane, Other, None;
    /// `GET /get_loads`: deprecated control-plane alias of `/loads`.
    GetLoads = GET "/get_loads", ControlPlane, Other, None;
    StartProfile = POST "/start_profile", ControlPlane, Other, None;
    StopProfile = POST "/stop_profile", ControlPlane, Other, None;
    ParseFunctionCall = POST "/parse/function_call", ControlPlane, Other, None;
    ParseReasoning = POST "/parse/reasoning", ControlPlane, Other, None;
    RlWorkersList = GET "/v1/rl/workers", ControlPlane, Other, None;
    RlWorkerGet = GET "/v1/rl/workers/{id}", ControlPlane, Other, None;
    /// Forward to one worker's engine route; `{path}` is the rest of the path.
    RlWorkerEngineGet = GET "/v1/rl/workers/{id}/engine/{path}", ControlPlane, Other, None;
    RlWorkerEnginePost = POST "/v1/rl/workers/{id}/engine/{path}", ControlPlane, Other, None;
    /// Fan out to every worker matching `?selector=`; `{path}` is the rest of the path.
    RlEngineFanoutGet = GET "/v1/rl/engine/{path}", ControlPlane, Other, None;
    RlEngineFanoutPost = POST "/v1/rl/engine/{path}", ControlPlane, Other, None;
}

/// The request methods the table distinguishes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verb {
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Other,
}

#[inline]
fn verb(method: &Method) -> Verb {
    if *method == Method::GET || *method == Method::HEAD {
        Verb::Get
    } else if *method == Method::POST {
        Verb::Post
    } else if *method == Method::DELETE {
        Verb::Delete
    } else if *method == Method::PUT {
        Verb::Put
    } else if *method == Method::PATCH {
        Verb::Patch
    } else {
        Verb::Other
    }
}

/// One path template (all routes that share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    Health,
    Liveness,
    Readiness,
    HealthGenerate,
    EngineMetrics,
    Loads,
    Models,
    GetModelInfo,
    GetServerInfo,
    Tokenize,
    Detokenize,
    Generate,
    Rerank,
    RerankV1,
    Classify,
    Embeddings,
    Interactions,
    ChatCompletions,
    Completions,
    AudioTranscriptions,
    Realtime,
    RealtimeSessions,
    RealtimeClientSecrets,
    RealtimeTranscriptionSessions,
    RealtimeCalls,
    Messages,
    MessagesCountTokens,
    Responses,
    Response,
    ResponseCancel,
    ResponseInputItems,
    Conversations,
    Conversation,
    ConversationItems,
    ConversationItem,
    Workers,
    Worker,
    Tokenizers,
    Tokenizer,
    TokenizerStatus,
    Wasm,
    WasmModule,
    FlushCache,
    GetLoads,
    StartProfile,
    StopProfile,
    ParseFunctionCall,
    ParseReasoning,
    RlWorkers,
    RlWorker,
    RlWorkerEngine,
    RlEngine,
}

impl Resource {
    /// The route for `verb` on this resource, or `None` (405).
    #[inline]
    fn route(self, verb: Verb) -> Option<Route> {
        use Resource as R;
        use Verb::{Delete, Get, Patch, Post, Put};
        Some(match (self, verb) {
            (R::Health, Get) => Route::Health,
            (R::Liveness, Get) => Route::Liveness,
            (R::Readiness, Get) => Route::Readiness,
            (R::HealthGenerate, Get) => Route::HealthGenerate,
            (R::EngineMetrics, Get) => Route::EngineMetrics,
            (R::Loads, Get) => Route::Loads,
            (R::Models, Get) => Route::Models,
            (R::GetModelInfo, Get) => Route::GetModelInfo,
            (R::GetServerInfo, Get) => Route::GetServerInfo,
            (R::Tokenize, Post) => Route::Tokenize,
            (R::Detokenize, Post) => Route::Detokenize,
            (R::Generate, Post) => Route::Generate,
            (R::Rerank, Post) => Route::Rerank,
            (R::RerankV1, Post) => Route::RerankV1,
            (R::Classify, Post) => Route::Classify,
            (R::Embeddings, Post) => Route::Embeddings,
            (R::Interactions, Post) => Route::Interactions,
            (R::ChatCompletions, Post) => Route::ChatCompletions,
            (R::Completions, Post) => Route::Completions,
            (R::AudioTranscriptions, Post) => Route::AudioTranscriptions,
            (R::Realtime, Get) => Route::RealtimeWebsocket,
            (R::RealtimeSessions, Post) => Route::RealtimeSessions,
            (R::RealtimeClientSecrets, Post) => Route::RealtimeClientSecrets,
            (R::RealtimeTranscriptionSessions, Post) => Route::RealtimeTranscriptionSessions,
            (R::RealtimeCalls, Post) => Route::RealtimeCalls,
            (R::Messages, Post) => Route::Messages,
            (R::MessagesCountTokens, Post) => Route::MessagesCountTokens,
            (R::Responses, Post) => Route::ResponsesCreate,
            (R::Response, Get) => Route::ResponseGet,
            (R::Response, Delete) => Route::ResponseDelete,
            (R::ResponseCancel, Post) => Route::ResponseCancel,
            (R::ResponseInputItems, Get) => Route::ResponseInputItems,
            (R::Conversations, Post) => Route::ConversationsCreate,
            (R::Conversation, Get) => Route::ConversationGet,
            (R::Conversation, Post) => Route::ConversationUpdate,
            (R::Conversation, Delete) => Route::ConversationDelete,
            (R::ConversationItems, Get) => Route::ConversationItemsList,
            (R::ConversationItems, Post) => Route::ConversationItemsCreate,
            (R::ConversationItem, Get) => Route::ConversationItemGet,
            (R::ConversationItem, Delete) => Route::ConversationItemDelete,
            (R::Workers, Get) => Route::WorkersList,
            (R::Workers, Post) => Route::WorkersCreate,
            (R::Worker, Get) => Route::WorkerGet,
            (R::Worker, Patch) => Route::WorkerPatch,
            (R::Worker, Put) => Route::WorkerReplace,
            (R::Worker, Delete) => Route::WorkerDelete,
            (R::Tokenizers, Get) => Route::TokenizersList,
            (R::Tokenizers, Post) => Route::TokenizersCreate,
            (R::Tokenizer, Get) => Route::TokenizerGet,
            (R::Tokenizer, Delete) => Route::TokenizerDelete,
            (R::TokenizerStatus, Get) => Route::TokenizerStatus,
            (R::Wasm, Get) => Route::WasmList,
            (R::Wasm, Post) => Route::WasmAdd,
            (R::WasmModule, Delete) => Route::WasmDelete,
            (R::FlushCache, Post) => Route::FlushCache,
            (R::GetLoads, Get) => Route::GetLoads,
            (R::StartProfile, Post) => Route::StartProfile,
            (R::StopProfile, Post) => Route::StopProfile,
            (R::ParseFunctionCall, Post) => Route::ParseFunctionCall,
            (R::ParseReasoning, Post) => Route::ParseReasoning,
            (R::RlWorkers, Get) => Route::RlWorkersList,
            (R::RlWorker, Get) => Route::RlWorkerGet,
            (R::RlWorkerEngine, Get) => Route::RlWorkerEngineGet,
            (R::RlWorkerEngine, Post) => Route::RlWorkerEnginePost,
            (R::RlEngine, Get) => Route::RlEngineFanoutGet,
            (R::RlEngine, Post) => Route::RlEngineFanoutPost,
            _ => return None,
        })
    }

    /// Value of the `Allow` header of a 405 on this resource, read off [`Resource::route`]
    /// so the two cannot disagree: the methods with a route, `HEAD` beside `GET`. Only a
    /// 405 asks, so building the text is not on the path of found routes.
    fn allow(self) -> String {
        let mut allow = String::new();
        for (verb, methods) in [
            (Verb::Get, "GET, HEAD"),
            (Verb::Post, "POST"),
            (Verb::Put, "PUT"),
            (Verb::Patch, "PATCH"),
            (Verb::Delete, "DELETE"),
        ] {
            if self.route(verb).is_some() {
                if !allow.is_empty() {
                    allow.push_str(", ");
                }
                allow.push_str(methods);
            }
        }
        allow
    }
}

/// Matches a request on the main listener. `path` is `uri.path()`.
#[inline]
pub fn match_route(method: &Method, path: &str) -> RouteMatch {
    match resource(path) {
        None => RouteMatch::NotFound,
        Some(res) => match res.route(verb(method)) {
            Some(route) => RouteMatch::Found(route),
            None => RouteMatch::MethodNotAllowed,
        },
    }
}

/// Matches a request on the metrics listener: only `GET /metrics` (and `HEAD`).
#[inline]
pub fn match_metrics_route(method: &Method, path: &str) -> RouteMatch {
    if path != "/metrics" {
        RouteMatch::NotFound
    } else if verb(method) == Verb::Get {
        RouteMatch::Found(Route::Metrics)
    } else {
        RouteMatch::MethodNotAllowed
    }
}

/// The `Allow` header value for a 405 on the main listener (the methods `path` accepts,
/// e.g. `GET, HEAD, POST`), or `None` for unknown paths.
pub fn allowed_methods(path: &str) -> Option<String> {
    resource(path).map(Resource::allow)
}

/// The `index`-th `/`-separated segment of `path`, counting from 0 after the leading `/`
/// (`path_param("/workers/abc", 1) == Some("abc")`). Empty segments give `None`.
pub fn path_param(path: &str, index: usize) -> Option<&str> {
    path.strip_prefix('/')?
        .split('/')
        .nth(index)
        .filter(|segment| !segment.is_empty())
}

/// Everything from the `index`-th segment to the end of `path`, without the leading `/`
/// (`path_tail("/v1/rl/engine/a/b", 3) == Some("a/b")`): the RL `{path}` parameter.
pub fn path_tail(path: &str, index: usize) -> Option<&str> {
    let mut rest = path.strip_prefix('/')?;
    for _ in 0..index {
        rest = rest.split_once('/')?.1;
    }
    (!rest.is_empty()).then_some(rest)
}

/// Splits off the first segment: `"a/b/c"` → `("a", Some("b/c"))`, `"a"` → `("a", None)`.
#[inline(always)]
fn split(s: &str) -> (&str, Option<&str>) {
    match find_slash(s.as_bytes()) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    }
}

/// Position of the first `/`: eight bytes at a time, then byte by byte. Inlined on purpose:
/// segments are short, and the library searchers behind `str::find` are out-of-line calls
/// that cost more than the scan itself.
#[inline(always)]
fn find_slash(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    const SLASHES: u64 = u64::from_le_bytes([b'/'; 8]);
    let mut chunks = bytes.chunks_exact(8);
    let mut offset = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        // Bytes equal to '/' become zero; the classic "has a zero byte" test finds them.
        // Only bytes above the first match can be flagged spuriously, and the lowest
        // flagged byte is always the first match.
        let x = u64::from_le_bytes(word) ^ SLASHES;
        let found = x.wrapping_sub(ONES) & !x & HIGHS;
        if found != 0 {
            return Some(offset + (found.trailing_zeros() / 8) as usize);
        }
        offset += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'/')
        .map(|i| offset + i)
}

/// A parameter: exactly one non-empty segment.
#[inline(always)]
fn param(s: &str) -> bool {
    !s.is_empty() && find_slash(s.as_bytes()).is_none()
}

/// A `{path}` tail parameter: one or more non-empty segments.
#[inline]
fn tail(s: &str) -> bool {
    let mut rest = s.as_bytes();
    loop {
        match find_slash(rest) {
            Some(0) => return false,
            Some(i) => rest = &rest[i + 1..],
            None => return !rest.is_empty(),
        }
    }
}

/// Resolves a path to its template.
fn resource(path: &str) -> Option<Resource> {
    use Resource as R;
    let (first, rest) = split(path.strip_prefix('/')?);
    let Some(rest) = rest else {
        return Some(match first {
            "health" => R::Health,
            "liveness" => R::Liveness,
            "readiness" => R::Readiness,
            "generate" => R::Generate,
            "rerank" => R::Rerank,
            "loads" => R::Loads,
            "workers" => R::Workers,
            "wasm" => R::Wasm,
            "health_generate" => R::HealthGenerate,
            "engine_metrics" => R::EngineMetrics,
            "get_model_info" => R::GetModelInfo,
            "get_server_info" => R::GetServerInfo,
            "flush_cache" => R::FlushCache,
            "get_loads" => R::GetLoads,
            "start_profile" => R::StartProfile,
            "stop_profile" => R::StopProfile,
            _ => return None,
        });
    };
    match first {
        "v1" => v1(rest),
        "workers" => param(rest).then_some(R::Worker),
        "wasm" => param(rest).then_some(R::WasmModule),
        "parse" => match rest {
            "function_call" => Some(R::ParseFunctionCall),
            "reasoning" => Some(R::ParseReasoning),
            _ => None,
        },
        _ => None,
    }
}

/// Paths under `/v1/`.
fn v1(path: &str) -> Option<Resource> {
    use Resource as R;
    let (first, rest) = split(path);
    let Some(rest) = rest else {
        return Some(match first {
            "completions" => R::Completions,
            "messages" => R::Messages,
            "responses" => R::Responses,
            "embeddings" => R::Embeddings,
            "models" => R::Models,
            "rerank" => R::RerankV1,
            "classify" => R::Classify,
            "tokenize" => R::Tokenize,
            "detokenize" => R::Detokenize,
            "interactions" => R::Interactions,
            "conversations" => R::Conversations,
            "tokenizers" => R::Tokenizers,
            "realtime" => R::Realtime,
            _ => return None,
        });
    };
    match first {
        "chat" => (rest == "completions").then_some(R::ChatCompletions),
        "messages" => (rest == "count_tokens").then_some(R::MessagesCountTokens),
        "audio" => (rest == "transcriptions").then_some(R::AudioTranscriptions),
        "responses" => {
            let (id, rest) = split(rest);
            if id.is_empty() {
                return None;
            }
            match rest {
                None => Some(R::Response),
                Some("cancel") => Some(R::ResponseCancel),
                Some("input_items") => Some(R::ResponseInputItems),
                Some(_) => None,
            }
        }
        "conversations" => {
            let (id, rest) = split(rest);
            if id.is_empty() {
                return None;
            }
            let Some(rest) = rest else {
                return Some(R::Conversation);
            };
            let (items, rest) = split(rest);
            if items != "items" {
                return None;
            }
            match rest {
                None => Some(R::ConversationItems),
                Some(item) => param(item).then_some(R::ConversationItem),
            }
        }
        "tokenizers" => {
            let (id, rest) = split(rest);
            if id.is_empty() {
                return None;
            }
            match rest {
                None => Some(R::Tokenizer),
                Some("status") => Some(R::TokenizerStatus),
                Some(_) => None,
            }
        }
        "realtime" => match rest {
            "sessions" => Some(R::RealtimeSessions),
            "client_secrets" => Some(R::RealtimeClientSecrets),
            "transcription_sessions" => Some(R::RealtimeTranscriptionSessions),
            "calls" => Some(R::RealtimeCalls),
            _ => None,
        },
        "rl" => rl(rest),
        _ => None,
    }
}

/// Paths under `/v1/rl/`.
fn rl(path: &str) -> Option<Resource> {
    use Resource as R;
    let (first, rest) = split(path);
    match (first, rest) {
        ("workers", None) => Some(R::RlWorkers),
        ("workers", Some(rest)) => {
            let (id, rest) = split(rest);
            if id.is_empty() {
                return None;
            }
            let Some(rest) = rest else {
                return Some(R::RlWorker);
            };
            match split(rest) {
                ("engine", Some(engine_path)) => tail(engine_path).then_some(R::RlWorkerEngine),
                _ => None,
            }
        }
        ("engine", Some(engine_path)) => tail(engine_path).then_some(R::RlEngine),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const METHODS: &[Method] = &[
        Method::GET,
        Method::HEAD,
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::OPTIONS,
        Method::TRACE,
        Method::CONNECT,
    ];

    /// The template with every parameter replaced by a sample value.
    fn sample(template: &str, tail_value: &str) -> String {
        template
            .replace("{worker_id}", "0b6f0c7e-1a2b-4c3d-8e9f-001122334455")
            .replace("{tokenizer_id}", "llama-3")
            .replace("{module_uuid}", "5f1d4a4e-0000-4000-8000-000000000000")
            .replace("{response_id}", "resp_123")
            .replace("{conversation_id}", "conv_abc")
            .replace("{item_id}", "msg_1")
            .replace("{id}", "w1")
            .replace("{path}", tail_value)
    }

    fn main_routes() -> impl Iterator<Item = Route> {
        Route::ALL.iter().copied().filter(|r| *r != Route::Metrics)
    }

    #[test]
    fn every_route_matches_its_template() {
        for route in main_routes() {
            for tail_value in ["flush_cache", "a/b/c"] {
                let path = sample(route.template(), tail_value);
                assert_eq!(
                    match_route(&route.method(), &path),
                    RouteMatch::Found(route),
                    "{} {path}",
                    route.method()
                );
                if route.method() == Method::GET {
                    assert_eq!(match_route(&Method::HEAD, &path), RouteMatch::Found(route));
                }
            }
        }
        assert_eq!(
            match_metrics_route(&Method::GET, "/metrics"),
            RouteMatch::Found(Route::Metrics)
        );
    }

    #[test]
    fn templates_are_unique_per_method() {
        for (i, a) in Route::ALL.iter().enumerate() {
            for b in &Route::ALL[i + 1..] {
                assert!(
                    a.template() != b.template() || a.method() != b.method(),
                    "{a:?} and {b:?}"
                );
            }
        }
    }

    #[test]
    fn wrong_method_is_405_with_allow() {
        for route in main_routes() {
            let path = sample(route.template(), "x");
            let allowed: Vec<Method> = Route::ALL
                .iter()
                .filter(|r| r.template() == route.template())
                .map(|r| r.method())
                .collect();
            let allow = allowed_methods(&path).unwrap_or_default();
            for method in METHODS {
                let declared = allowed.contains(method)
                    || (*method == Method::HEAD && allowed.contains(&Method::GET));
                let got = match_route(method, &path);
                if declared {
                    assert!(matches!(got, RouteMatch::Found(_)), "{method} {path}");
                    assert!(
                        allow.split(", ").any(|m| m == method.as_str()),
                        "{path}: {allow}"
                    );
                } else {
                    assert_eq!(got, RouteMatch::MethodNotAllowed, "{method} {path}");
                    assert!(
                        !allow.split(", ").any(|m| m == method.as_str()),
                        "{path}: {allow}"
                    );
                }
            }
            let extension = Method::from_bytes(b"BREW").unwrap();
            assert_eq!(match_route(&extension, &path), RouteMatch::MethodNotAllowed);
        }
        assert_eq!(
            match_metrics_route(&Method::POST, "/metrics"),
            RouteMatch::MethodNotAllowed
        );
        assert_eq!(
            match_metrics_route(&Method::HEAD, "/metrics"),
            RouteMatch::Found(Route::Metrics)
        );
    }

    #[test]
    fn allow_lists_the_methods_of_the_path() {
        for (path, allow) in [
            ("/v1/chat/completions", "POST"),
            ("/health", "GET, HEAD"),
            ("/workers", "GET, HEAD, POST"),
            ("/workers/abc", "GET, HEAD, PUT, PATCH, DELETE"),
            ("/v1/conversations/c1", "GET, HEAD, POST, DELETE"),
            ("/v1/responses/r1", "GET, HEAD, DELETE"),
            ("/wasm/m1", "DELETE"),
            ("/v1/rl/engine/a/b", "GET, HEAD, POST"),
        ] {
            assert_eq!(allowed_methods(path).as_deref(), Some(allow), "{path}");
        }
        assert_eq!(allowed_methods("/v1/chat/completion"), None);
        assert_eq!(allowed_methods("/metrics"), None);
    }

    #[test]
    fn unknown_paths_are_404() {
        let unknown = [
            "",
            "/",
            "//",
            "health",
            "/Health",
            "/health/",
            "/health//",
            "//health",
            "/healthz",
            "/metrics",
            "/ha/status",
            "/ha",
            "/v1",
            "/v1/",
            "/v1/chat",
            "/v1/chat/",
            "/v1/chat/completions/",
            "/v1/chat/completions/x",
            "/v1//chat/completions",
            "/v1/chat//completions",
            "/v2/chat/completions",
            "/v1/models/",
            "/v1/models/x",
            "/workers/",
            "/workers//",
            "/workers/a/b",
            "/workers/a/",
            "/wasm/",
            "/wasm/a/b",
            "/v1/responses/",
            "/v1/responses//cancel",
            "/v1/responses/r/cancel/",
            "/v1/responses/r/other",
            "/v1/responses/r/input_items/x",
            "/v1/conversations/",
            "/v1/conversations/c/",
            "/v1/conversations/c/items/",
            "/v1/conversations/c/items/i/",
            "/v1/conversations/c/items/i/x",
            "/v1/conversations/c/other",
            "/v1/conversations//items",
            "/v1/tokenizers/",
            "/v1/tokenizers/t/",
            "/v1/tokenizers/t/other",
            "/v1/tokenizers//status",
            "/v1/realtime/",
            "/v1/realtime/other",
            "/v1/messages/",
            "/v1/messages/other",
            "/v1/audio",
            "/v1/audio/transcriptions/",
            "/v1/rl",
            "/v1/rl/",
            "/v1/rl/workers/",
            "/v1/rl/workers//engine/x",
            "/v1/rl/workers/w/",
            "/v1/rl/workers/w/engine",
            "/v1/rl/workers/w/engine/",
            "/v1/rl/workers/w/engine/a/",
            "/v1/rl/workers/w/engine//a",
            "/v1/rl/workers/w/other/a",
            "/v1/rl/engine",
            "/v1/rl/engine/",
            "/v1/rl/engine//x",
            "/v1/rl/engine/x//y",
            "/v1/rl/engine/x/",
            "/v1/rl/other",
            "/parse",
            "/parse/",
            "/parse/other",
            "/parse/reasoning/",
            "/v1/loads",
            "/generate?x=1",
        ];
        for path in unknown {
            for method in METHODS {
                assert_eq!(match_route(method, path), RouteMatch::NotFound, "{path}");
            }
            assert_eq!(allowed_methods(path), None, "{path}");
        }
        assert_eq!(
            match_metrics_route(&Method::GET, "/metrics/"),
            RouteMatch::NotFound
        );
        assert_eq!(
            match_metrics_route(&Method::GET, "/health"),
            RouteMatch::NotFound
        );
    }

    #[test]
    fn groups_follow_the_spec_table() {
        let public = [
            "/health",
            "/liveness",
            "/readiness",
            "/health_generate",
            "/engine_metrics",
            "/loads",
            "/v1/models",
            "/get_model_info",
            "/get_server_info",
            "/metrics",
        ];
        let control_prefixes = [
            "/workers",
            "/v1/tokenizers",
            "/wasm",
            "/flush_cache",
            "/get_loads",
            "/start_profile",
            "/stop_profile",
            "/parse/",
            "/v1/rl/",
        ];
        for route in Route::ALL {
            let template = route.template();
            let expected = if public.contains(&template) {
                RouteGroup::Public
            } else if control_prefixes.iter().any(|p| template.starts_with(p)) {
                RouteGroup::ControlPlane
            } else {
                RouteGroup::DataPlane
            };
            assert_eq!(route.group(), expected, "{route:?}");
        }
        let publics = Route::ALL
            .iter()
            .filter(|r| r.group() == RouteGroup::Public)
            .count();
        assert_eq!(publics, public.len());
    }

    #[test]
    fn endpoints_and_upstream_paths() {
        let expect = [
            (Route::ChatCompletions, "chat"),
            (Route::Generate, "generate"),
            (Route::Completions, "completions"),
            (Route::ResponsesCreate, "responses"),
            (Route::Messages, "messages"),
            (Route::Embeddings, "embeddings"),
            (Route::Classify, "classify"),
            (Route::Rerank, "rerank"),
            (Route::RerankV1, "rerank"),
            (Route::AudioTranscriptions, "audio_transcriptions"),
            (Route::RealtimeWebsocket, "realtime"),
            (Route::RealtimeSessions, "realtime_sessions"),
            (Route::RealtimeClientSecrets, "realtime_client_secrets"),
            (
                Route::RealtimeTranscriptionSessions,
                "realtime_transcription",
            ),
            (Route::Tokenize, "other"),
            (Route::WorkersList, "other"),
            (Route::Health, "other"),
        ];
        for (route, label) in expect {
            assert_eq!(route.endpoint().as_str(), label, "{route:?}");
        }
        for route in Route::ALL {
            if route.group() == RouteGroup::ControlPlane {
                assert_eq!(route.endpoint(), Endpoint::Other, "{route:?}");
            }
            if let Some(upstream) = route.upstream_path() {
                assert_eq!(upstream, route.template(), "{route:?}");
                assert!(!upstream.contains('{'));
            }
        }
        let forwarded: Vec<&str> = Route::ALL
            .iter()
            .filter_map(|r| r.upstream_path())
            .collect();
        assert_eq!(forwarded.len(), 16, "{forwarded:?}");
        let mut labels: Vec<&str> = Endpoint::ALL.iter().map(|e| e.as_str()).collect();
        labels.dedup();
        assert_eq!(labels.len(), 14);
    }

    #[test]
    fn find_slash_agrees_with_a_plain_scan() {
        let mut text = Vec::new();
        for len in 0..40 {
            for slash_at in 0..=len {
                text.clear();
                text.extend((0..len).map(|i| {
                    if i == slash_at {
                        b'/'
                    } else {
                        b'a' + (i % 26) as u8
                    }
                }));
                // Bytes just above and below '/' must not be mistaken for it.
                if len > 2 {
                    text[0] = if slash_at == 0 { b'/' } else { b'.' };
                    text[len - 1] = if slash_at == len - 1 { b'/' } else { b'0' };
                }
                let expected = text.iter().position(|&b| b == b'/');
                assert_eq!(
                    find_slash(&text),
                    expected,
                    "{:?}",
                    String::from_utf8_lossy(&text)
                );
                // A second slash later never changes the answer.
                text.push(b'/');
                assert_eq!(find_slash(&text), Some(expected.unwrap_or(len)));
            }
        }
        assert_eq!(find_slash("\u{1F600}/x".as_bytes()), Some(4));
        assert_eq!(find_slash(&[0xff; 17]), None);
    }

    #[test]
    fn path_params() {
        assert_eq!(path_param("/workers/abc", 0), Some("workers"));
        assert_eq!(path_param("/workers/abc", 1), Some("abc"));
        assert_eq!(path_param("/workers/abc", 2), None);
        assert_eq!(path_param("/workers//x", 1), None);
        assert_eq!(path_param("workers/abc", 1), None);
        assert_eq!(path_param("/v1/conversations/c1/items/i9", 4), Some("i9"));
        assert_eq!(path_tail("/v1/rl/engine/a/b", 3), Some("a/b"));
        assert_eq!(path_tail("/v1/rl/workers/w/engine/x", 5), Some("x"));
        assert_eq!(path_tail("/v1/rl/engine/", 3), None);
        assert_eq!(path_tail("/v1/rl/engine", 3), None);
        assert_eq!(path_tail("/a", 0), Some("a"));
        assert_eq!(path_tail("", 0), None);
    }
}

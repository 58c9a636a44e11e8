//! HTTP vocabulary shared by the server and the handlers: the route table, response
//! bodies, the gateway's own answers (`reply` for successes, `error` for errors).

pub mod body;
pub mod client;
pub mod deadline;
pub mod error;
pub mod guard;
pub mod h1;
pub mod head_rules;
pub mod raw_send;
pub mod reply;
pub mod request_body;
pub mod route;
pub mod tls;
pub mod upload;

/// Boxed error type of request and response bodies (and the connections that carry
/// them); allocated only when an error actually happens.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

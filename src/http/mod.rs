//! HTTP vocabulary shared by the server and the handlers: the route table, response
//! bodies and the mapping of gateway errors to the wire.

pub mod body;
pub mod error;
pub mod guard;
pub mod head_rules;
pub mod route;
pub mod upload;

//! Sans-IO SIP (RFC 3261): message parsing and building, typed header views, URIs and request
//! validation. No sockets and no clock: callers pass bytes in and get messages and bytes out.

pub mod auth;
pub mod builder;
pub mod dtmf_info;
mod fields;
pub mod header;
pub mod message;
pub mod method;
pub mod rewrite;
pub mod status;
pub mod transaction;
pub mod uri;
pub mod validate;

pub use builder::{Builder, RequestBuilder, ResponseBuilder};
pub use header::{CSeq, HeaderName, NameAddr, Params, Via};
pub use message::{Message, ParseError, StartLine};
pub use method::Method;
pub use rewrite::Rewrite;
pub use uri::Uri;

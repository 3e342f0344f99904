//! The call model: configuration, dialplan, call control (B2BUA legs, apps) and CDR events.
//! Sans-IO: the `strowger` binary feeds it SIP messages, media events and time.

pub mod acl;
mod apps;
pub mod auth;
mod bridge;
pub mod call;
pub mod call_recording;
mod calls;
pub mod cdr;
pub mod config;
pub mod dialog;
pub mod dialplan;
mod digits;
pub mod engine;
mod forwarding;
pub mod guard;
mod handoff;
mod hold;
mod hunt;
pub mod iax;
pub mod io;
mod joins;
pub mod keepalive;
mod media_out;
pub mod moh;
mod parking;
pub mod parklot;
mod pickup;
pub mod pins;
mod ports;
mod proxy;
pub mod queues;
mod record_route;
pub mod registrar;
pub mod ringboard;
pub mod slots;
mod transfer;
pub mod trunks;

pub use calls::TableCounts;
pub use engine::{nonce_owner, owner, stateless, Engine, Settings};
pub use handoff::Rendezvous;
pub use io::{Clock, Event, HandOff, Input, Level, Output};
pub use pins::Pins;
pub use slots::CallSlots;

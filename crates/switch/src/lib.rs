//! The call model: configuration, dialplan, call control (B2BUA legs, apps) and CDR events.
//! Sans-IO: the `strowger` binary feeds it SIP messages, media events and time.

pub mod config;
pub mod dialplan;

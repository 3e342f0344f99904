//! strowger-load: a SIP/RTP load generator (issue 5). Each thread runs one event loop with its
//! own SIP socket and a sans-IO UAC per call ([`uac`]), RTP per call on its own port, served in
//! the same 5 ms phases as the server's media pass ([`run`]); [`iax`] places IAX2 calls;
//! [`register`] registers users, with or without digest authentication; [`floor`] measures the
//! kernel's own cost for the packets of held calls; [`flood`] sends attack traffic from many
//! loopback addresses for the flood benchmark; [`tls`] carries SIP over TLS for SRTP calls.

pub mod flood;
pub mod floor;
pub mod iax;
pub mod register;
pub mod report;
pub mod run;
pub mod sipmsg;
pub mod tls;
pub mod uac;

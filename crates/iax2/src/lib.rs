//! IAX2 (RFC 5456) for strowger, sans-IO: frames and information elements (`frame`, `ie`), and
//! an `Endpoint` that runs calls and registrations both ways over a reliable full-frame layer,
//! with random call numbers found in O(1), stateless call tokens and trunk frames. It never
//! touches a socket or reads the clock: datagrams and an `Instant` go in, datagrams, events and
//! the next deadline come out, so every timer is tested with injected time.

pub mod callno;
pub mod endpoint;
pub mod frame;
pub mod ie;
pub mod md5;
pub mod pcap;
pub mod token;

pub use endpoint::{
    AddressCounts, CallId, CallInfo, Config, EndReason, Endpoint, Error, Event, NewCall, RegId,
    Route, Stats, Transmit,
};
pub use frame::{format, Frame, FrameError, FrameType, FullFrame, MiniFrame, TrunkFrame};

//! Every integration test of the crate in one binary: one link instead of one per file,
//! and the tests of all files share the test threads. Each module was a file of tests/.

mod auth;
mod calls;
mod conference;
mod control;
mod dispatch;
mod dtmf;
mod dual_stack;
mod engine;
mod forking;
mod forwarding;
mod guard;
mod hold;
mod ivr;
mod metrics;
mod net;
mod originate;
mod parking;
mod queues;
mod recording;
mod relay;
mod reload;
mod routing;
mod shared_ports;
mod srtp;
mod tls;
mod transfer;
mod trunks;
mod voicemail;
mod webrtc_legs;
mod websocket;

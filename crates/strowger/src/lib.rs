//! The strowger process as a library: the worker loop and its sockets, the store threads, the
//! command-line tools. `main.rs` only parses the command line; tests build workers from here.

pub mod allocator;
pub mod api;
pub mod cdr;
pub mod codec_cli;
pub mod ctl;
pub mod dns;
pub mod fds;
pub mod host;
pub mod journal_io;
pub mod launch;
pub mod logging;
pub mod metrics;
pub mod music;
pub mod notify;
pub mod overload;
pub mod peers;
pub mod recordings;
pub mod reload;
pub mod rtp_io;
pub mod rtp_ports;
pub mod runtime;
pub mod sip_io;
pub mod store_io;
pub mod store_pool;
pub mod supervisor;
pub mod tls;
pub mod tts;
pub mod users;
pub mod voicemail_io;
pub mod worker;

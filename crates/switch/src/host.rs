//! What the call engine asks of the process around it: sockets for media, files for prompts and
//! recordings, and the CDR log. Kept to a handful of calls so tests can stand in for it.

use std::fs::File;
use std::io;
use std::sync::Arc;

pub trait Host {
    /// Binds RTP (and RTCP on the next port) for media leg `leg`; returns the RTP port.
    /// `shareable`: the far end can be told apart by its address (it announced one its packets
    /// will come from — not a private address of a host behind NAT — and no other leg has that
    /// address), so with `rtp.shared_ports` the leg may share a port with others; otherwise it
    /// needs a pair of its own.
    fn open_media(&mut self, leg: usize, shareable: bool) -> Option<u16>;
    fn close_media(&mut self, leg: usize);
    /// A prompt by name (`demo`, or a file relative to the data directory); `cache` keeps it.
    fn prompt(&mut self, name: &str, cache: bool) -> Result<Arc<media::Prompt>, String>;
    /// Creates a recording file (relative to the data directory).
    fn recording(&mut self, name: &str) -> io::Result<File>;
    /// Appends one CDR line (JSON, no newline).
    fn cdr(&mut self, line: &str);
    /// A problem an operator should see (names the cause and the fix).
    fn log(&mut self, msg: &str);
    /// Replaces a small state file in the data directory that commands outside the process
    /// read (`strowger show peers`). The default keeps nothing.
    fn state(&mut self, name: &str, contents: &str) {
        let _ = (name, contents);
    }
    /// Runs a location/credential store operation off the worker; its result comes back later
    /// through `Engine::on_store_result(token, …)`. The default has no store: it fails.
    fn store(
        &mut self,
        token: u64,
        op: crate::registrar::StoreOp,
    ) -> Option<crate::registrar::StoreResult> {
        let _ = (token, op);
        Some(Err("no location store in this host".into()))
    }
}

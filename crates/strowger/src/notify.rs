//! systemd's readiness protocol (sd_notify(3)): `READY=1` once the sockets listen and the
//! workers run, `STOPPING=1` when a drain or stop begins, `WATCHDOG=1` while the supervising
//! thread lives. One datagram to the Unix socket `$NOTIFY_SOCKET` names (a path, or `@name` in
//! the abstract namespace); without it (not under systemd) nothing is sent.
//!
//! Written here rather than taken from a crate: it is a `send_to` on a std `UnixDatagram`,
//! and the crates for it add nothing to that but a dependency.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// Sends `state` (`READY=1`, `STATUS=…`; several separated by newlines) to the service
/// manager, if there is one. A failure is logged, not fatal: the switch runs the same.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let path = path.to_string_lossy();
    let sent = address(&path).and_then(|addr| {
        let sock = UnixDatagram::unbound()?;
        sock.send_to_addr(state.as_bytes(), &addr)
    });
    if let Err(e) = sent {
        tracing::warn!("cannot notify the service manager at NOTIFY_SOCKET={path}: {e}");
    }
}

fn address(path: &str) -> std::io::Result<SocketAddr> {
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)
        }
        None => SocketAddr::from_pathname(path),
    }
}

/// How often to send `WATCHDOG=1`: half the `WatchdogSec=` systemd set in `$WATCHDOG_USEC`
/// (when `$WATCHDOG_PID`, if set, is this process).
pub fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim() != std::process::id().to_string() {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

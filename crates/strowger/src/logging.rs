//! The server's log: `tracing` events written to stderr by `tracing-subscriber`, as text or as
//! JSON lines (`general.log_format`), from `general.log_level` up (`--log-level` overrides).
//!
//! SIP messages are traced at debug under the target [`SIP`], like Asterisk's `sip set debug
//! on`: every message a worker reads or sends, whole. At info and above nothing of them is
//! formatted ([`sip_enabled`] is checked first).

use std::io::IsTerminal;
use std::net::SocketAddr;
use switch::config::{LogFormat, LogLevel};
use tracing::level_filters::LevelFilter;

/// The target of the SIP message trace.
pub const SIP: &str = "strowger::sip";

/// Installs the process's subscriber: stderr, a timestamp on every line, events at `level` and
/// more severe. Called once, by `main` for the server; a second call changes nothing.
pub fn init(level: LogLevel, format: LogFormat) {
    let level = match level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    let _ = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
}

/// Whether SIP messages are traced (debug for [`SIP`]): a cached check, cheap on every message.
#[inline]
pub fn sip_enabled() -> bool {
    tracing::enabled!(target: SIP, tracing::Level::DEBUG)
}

/// Which way a traced SIP message went.
#[derive(Clone, Copy, Debug)]
pub enum Dir {
    Received,
    Sent,
}

/// Traces one SIP message (call only when [`sip_enabled`]): direction, transport, the peer's
/// address, its Call-ID as a field, and the whole text.
pub fn sip(dir: Dir, transport: sip::transaction::Transport, peer: SocketAddr, bytes: &[u8]) {
    let transport = match transport {
        sip::transaction::Transport::Udp => "udp",
        sip::transaction::Transport::Tcp => "tcp",
    };
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_matches(['\r', '\n']).replace("\r\n", "\n");
    if text.is_empty() {
        return; // a keep-alive
    }
    let call_id = call_id(&text).unwrap_or("");
    let (dir, way) = match dir {
        Dir::Received => ("received", "from"),
        Dir::Sent => ("sent", "to"),
    };
    // The message as a field after the Call-ID, so a text line starts with the Call-ID and the
    // SIP text follows on the lines below.
    tracing::debug!(
        target: SIP,
        call_id,
        message = %format_args!("SIP {dir} {way} {transport}:{peer}\n{text}")
    );
}

/// The Call-ID header's value (`Call-ID:` or the compact `i:`) in a message's header section.
pub fn call_id(text: &str) -> Option<&str> {
    text.lines()
        .skip(1)
        .take_while(|l| !l.trim_end_matches('\r').is_empty())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            let name = name.trim();
            (name.eq_ignore_ascii_case("call-id") || name.eq_ignore_ascii_case("i"))
                .then(|| value.trim())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_id_in_full_and_compact_form() {
        let m = "INVITE sip:1@x SIP/2.0\r\nVia: SIP/2.0/UDP h\r\nCall-ID:  abc@h \r\n\r\ni: body";
        assert_eq!(call_id(m), Some("abc@h"));
        assert_eq!(call_id("SIP/2.0 200 OK\ni: z9\n\n"), Some("z9"));
        assert_eq!(
            call_id("OPTIONS sip:x SIP/2.0\nTo: <sip:x>\n\nCall-ID: body"),
            None
        );
    }
}

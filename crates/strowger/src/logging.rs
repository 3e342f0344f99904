//! The server's log: `tracing` events written to stderr by `tracing-subscriber`, as text or as
//! JSON lines (`general.log_format`), from `general.log_level` up. `--log-level` overrides the
//! file, and RUST_LOG (a level, or `tracing` targets such as `warn,strowger::sip=debug`)
//! overrides both; a reload applies a changed `general.log_level` unless RUST_LOG is set (a
//! `--log-level` is put on the reloaded file again, so it holds). The filter sits behind a
//! reload handle: an event's callsite is checked once against the level, as before.
//!
//! SIP messages are traced at debug under the target [`SIP`], like Asterisk's `sip set debug
//! on`: every message a worker reads or sends, whole. At info and above nothing of them is
//! formatted ([`sip_enabled`] is checked first).
//!
//! Security events (failed authentications, scanners, bans) go to the target [`SECURITY`] and,
//! when `general.security_log` names a file, to that file too, one line each in a format that
//! never changes with `general.log_format` and that nothing but these events writes:
//! `2026-11-26T08:14:28.123Z strowger[4242]: security: auth_failed source=192.0.2.7
//! user="1001@strowger" reason="wrong password"`. contrib/fail2ban reads it. Every value a peer
//! chose (a user name, a User-Agent) is quoted with its quotes, backslashes and control
//! characters escaped, so no peer can write a line that names another source.

use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};
use switch::config::{LogFormat, LogLevel};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, Layer, Registry};

/// The target of the SIP message trace.
pub const SIP: &str = "strowger::sip";
/// The target of security events.
pub const SECURITY: &str = "strowger::security";

static SECURITY_LOG: OnceLock<Mutex<std::fs::File>> = OnceLock::new();

/// The level filter's handle, while `general.log_level` governs it (not RUST_LOG).
static LEVEL: OnceLock<reload::Handle<Targets, Registry>> = OnceLock::new();

/// Opens (appends to, creating it) the security log; the process writes it from then on.
pub fn open_security_log(path: &Path) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let _ = SECURITY_LOG.set(Mutex::new(f));
    Ok(())
}

/// One security event: `what` is its kind and fields (`auth_failed source=… user="…" …`),
/// written to the main log (warn, target [`SECURITY`]) and to the security log file.
pub fn security(what: std::fmt::Arguments<'_>) {
    tracing::warn!(target: SECURITY, "{what}");
    if let Some(f) = SECURITY_LOG.get() {
        let line = format!(
            "{} strowger[{}]: security: {what}\n",
            rfc3339(SystemTime::now()),
            std::process::id()
        );
        if let Ok(mut f) = f.lock() {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// `2026-11-26T08:14:28.123Z`: UTC, milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Installs the process's subscriber: stderr, a timestamp on every line, events at `level` and
/// more severe (or as RUST_LOG says). Called once, by `main` for the server; a second call
/// changes nothing.
pub fn init(level: LogLevel, format: LogFormat) {
    let from_env = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .and_then(|v| match v.parse::<Targets>() {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("strowger: RUST_LOG={v:?} ignored ({e}): general.log_level applies");
                None
            }
        });
    let governed = from_env.is_none();
    let targets = from_env.unwrap_or_else(|| Targets::new().with_default(filter(level)));
    let (targets, handle) = reload::Layer::new(targets);
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    let fmt = match format {
        LogFormat::Text => fmt.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => fmt.json().with_ansi(false).boxed(),
    };
    if tracing_subscriber::registry()
        .with(targets)
        .with(fmt)
        .try_init()
        .is_ok()
        && governed
    {
        let _ = LEVEL.set(handle);
    }
}

/// Applies a reloaded `general.log_level`; false when RUST_LOG governs the log instead.
pub fn set_level(level: LogLevel) -> bool {
    LEVEL
        .get()
        .is_some_and(|h| h.reload(Targets::new().with_default(filter(level))).is_ok())
}

fn filter(level: LogLevel) -> LevelFilter {
    match level {
        LogLevel::Error => LevelFilter::ERROR,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Trace => LevelFilter::TRACE,
    }
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

/// How `sip.listen` and the log write a transport.
pub fn transport_name(t: sip::transaction::Transport) -> &'static str {
    match t {
        sip::transaction::Transport::Udp => "udp",
        sip::transaction::Transport::Tcp => "tcp",
        sip::transaction::Transport::Tls => "tls",
        sip::transaction::Transport::Ws => "ws",
        sip::transaction::Transport::Wss => "wss",
    }
}

/// Traces one SIP message (call only when [`sip_enabled`]): direction, transport, the peer's
/// address, its Call-ID as a field, and the whole text.
pub fn sip(dir: Dir, transport: sip::transaction::Transport, peer: SocketAddr, bytes: &[u8]) {
    let transport = transport_name(transport);
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
    fn rfc3339_in_utc_with_milliseconds() {
        let t = |s: u64, ms: u64| UNIX_EPOCH + std::time::Duration::from_millis(s * 1000 + ms);
        assert_eq!(rfc3339(t(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(t(951_782_400, 5)), "2000-02-29T00:00:00.005Z");
        assert_eq!(rfc3339(t(1_795_680_868, 123)), "2026-11-26T08:14:28.123Z");
    }

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

//! A configuration reload: a new configuration, checked as `strowger check-config` checks it,
//! handed to every worker's engine as [`Input::Reload`](crate::Input::Reload). The engine swaps
//! its dialplan and settings; calls in progress keep running.
//!
//! A call keeps the steps of the dialplan rule it matched (a `Route` holds its own copy), so a
//! call mid-dialplan finishes that rule as it started; what it looks up afterwards (a `goto`, a
//! menu, a user's context) is looked up in the new configuration.
//!
//! Some settings are bound at start into sockets, threads or state shared by every worker
//! ([`needs_restart`]): a reload reports them and leaves them as they are.

use crate::config::Config;
use crate::dialplan::Dialplan;
use crate::engine::Engine;
use crate::moh::Music;
use std::sync::Arc;
use std::time::Instant;

/// A checked configuration for every worker, with the one dialplan they share.
pub struct Reload {
    pub config: Config,
    pub dialplan: Arc<Dialplan>,
    /// The music classes read again by the shell (None: those in force stay).
    pub music: Option<Arc<Music>>,
}

impl Reload {
    pub fn new(config: Config) -> Reload {
        let dialplan = Arc::new(config.dialplan.clone());
        Reload {
            config,
            dialplan,
            music: None,
        }
    }

    /// With the music classes the shell loaded for `config` (`[moh.*]`): the next hold plays
    /// them; a hold playing keeps its tracks (a leg holds its own `Arc<Playlist>`).
    pub fn with_music(mut self, music: Arc<Music>) -> Reload {
        self.music = Some(music);
        self
    }
}

/// The keys that differ between `old` and `new` but take effect only at the next start: the
/// sockets (listen addresses, RTP ports, the TCP connection cap), the TLS certificates, the
/// worker threads, the data directory and the files in it, the store connection, the IAX2
/// socket and endpoint settings, and the speech engine. The rest reloads in place: trunks
/// (`Engine::trunks_reload`), queues with their callers (`Board::reconfigure`), music classes
/// (read again by the shell, `Reload::with_music`), IAX2 peers (`Iax::reconfigure`), and the
/// WebSocket path, Origins and limits and the other connection limits (the shell's workers).
pub fn needs_restart(old: &Config, new: &Config) -> Vec<&'static str> {
    let (o, n) = (old, new);
    [
        ("general.data_dir", o.general.data_dir != n.general.data_dir),
        ("general.workers", o.general.workers != n.general.workers),
        ("general.cdr", o.general.cdr != n.general.cdr),
        (
            "general.security_log",
            o.general.security_log != n.general.security_log,
        ),
        (
            "general.log_format",
            o.general.log_format != n.general.log_format,
        ),
        (
            "general.realtime_priority",
            o.general.realtime_priority != n.general.realtime_priority,
        ),
        (
            "general.dns_server",
            o.general.dns_server != n.general.dns_server,
        ),
        // Every listener, `ws:`/`wss:` ones too (their path, Origins and limits reload).
        ("sip.listen", o.sip.listen != n.sip.listen),
        // The rustls configurations are built once, at start (sip_io::tls): the `wss:`
        // listeners' certificate too.
        ("sip.tls_*", o.sip.tls != n.sip.tls),
        ("sip.t1_ms", o.sip.t1 != n.sip.t1),
        ("sip.t2_ms", o.sip.t2 != n.sip.t2),
        ("sip.t4_ms", o.sip.t4 != n.sip.t4),
        (
            "sip.max_message_size",
            o.sip.max_message_size != n.sip.max_message_size,
        ),
        // Fitted to the file descriptor limit at start (beside the RTP sockets).
        ("security.tcp_max", o.security.tcp_max != n.security.tcp_max),
        ("rtp.ports", o.rtp.ports != n.rtp.ports),
        ("rtp.shared_ports", o.rtp.shared_ports != n.rtp.shared_ports),
        (
            "rtp.speex_quality",
            o.rtp.speex_quality != n.rtp.speex_quality,
        ),
        ("rtp.opus_*", o.rtp.opus != n.rtp.opus),
        ("registrar.store", o.registrar.store != n.registrar.store),
        // The IAX2 socket and the endpoint's own settings; the peers reload (Iax::reconfigure).
        ("iax2.listen", o.iax2.listen != n.iax2.listen),
        ("iax2.call_tokens", o.iax2.call_tokens != n.iax2.call_tokens),
        (
            "iax2.calltoken_optional",
            o.iax2.calltoken_optional != n.iax2.calltoken_optional,
        ),
        (
            "iax2.max_calls_per_ip",
            o.iax2.max_calls_per_ip != n.iax2.max_calls_per_ip,
        ),
        ("sounds.tts", o.ivr.tts != n.ivr.tts),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// `new` with every key [`needs_restart`] names as it is in `old`, where the rest of the
/// process reads it from the configuration.
pub fn keep_restart_keys(old: &Config, mut new: Config) -> Config {
    let g = &old.general;
    new.general.data_dir = g.data_dir.clone();
    new.general.workers = g.workers;
    new.general.cdr = g.cdr.clone();
    new.general.security_log = g.security_log.clone();
    new.general.log_format = g.log_format;
    new.general.realtime_priority = g.realtime_priority;
    new.general.dns_server = g.dns_server;
    new.sip.listen = old.sip.listen.clone();
    new.sip.tls = old.sip.tls.clone();
    (new.sip.t1, new.sip.t2, new.sip.t4) = (old.sip.t1, old.sip.t2, old.sip.t4);
    new.sip.max_message_size = old.sip.max_message_size;
    new.security.tcp_max = old.security.tcp_max;
    new.rtp.ports = old.rtp.ports;
    new.rtp.shared_ports = old.rtp.shared_ports;
    new.rtp.speex_quality = old.rtp.speex_quality;
    new.rtp.opus = old.rtp.opus;
    new.registrar.store = old.registrar.store.clone();
    new.iax2.listen = old.iax2.listen;
    new.iax2.call_tokens = old.iax2.call_tokens;
    new.iax2.calltoken_optional = old.iax2.calltoken_optional.clone();
    new.iax2.max_calls_per_ip = old.iax2.max_calls_per_ip;
    new.ivr.tts = old.ivr.tts.clone();
    new
}

impl Engine {
    /// Takes `r`'s settings and dialplan (the process keeps the keys a restart changes as they
    /// were, [`keep_restart_keys`]). What the workers share from the start (call slots, the
    /// nonce secret, the queue board, the rendezvous) stays; the call limit is set anew, the
    /// board takes the new queues, and music classes the shell read again replace the old.
    pub(crate) fn reload(&mut self, r: &Reload, now: Instant) {
        let cfg = &r.config;
        let old = &self.s;
        let registrar = crate::registrar::Registrar::new(&cfg.registrar, old.registrar.secret);
        let mut s = crate::Settings::new(
            cfg,
            &old.listen,
            old.media_ip,
            old.slots.clone(),
            registrar,
            old.worker,
            old.workers,
        );
        // Bound at start (the shell's sockets and threads), whatever the file now says.
        s.data_dir = old.data_dir.clone();
        s.timers = old.timers;
        s.shared_ports = old.shared_ports;
        s.max_datagram = old.max_datagram;
        s.rendezvous = old.rendezvous.clone();
        s.queues = old.queues.clone();
        s.queues.reconfigure(&cfg.queues);
        s.music = r.music.clone().unwrap_or_else(|| old.music.clone());
        s.slots.set_max(cfg.general.max_calls as usize);
        if s.dispatch != old.dispatch {
            self.dispatch = crate::dispatch::Dispatch::new(&s.dispatch, now);
        }
        self.guard.reconfigure(&s.security);
        self.media.set_dtmf_mode(s.dtmf);
        self.dialplan = r.dialplan.clone();
        self.s = s;
        self.trunks_reload(now);
        self.queues_reload();
        if let Some(iax) = self.iax.as_mut() {
            iax.reconfigure(&cfg.iax2, self.clock);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(head: &str) -> Config {
        let rules = "[[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"echo\"]\n";
        Config::from_str(&format!("{head}{rules}"), "test.toml").unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn restart_keys_are_named_and_kept() {
        let old = config("[general]\nworkers = 2\nmax_calls = 10\n");
        let new =
            config("[general]\nworkers = 4\nmax_calls = 20\n[rtp]\nports = \"20000-20999\"\n");
        assert_eq!(needs_restart(&old, &new), ["general.workers", "rtp.ports"]);
        let kept = keep_restart_keys(&old, new);
        assert_eq!(kept.general.workers, 2);
        assert_eq!(kept.rtp.ports, old.rtp.ports);
        assert_eq!(kept.general.max_calls, 20, "a limit is applied");
        assert!(needs_restart(&old, &kept).is_empty());
    }

    #[test]
    fn trunks_queues_music_and_iax2_peers_reload_but_the_iax2_socket_does_not() {
        let old = config("");
        let parts = "[[trunks]]\nname = \"p\"\nhost = \"127.0.0.5\"\n\
                     [queues.q]\nmembers = [\"1001\"]\n[moh.jazz]\ndirectory = \"jazz\"\n\
                     [[iax2.peers]]\nname = \"x\"\nhost = \"127.0.0.6\"\n";
        let new = config(parts);
        assert!(needs_restart(&old, &new).is_empty());
        let kept = keep_restart_keys(&old, new.clone());
        assert_eq!((kept.trunks, kept.queues), (new.trunks, new.queues));
        assert_eq!((kept.music, kept.iax2.peers), (new.music, new.iax2.peers));
        let listening = config(&format!("[iax2]\nlisten = \"127.0.0.1:4569\"\n{parts}"));
        assert_eq!(needs_restart(&old, &listening), ["iax2.listen"]);
        assert_eq!(keep_restart_keys(&old, listening).iax2.listen, None);
    }

    #[test]
    fn websocket_settings_reload_but_listeners_and_the_connection_cap_do_not() {
        let old = config("");
        let ws = "[sip]\nws_path = \"/sip\"\nws_origins = [\"https://a.example\"]\n\
                  ws_max_connections = 2\nws_ping_s = 5\n[security]\ntcp_idle_s = 60\n";
        let new = config(ws);
        assert!(needs_restart(&old, &new).is_empty());
        assert_eq!(keep_restart_keys(&old, new.clone()).sip.ws, new.sip.ws);
        let moved = config("[sip]\nlisten = [\"wss:127.0.0.1:8090\"]\n[security]\ntcp_max = 10\n");
        assert_eq!(
            needs_restart(&old, &moved),
            ["sip.listen", "security.tcp_max"]
        );
        let kept = keep_restart_keys(&old, moved);
        assert_eq!(kept.sip.listen, old.sip.listen);
        assert_eq!(kept.security.tcp_max, old.security.tcp_max);
    }

    #[test]
    fn tls_settings_need_a_restart() {
        let old = config("");
        let new = config("[sip]\ntls_handshake_s = 3\n");
        assert_eq!(needs_restart(&old, &new), ["sip.tls_*"]);
        assert_eq!(keep_restart_keys(&old, new).sip.tls, old.sip.tls);
    }
}

//! Debian's baresip, headless: file audio in (the aufile source), what it decodes dumped to a
//! WAV (the sndfile filter), bound to 127.0.0.1 only, run for a bounded time.

use super::audio::{read_wav, Wav};
use super::net::{free_port, free_port_range};
use super::{read_text, tail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// An accounts line registering `user` with `password` to strowger at `sip` (every 600 s), PCMU
/// only; `extra`: more parameters, e.g. `;answermode=auto`.
pub fn account(sip: std::net::SocketAddr, user: &str, password: &str, extra: &str) -> String {
    format!(
        "<sip:{user}@127.0.0.1:{port}>;auth_pass={password};regint=600;audio_codecs=PCMU{extra}",
        port = sip.port()
    )
}

/// One baresip run in its own config directory under `dir`.
pub struct Baresip {
    child: Option<Child>,
    conf: PathBuf,
    /// Its console (the cons module): commands sent here as UDP datagrams run as if typed.
    console: u16,
}

impl Baresip {
    /// Starts baresip with one account (`account`: a line of baresip's accounts file), playing
    /// `source` (8 kHz 16-bit mono WAV) into its calls, running `commands` (`-e`), quitting
    /// after `run_s` seconds.
    pub fn spawn(
        dir: &Path,
        label: &str,
        account: &str,
        source: &Path,
        commands: &[&str],
        run_s: u32,
    ) -> Baresip {
        Baresip::spawn_at("127.0.0.1", dir, label, account, source, commands, run_s)
    }

    /// [`Baresip::spawn`] with SIP and RTP on another loopback address (::1 too).
    pub fn spawn_at(
        ip: &str,
        dir: &Path,
        label: &str,
        account: &str,
        source: &Path,
        commands: &[&str],
        run_s: u32,
    ) -> Baresip {
        Baresip::spawn_with(ip, dir, label, account, source, commands, run_s, "")
    }

    /// [`Baresip::spawn_at`] with more lines for its config file (e.g. `sip_cafile PATH`).
    #[allow(clippy::too_many_arguments)]
    pub fn spawn_with(
        ip: &str,
        dir: &Path,
        label: &str,
        account: &str,
        source: &Path,
        commands: &[&str],
        run_s: u32,
        extra_config: &str,
    ) -> Baresip {
        let conf = dir.join(format!("baresip-{label}"));
        let dumps = conf.join("dumps");
        std::fs::create_dir_all(&dumps).unwrap();
        let rtp = free_port_range(10);
        let console = free_port();
        let sip = std::net::SocketAddr::new(ip.parse().unwrap(), free_port());
        let family = if sip.is_ipv6() { "-6" } else { "-4" };
        let config = format!(
            "poll_method epoll\n\
             sip_listen {sip}\n\
             net_interface {ip}\n\
             rtp_ports {rtp}-{rtp_hi}\n\
             call_local_timeout 10\n\
             audio_source aufile,{source}\n\
             audio_player nil\n\
             audio_alert nil\n\
             ausrc_srate 8000\n\
             auplay_srate 8000\n\
             ausrc_channels 1\n\
             auplay_channels 1\n\
             module_path /usr/lib/baresip/modules\n\
             module g711.so\n\
             module aufile.so\n\
             module sndfile.so\n\
             module cons.so\n\
             cons_listen 127.0.0.1:{console}\n\
             snd_path {dumps}\n\
             module_tmp account.so\n\
             module_app menu.so\n\
             {extra_config}\n",
            rtp_hi = rtp + 9,
            source = source.display(),
            dumps = dumps.display(),
        );
        std::fs::write(conf.join("config"), config).unwrap();
        std::fs::write(conf.join("accounts"), format!("{account}\n")).unwrap();
        let log = std::fs::File::create(conf.join("baresip.log")).unwrap();
        let mut cmd = Command::new("timeout");
        cmd.args([format!("{}", run_s + 20), "baresip".into(), family.into()])
            .arg("-f")
            .arg(&conf);
        for c in commands {
            cmd.args(["-e", c]);
        }
        let child = cmd
            .args(["-t", &run_s.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("run baresip (scripts/setup.sh installs it)");
        Baresip {
            child: Some(child),
            conf,
            console,
        }
    }

    /// Waits up to 10 s for its registration to be accepted (a 200 OK in its log); panics
    /// with its log otherwise.
    pub fn wait_registered(&self, who: &str) {
        let registered = super::wait_for(std::time::Duration::from_secs(10), || {
            self.log().contains("200 OK").then_some(())
        });
        assert!(
            registered.is_some(),
            "{who} did not register; its log:\n{}",
            self.log()
        );
    }

    /// Runs `command` (e.g. `/hold`, `/transfer sip:…`) now, as if typed at its console.
    pub fn command(&self, command: &str) {
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.send_to(
            format!("{command}\n").as_bytes(),
            ("127.0.0.1", self.console),
        )
        .unwrap();
    }

    /// Its log so far (status lines that redraw with \r split into lines, audio meters dropped).
    pub fn log(&self) -> String {
        read_text(&self.conf.join("baresip.log"))
            .replace('\r', "\n")
            .lines()
            .filter(|l| !l.contains("audio="))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits for it to quit, checks it had a call established, and returns what it decoded.
    pub fn finish(mut self, what: &str) -> Wav {
        let status = self.child.take().unwrap().wait().unwrap();
        let log = self.log();
        assert!(
            status.success(),
            "baresip ({what}) exited {status}; its log:\n{}",
            tail(&log, 40)
        );
        assert!(
            log.contains("Call established"),
            "baresip ({what}) never had its call established; its log:\n{}",
            tail(&log, 40)
        );
        let dec = std::fs::read_dir(self.conf.join("dumps"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with("-dec.wav"))
            .unwrap_or_else(|| {
                panic!(
                    "no decoded-audio dump ({what}); baresip log:\n{}",
                    tail(&log, 40)
                )
            });
        let wav = read_wav(&dec);
        assert_eq!((wav.rate, wav.channels), (8000, 1));
        wav
    }
}

impl Drop for Baresip {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

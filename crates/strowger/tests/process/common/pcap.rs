//! Media as pcap files: a caller's RTP stream written here for SIPp's `play_pcap_audio` (µ-law
//! audio, tones included, and RFC 4733 events, timed 20 ms apart), and what strowger sent
//! read back from a `dumpcap` capture on the loopback device (scripts/setup.sh installs
//! tshark, which brings dumpcap). SIPp replaces the addresses and ports of the packets it plays
//! with the call's, so those written here are placeholders.

use super::sip::RtpPkt;
use super::wait_for;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A packet every 20 ms: 160 µ-law samples.
const FRAME: usize = 160;
/// The payload type SIPp's scenarios give telephone-event (tests/sipp/media_uac.xml).
pub const EVENT_PT: u8 = 101;

/// One RTP stream (PCMU or PCMA, and telephone-event), built in order and written as a pcap.
pub struct Stream {
    /// The law of `audio` (PCMU unless [`Stream::pcma`]).
    law: codec::G711,
    seq: u16,
    ts: u32,
    /// Packets with the time each leaves at, from the stream's start.
    packets: Vec<(Duration, Vec<u8>)>,
    next: Duration,
}

impl Default for Stream {
    fn default() -> Self {
        Stream {
            law: codec::G711::Pcmu,
            seq: 4000,
            ts: 80_000,
            packets: Vec::new(),
            next: Duration::ZERO,
        }
    }
}

impl Stream {
    /// `samples` as 20 ms PCMU (or PCMA) packets (a last partial frame is left out).
    pub fn audio(&mut self, samples: &[i16]) -> &mut Stream {
        let pt = pt_of(self.law);
        for frame in samples.chunks_exact(FRAME) {
            let payload: Vec<u8> = frame.iter().map(|&s| self.law.encode_sample(s)).collect();
            self.packet(pt, false, &payload, FRAME as u32, true);
        }
        self
    }

    /// The law of its audio.
    pub fn law(&self) -> codec::G711 {
        self.law
    }

    /// Audio from here on is PCMA (payload type 8), for a far end that answered it.
    pub fn pcma(&mut self) -> &mut Stream {
        self.law = codec::G711::Pcma;
        self
    }

    /// `ms` of silence.
    pub fn silence(&mut self, ms: usize) -> &mut Stream {
        self.audio(&vec![0; ms * 8])
    }

    /// Each of `keys` as RFC 4733 events lasting 100 ms (a start with the marker, updates, the
    /// end three times, as phones send them), with 200 ms of silence after each.
    pub fn events(&mut self, keys: &str) -> &mut Stream {
        for key in keys.chars() {
            let event = match key {
                '*' => 10,
                '#' => 11,
                d => d.to_digit(10).expect("a DTMF key") as u8,
            };
            for (i, dur) in [160u16, 320, 480, 640, 800, 800, 800]
                .into_iter()
                .enumerate()
            {
                let end = if i >= 4 { 0x80 } else { 0 };
                let payload = [event, end | 10, (dur >> 8) as u8, dur as u8];
                // The end's two repeats go out together, 20 ms after it.
                let paced = i <= 4;
                self.packet(EVENT_PT, i == 0, &payload, 0, paced);
            }
            self.ts = self.ts.wrapping_add(800);
            self.silence(200);
        }
        self
    }

    /// Each of `keys` as its two tones in the audio (−10 dBm0 each) for 100 ms, with 200 ms of
    /// silence after each: what a phone without telephone-event sends.
    pub fn tones(&mut self, keys: &str) -> &mut Stream {
        let rows = ["123A", "456B", "789C", "*0#D"];
        for key in keys.chars() {
            let row = rows
                .iter()
                .position(|r| r.contains(key))
                .expect("a DTMF key");
            let col = rows[row].find(key).unwrap();
            let (r, c) = (
                [697.0, 770.0, 852.0, 941.0][row],
                [1209.0, 1336.0, 1477.0, 1633.0][col],
            );
            let amp = 22_300.0 * 10f64.powf(-10.0 / 20.0);
            let pcm: Vec<i16> = (0..800)
                .map(|n| {
                    let w = 2.0 * std::f64::consts::PI * n as f64 / 8000.0;
                    (amp * ((w * r).sin() + (w * c).sin())) as i16
                })
                .collect();
            self.audio(&pcm).silence(200);
        }
        self
    }

    /// How long the stream plays.
    pub fn duration(&self) -> Duration {
        self.next
    }

    fn packet(&mut self, pt: u8, marker: bool, payload: &[u8], ts_step: u32, paced: bool) {
        let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
        p.extend_from_slice(&self.seq.to_be_bytes());
        p.extend_from_slice(&self.ts.to_be_bytes());
        p.extend_from_slice(&0x5349_5050u32.to_be_bytes());
        p.extend_from_slice(payload);
        self.packets.push((self.next, p));
        self.seq = self.seq.wrapping_add(1);
        self.ts = self.ts.wrapping_add(ts_step);
        if paced {
            self.next += Duration::from_millis(20);
        }
    }

    /// The stream as a pcap file (Ethernet, IPv4, UDP).
    pub fn pcap(&self) -> Vec<u8> {
        let mut out = Vec::new();
        // Global header: magic, version 2.4, zone, accuracy, snap length, Ethernet.
        out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        out.extend_from_slice(&2u16.to_le_bytes());
        out.extend_from_slice(&4u16.to_le_bytes());
        for word in [0u32, 0, 65_535, 1] {
            out.extend_from_slice(&word.to_le_bytes());
        }
        for (at, rtp) in &self.packets {
            let udp_len = 8 + rtp.len();
            let ip_len = 20 + udp_len;
            let frame_len = 14 + ip_len;
            out.extend_from_slice(&(at.as_secs() as u32).to_le_bytes());
            out.extend_from_slice(&at.subsec_micros().to_le_bytes());
            out.extend_from_slice(&(frame_len as u32).to_le_bytes());
            out.extend_from_slice(&(frame_len as u32).to_le_bytes());
            out.extend_from_slice(&[0; 12]);
            out.extend_from_slice(&[0x08, 0x00]);
            let mut ip = vec![0x45, 0];
            ip.extend_from_slice(&(ip_len as u16).to_be_bytes());
            ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]);
            let sum = !ip
                .chunks(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .fold(0u32, |a, w| {
                    let s = a + w;
                    (s & 0xffff) + (s >> 16)
                }) as u16;
            ip[10..12].copy_from_slice(&sum.to_be_bytes());
            out.extend_from_slice(&ip);
            for port in [40_000u16, 40_002] {
                out.extend_from_slice(&port.to_be_bytes());
            }
            out.extend_from_slice(&(udp_len as u16).to_be_bytes());
            out.extend_from_slice(&[0, 0]);
            out.extend_from_slice(rtp);
        }
        out
    }
}

/// A `dumpcap` capture of loopback UDP, stopped on `finish` (or killed on drop).
pub struct Capture {
    child: Option<Child>,
    file: PathBuf,
    log: PathBuf,
}

impl Capture {
    /// Captures the UDP datagrams on lo that `filter` (a capture filter) takes, into a pcap in
    /// `dir`; returns once dumpcap is capturing.
    pub fn start(dir: &Path, filter: &str) -> Capture {
        let file = dir.join("capture.pcap");
        let log = dir.join("dumpcap.log");
        let child = Command::new("dumpcap")
            .args(["-q", "-P", "-i", "lo", "-f", filter, "-w"])
            .arg(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .expect("spawn dumpcap (scripts/setup.sh installs tshark)");
        let mut c = Capture {
            child: Some(child),
            file,
            log,
        };
        let started = wait_for(Duration::from_secs(10), || {
            super::read_text(&c.log)
                .contains("Capturing on")
                .then_some(())
        });
        if started.is_none() {
            let _ = c.child.take().map(|mut ch| ch.kill());
            panic!(
                "dumpcap did not start capturing (it needs CAP_NET_RAW):\n{}",
                super::read_text(&c.log)
            );
        }
        c
    }

    /// Stops the capture and returns the UDP datagrams it holds: (source port, destination
    /// port, payload).
    pub fn finish(mut self) -> Vec<(u16, u16, Vec<u8>)> {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let exited = wait_for(Duration::from_secs(5), || child.try_wait().ok().flatten());
            if exited.is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        udp_datagrams(&std::fs::read(&self.file).expect("read the capture"))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The UDP datagrams (IPv4 and IPv6) of a little-endian pcap of Ethernet frames (what dumpcap
/// writes for lo).
fn udp_datagrams(pcap: &[u8]) -> Vec<(u16, u16, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let incl = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..(at + 16 + incl).min(pcap.len())];
        at += 16 + incl;
        let Some(ip) = frame.get(14..) else { continue };
        let udp = match frame[12..14] {
            [0x08, 0x00] if ip.len() >= 28 && ip[9] == 17 => &ip[usize::from(ip[0] & 0x0f) * 4..],
            // IPv6 with UDP as the next header (no extension headers on lo).
            [0x86, 0xdd] if ip.len() >= 48 && ip[6] == 17 => &ip[40..],
            _ => continue,
        };
        let port = |i: usize| u16::from_be_bytes([udp[i], udp[i + 1]]);
        for d in rtp_segments(&udp[8..]) {
            out.push((port(0), port(2), d.to_vec()));
        }
    }
    out
}

/// `d` split into the RTP packets it carries. strowger sends consecutive packets of one size to
/// one address as one segmented message (UDP_SEGMENT), and a capture on lo is taken before the
/// kernel splits it: such a datagram is a run of equal-sized RTP packets of one SSRC, found
/// here by the smallest size whose every chunk starts with a version-2 header and that SSRC.
pub fn rtp_segments(d: &[u8]) -> Vec<&[u8]> {
    let rtp = |c: &[u8]| c.len() >= 12 && c[0] >> 6 == 2;
    let whole = vec![d];
    if !rtp(d) || (200..=204).contains(&d[1]) {
        return whole;
    }
    let ssrc = &d[8..12];
    (12..=d.len() / 2)
        .filter(|size| d.len().is_multiple_of(*size))
        .find(|&size| d.chunks(size).all(|c| rtp(c) && &c[8..12] == ssrc))
        .map_or(whole, |size| d.chunks(size).collect())
}

/// The µ-law audio (payload type 0) of the RTP packets among `datagrams` sent from a port
/// in `from`, in the order captured.
pub fn pcmu_from(datagrams: &[(u16, u16, Vec<u8>)], from: (u16, u16)) -> Vec<i16> {
    g711_from(datagrams, from, codec::G711::Pcmu)
}

/// The audio of `law` (by its payload type) of the RTP packets among `datagrams` sent from a
/// port in `from`, in the order captured.
pub fn g711_from(
    datagrams: &[(u16, u16, Vec<u8>)],
    from: (u16, u16),
    law: codec::G711,
) -> Vec<i16> {
    datagrams
        .iter()
        .filter(|(src, ..)| (from.0..=from.1).contains(src))
        .filter_map(|(.., d)| RtpPkt::parse(d))
        .filter(|p| p.pt == pt_of(law))
        .flat_map(|p| {
            p.payload
                .iter()
                .map(|&c| law.decode_sample(c))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn pt_of(law: codec::G711) -> u8 {
    match law {
        codec::G711::Pcmu => 0,
        codec::G711::Pcma => 8,
    }
}

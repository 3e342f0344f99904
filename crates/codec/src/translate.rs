//! The translation graph: measured cost of every decode, encode, resample and
//! direct step, and the cheapest path between any two formats (like Asterisk's
//! `core show translation`), plus [`Translator`], which runs a path on a stream.

use std::fmt::Write as _;
use std::sync::OnceLock;

use crate::ffi;
use crate::resample::Resampler;
use crate::{samples_at, CodecError, Decoder, Encoder, Format, G711};

/// The linear rates the graph converts between.
pub const SLIN_RATES: [u32; 3] = [8000, 16000, 48000];

/// A vertex of the graph: a wire format or linear PCM at a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    Codec(Format),
    Slin(u32),
}

impl Node {
    pub fn name(self) -> String {
        match self {
            Node::Codec(f) => f.name().to_string(),
            Node::Slin(8000) => "slin".into(),
            Node::Slin(r) => format!("slin{}", r / 1000),
        }
    }

    /// The highest rate of linear audio the node carries.
    fn rate(self) -> u32 {
        match self {
            Node::Codec(f) => f.pcm_rate(),
            Node::Slin(r) => r,
        }
    }

    pub fn from_name(s: &str) -> Option<Node> {
        match s.to_ascii_lowercase().as_str() {
            "slin" | "slin8" => Some(Node::Slin(8000)),
            "slin16" => Some(Node::Slin(16000)),
            "slin48" => Some(Node::Slin(48000)),
            n => Format::from_name(n).map(Node::Codec),
        }
    }
}

/// One step of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Decode to linear audio at a rate (one of [`Format::pcm_rates`]).
    Decode(Format, u32),
    /// Encode linear audio at a rate.
    Encode(Format, u32),
    Resample(u32, u32),
    /// PCMU<->PCMA by a 256-byte table, never through linear.
    Table(Format, Format),
}

/// The cheapest way from one node to another and its cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub steps: Vec<Step>,
    /// µs of CPU per second of audio.
    pub cost_us: f64,
}

/// Measured step costs and all-pairs cheapest paths.
#[derive(Debug, Clone)]
pub struct Graph {
    nodes: Vec<Node>,
    /// `best[i][j]`: cheapest path from node i to node j.
    best: Vec<Vec<Option<Path>>>,
}

/// This thread's CPU time in µs (what every cost here is measured in).
pub fn cpu_now() -> f64 {
    let mut t = ffi::Timespec { sec: 0, nsec: 0 };
    // SAFETY: writes the thread's CPU clock into `t`.
    unsafe { ffi::clock_gettime(ffi::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.sec as f64 * 1e6 + t.nsec as f64 / 1e3
}

/// Deterministic speech-like test audio: a gliding voiced source with
/// harmonics under a few formant-like weights, a syllable envelope and a little noise.
pub fn test_signal(rate: u32, ms: u32) -> Vec<i16> {
    let n = (rate / 1000 * ms) as usize;
    let mut rng = 0x1234_5678u32;
    let mut phase = 0.0f64;
    (0..n)
        .map(|i| {
            let t = i as f64 / rate as f64;
            let f0 = 140.0 + 40.0 * (2.0 * std::f64::consts::PI * 0.7 * t).sin();
            phase += f0 / rate as f64;
            let mut v = 0.0;
            for h in 1..=20 {
                let f = f0 * h as f64;
                if f > rate as f64 / 2.0 - 200.0 {
                    break;
                }
                let w = (-((f - 700.0) / 400.0).powi(2)).exp()
                    + 0.6 * (-((f - 1800.0) / 500.0).powi(2)).exp()
                    + 0.3 * (-((f - 3000.0) / 600.0).powi(2)).exp();
                v += w * (2.0 * std::f64::consts::PI * phase * h as f64).sin();
            }
            let env = 0.55 + 0.45 * (2.0 * std::f64::consts::PI * 4.0 * t).sin();
            rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let noise = (rng >> 16) as f64 / 65536.0 - 0.5;
            ((v * env * 5000.0) + noise * 300.0).clamp(-32000.0, 32000.0) as i16
        })
        .collect()
}

/// CPU µs per second of audio of running `f` over `packets` packets of 20 ms, best of `reps`.
fn time_per_second(reps: usize, audio_ms: u32, mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t0 = cpu_now();
        f();
        best = best.min(cpu_now() - t0);
    }
    best * 1000.0 / audio_ms as f64
}

/// Measures one step on `audio_ms` of test audio in the format's packets.
pub fn measure_step(step: Step, audio_ms: u32, reps: usize) -> f64 {
    match step {
        Step::Encode(f, rate) => {
            let pcm = test_signal(rate, audio_ms);
            let mut enc = f.encoder_at(rate, rate);
            let n = samples_at(rate, f.packet_ms());
            let mut out = vec![0u8; f.max_encoded_len(n)];
            time_per_second(reps, audio_ms, || {
                for p in pcm.chunks_exact(n) {
                    std::hint::black_box(enc.encode(p, &mut out).ok());
                }
            })
        }
        Step::Decode(f, rate) => {
            let packets = encode_packets(f, &test_signal(f.pcm_rate(), audio_ms));
            let mut dec = f.decoder_at(rate);
            let mut out = vec![0i16; samples_at(rate, f.packet_ms())];
            time_per_second(reps, audio_ms, || {
                for p in &packets {
                    std::hint::black_box(dec.decode(p, &mut out).ok());
                }
            })
        }
        Step::Resample(a, b) => {
            let pcm = test_signal(a, audio_ms);
            let mut r = Resampler::new(a, b);
            let mut out = vec![0i16; r.output_len((a / 50) as usize) + 16];
            time_per_second(reps, audio_ms, || {
                for p in pcm.chunks_exact((a / 50) as usize) {
                    std::hint::black_box(r.process(p, &mut out));
                }
            })
        }
        Step::Table(a, b) => {
            let (la, lb) = (law(a), law(b));
            let bytes = encode_packets(a, &test_signal(8000, audio_ms));
            let mut out = [0u8; 160];
            time_per_second(reps, audio_ms, || {
                for p in &bytes {
                    std::hint::black_box(la.transcode(lb, p, &mut out));
                }
            })
        }
    }
}

/// `pcm` (at the format's rate) encoded in packets of [`Format::packet_ms`].
pub fn encode_packets(f: Format, pcm: &[i16]) -> Vec<Vec<u8>> {
    let mut enc = f.encoder();
    let n = f.samples_in(f.packet_ms());
    let mut buf = vec![0u8; f.max_encoded_len(n)];
    pcm.chunks_exact(n)
        .map(|p| {
            let n = enc.encode(p, &mut buf).expect("encode test audio");
            buf[..n].to_vec()
        })
        .collect()
}

fn law(f: Format) -> G711 {
    match f {
        Format::Pcma => G711::Pcma,
        _ => G711::Pcmu,
    }
}

impl Graph {
    /// Measures every step on `audio_ms` of audio (best of `reps`) and solves all pairs.
    pub fn measure(audio_ms: u32, reps: usize) -> Graph {
        Self::build(|s| measure_step(s, audio_ms, reps))
    }

    /// The graph bridges use, measured once per process on first use (200 ms of audio per
    /// step, best of 3: tens of milliseconds, so a server measures at start-up, before its first
    /// call, as Asterisk does; `strowger show translation` measures longer for its matrix).
    pub fn global() -> &'static Graph {
        static G: OnceLock<Graph> = OnceLock::new();
        G.get_or_init(|| Graph::measure(200, 3))
    }

    /// Builds from any cost function (µs per second of audio per step).
    pub fn build(mut cost: impl FnMut(Step) -> f64) -> Graph {
        let mut nodes: Vec<Node> = Format::all().iter().map(|&f| Node::Codec(f)).collect();
        nodes.extend(SLIN_RATES.iter().map(|&r| Node::Slin(r)));
        let idx = |n: Node| nodes.iter().position(|&m| m == n).unwrap();
        let count = nodes.len();
        let mut best: Vec<Vec<Option<Path>>> = vec![vec![None; count]; count];
        let mut edge = |from: Node, to: Node, step: Step, best: &mut Vec<Vec<Option<Path>>>| {
            best[idx(from)][idx(to)] = Some(Path {
                steps: vec![step],
                cost_us: cost(step),
            });
        };
        for &f in Format::all() {
            for &rate in f.pcm_rates() {
                let slin = Node::Slin(rate);
                edge(Node::Codec(f), slin, Step::Decode(f, rate), &mut best);
                edge(slin, Node::Codec(f), Step::Encode(f, rate), &mut best);
            }
        }
        for &a in &SLIN_RATES {
            for &b in &SLIN_RATES {
                if a != b {
                    edge(
                        Node::Slin(a),
                        Node::Slin(b),
                        Step::Resample(a, b),
                        &mut best,
                    );
                }
            }
        }
        for (a, b) in [(Format::Pcmu, Format::Pcma), (Format::Pcma, Format::Pcmu)] {
            edge(Node::Codec(a), Node::Codec(b), Step::Table(a, b), &mut best);
        }
        // Floyd-Warshall through linear nodes only: a path never decodes into
        // another lossy codec on the way (each codec hop would cost quality), nor
        // passes through a rate below what both ends carry (Opus decoded at 8 kHz
        // and resampled would be cheaper than at 16 kHz for G.722, and narrower).
        for k in 0..count {
            if !matches!(nodes[k], Node::Slin(_)) {
                continue;
            }
            for i in 0..count {
                for j in 0..count {
                    if i == j || nodes[k].rate() < nodes[i].rate().min(nodes[j].rate()) {
                        continue;
                    }
                    let (Some(a), Some(b)) = (&best[i][k], &best[k][j]) else {
                        continue;
                    };
                    let c = a.cost_us + b.cost_us;
                    if best[i][j].as_ref().is_none_or(|p| c < p.cost_us) {
                        let mut steps = a.steps.clone();
                        steps.extend_from_slice(&b.steps);
                        best[i][j] = Some(Path { steps, cost_us: c });
                    }
                }
            }
        }
        Graph { nodes, best }
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The cheapest path, `None` for `from == to` (no translation needed).
    pub fn path(&self, from: Node, to: Node) -> Option<&Path> {
        let i = self.nodes.iter().position(|&n| n == from)?;
        let j = self.nodes.iter().position(|&n| n == to)?;
        self.best[i][j].as_ref()
    }

    /// The matrix, rows = source, columns = destination, µs per second of audio.
    pub fn render_matrix(&self) -> String {
        let mut s = String::from(
            "         Translation times between formats (in microseconds of CPU) for one second of audio\n          Source Format (Rows) Destination Format (Columns)\n\n",
        );
        let w = 9;
        let _ = write!(s, "{:>w$}", "");
        for n in &self.nodes {
            let _ = write!(s, "{:>w$}", n.name());
        }
        s.push('\n');
        for (i, a) in self.nodes.iter().enumerate() {
            let _ = write!(s, "{:>w$}", a.name());
            for j in 0..self.nodes.len() {
                match &self.best[i][j] {
                    Some(p) => {
                        let _ = write!(s, "{:>w$.0}", p.cost_us);
                    }
                    None => {
                        let _ = write!(s, "{:>w$}", "-");
                    }
                }
            }
            s.push('\n');
        }
        s
    }

    /// Every codec-to-codec path with its steps (`core show translation paths`).
    pub fn render_paths(&self) -> String {
        let mut s = String::new();
        for (i, a) in self.nodes.iter().enumerate() {
            for (j, b) in self.nodes.iter().enumerate() {
                if let Some(p) = &self.best[i][j] {
                    let steps: Vec<String> = p.steps.iter().map(|s| format!("{s:?}")).collect();
                    let _ = writeln!(
                        s,
                        "{:>8} -> {:<8} {:>7.0} us/s  {}",
                        a.name(),
                        b.name(),
                        p.cost_us,
                        steps.join(" > ")
                    );
                }
            }
        }
        s
    }
}

/// Runs a path on one stream: payloads of `from` in, payloads of `to` out,
/// re-packetized to whatever duration the caller pulls.
pub struct Translator {
    from: Format,
    to: Format,
    decoder: Option<Box<dyn Decoder>>,
    /// The rates of the decoder's output and the encoder's input.
    rates: (u32, u32),
    resamplers: Vec<Resampler>,
    encoder: Option<Box<dyn Encoder>>,
    table: Option<(G711, G711)>,
    /// Linear audio at the encoder's rate waiting to be encoded (or table-coded
    /// bytes waiting to be sent, as one i16 per byte).
    fifo: Vec<i16>,
    scratch: Vec<i16>,
    scratch2: Vec<i16>,
    bytes: Vec<u8>,
}

impl Translator {
    /// Builds a translator along the graph's cheapest path.
    pub fn new(graph: &Graph, from: Format, to: Format) -> Option<Translator> {
        let steps = if from == to {
            vec![
                Step::Decode(from, from.pcm_rate()),
                Step::Encode(to, to.pcm_rate()),
            ]
        } else {
            graph
                .path(Node::Codec(from), Node::Codec(to))?
                .steps
                .clone()
        };
        let mut t = Translator {
            from,
            to,
            decoder: None,
            rates: (from.pcm_rate(), to.pcm_rate()),
            resamplers: Vec::new(),
            encoder: None,
            table: None,
            fifo: Vec::with_capacity(4096),
            scratch: vec![0; 5760],
            scratch2: vec![0; 5760],
            bytes: Vec::new(),
        };
        for s in steps {
            match s {
                Step::Decode(f, rate) => {
                    t.decoder = Some(f.decoder_at(rate));
                    t.rates.0 = rate;
                }
                Step::Encode(f, rate) => {
                    t.encoder = Some(f.encoder_at(rate, t.rates.0));
                    t.rates.1 = rate;
                }
                Step::Resample(a, b) => t.resamplers.push(Resampler::new(a, b)),
                Step::Table(a, b) => t.table = Some((law(a), law(b))),
            }
        }
        Some(t)
    }

    pub fn formats(&self) -> (Format, Format) {
        (self.from, self.to)
    }

    /// Takes one incoming payload (`None`: a lost packet of `lost_ms`).
    pub fn push(&mut self, payload: Option<&[u8]>, lost_ms: u32) -> Result<(), CodecError> {
        if let Some((a, b)) = self.table {
            let p = payload.unwrap_or(&[]);
            self.bytes.resize(p.len(), 0);
            a.transcode(b, p, &mut self.bytes);
            if payload.is_none() {
                let n = samples_at(self.rates.1, lost_ms);
                self.fifo.extend(std::iter::repeat_n(b.silence() as i16, n));
            }
            self.fifo.extend(self.bytes.iter().map(|&b| b as i16));
            return Ok(());
        }
        let dec = self.decoder.as_mut().expect("path decodes");
        let n = match payload {
            Some(p) => dec.decode(p, &mut self.scratch)?,
            None => {
                let n = samples_at(self.rates.0, lost_ms).min(self.scratch.len());
                dec.conceal(&mut self.scratch[..n])
            }
        };
        let mut cur: &mut Vec<i16> = &mut self.scratch;
        let mut other: &mut Vec<i16> = &mut self.scratch2;
        let mut len = n;
        for r in &mut self.resamplers {
            let need = r.output_len(len) + 16;
            if other.len() < need {
                other.resize(need, 0);
            }
            len = r.process(&cur[..len], other);
            std::mem::swap(&mut cur, &mut other);
        }
        self.fifo.extend_from_slice(&cur[..len]);
        Ok(())
    }

    /// Milliseconds of audio buffered for the outgoing side.
    pub fn buffered_ms(&self) -> u32 {
        (self.fifo.len() / samples_at(self.rates.1, 1)) as u32
    }

    /// Encodes the next `ms` of audio into `out` if that much is buffered.
    pub fn pull(&mut self, ms: u32, out: &mut [u8]) -> Option<Result<usize, CodecError>> {
        let n = samples_at(self.rates.1, ms);
        if self.fifo.len() < n {
            return None;
        }
        let r = if self.table.is_some() {
            if out.len() < n {
                Err(CodecError::BadLength {
                    what: "table",
                    len: out.len(),
                })
            } else {
                for (o, s) in out.iter_mut().zip(&self.fifo[..n]) {
                    *o = *s as u8;
                }
                Ok(n)
            }
        } else {
            let enc = self.encoder.as_mut().expect("path encodes");
            enc.encode(&self.fifo[..n], out)
        };
        self.fifo.drain(..n);
        Some(r)
    }
}

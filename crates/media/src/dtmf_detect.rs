//! In-band DTMF detection (ITU-T Q.23/Q.24) on 8 kHz linear PCM, for legs whose far end sends
//! digits as tones rather than RFC 4733 events.
//!
//! Each block of 102 samples (12.75 ms) is run through a Goertzel filter per DTMF frequency.
//! A block names a digit when the strongest row and column tone each stand clear of the rest of
//! their group, are loud enough, within the twist limits, hold most of the block's energy
//! between them (speech and music spread theirs), and carry no strong second harmonic. Two
//! consecutive such blocks confirm it when the phase each tone advanced between them puts
//! its frequency within 2.5 % of nominal (Q.24: accept ±1.5 %, reject ±3.5 %); the bin
//! alone is 78 Hz wide, far coarser than that. A digit ends after two blocks without it, so a
//! 40 ms tone and a 40 ms gap (each at least two whole blocks) are the shortest taken.

use std::f32::consts::PI;

/// Samples per block: at 8 kHz, a bin of 78 Hz, which keeps adjacent rows 22 dB apart.
const BLOCK: usize = 102;
const RATE: f32 = 8000.0;
const ROWS: [f32; 4] = [697.0, 770.0, 852.0, 941.0];
const COLS: [f32; 4] = [1209.0, 1336.0, 1477.0, 1633.0];
const KEYS: [[char; 4]; 4] = [
    ['1', '2', '3', 'A'],
    ['4', '5', '6', 'B'],
    ['7', '8', '9', 'C'],
    ['*', '0', '#', 'D'],
];
// The limits below are power ratios, compared without logarithms: a block's checks run 80
// times a second on every leg listened to.
/// Amplitude of the quietest tone taken: −32 dBm0, 6 dB under Q.24's −26 dBm0 limit.
const MIN_AMPLITUDE: f32 = 560.0;
/// Column over row power accepted: +6 dB and −12 dB (Q.24 asks for +4 and −8 at least).
const MAX_TWIST: f32 = 3.98;
const MIN_TWIST: f32 = 0.063;
/// How far the chosen tone stands above the others of its group: 4 dB.
const RELATIVE_PEAK: f32 = 2.51;
/// Least share of the block's energy the two tones must hold.
const MIN_TONE_SHARE: f32 = 0.6;
/// Largest second harmonic relative to its fundamental: −10 dB.
const MAX_HARMONIC: f32 = 0.1;
/// Largest frequency deviation taken, between Q.24's accept and reject limits.
const MAX_DEVIATION: f32 = 0.025;
/// Blocks without the digit that end it.
const END_MISSES: u32 = 2;

/// A digit heard in the audio, reported once, when it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detected {
    pub digit: char,
    pub duration_ms: u32,
}

/// One Goertzel filter: its coefficient and the rotation that turns its last two states into
/// the DFT term.
#[derive(Clone, Copy)]
struct Bin {
    coeff: f32,
    cos: f32,
    sin: f32,
}

impl Bin {
    fn new(freq: f32) -> Bin {
        let w = 2.0 * PI * freq / RATE;
        Bin {
            coeff: 2.0 * w.cos(),
            cos: w.cos(),
            sin: w.sin(),
        }
    }

    fn term(&self, s1: f32, s2: f32) -> (f32, f32) {
        (s1 - self.cos * s2, self.sin * s2)
    }
}

/// The DFT terms of `x` at the `bins`' frequencies, each up to a phase that is the same for
/// every block of the same length, over `x` and over its first half. One pass runs all the
/// filters side by side, which the compiler turns into vector operations.
fn run<const K: usize>(bins: &[Bin; K], x: &[f32]) -> [Term; K] {
    let (mut s1, mut s2) = ([0.0f32; K], [0.0f32; K]);
    let coeff = bins.map(|b| b.coeff);
    let (first, second) = x.split_at(x.len() / 2);
    step(&coeff, &mut s1, &mut s2, first);
    let half: [(f32, f32); K] = std::array::from_fn(|k| bins[k].term(s1[k], s2[k]));
    step(&coeff, &mut s1, &mut s2, second);
    std::array::from_fn(|k| Term {
        full: bins[k].term(s1[k], s2[k]),
        half: half[k],
    })
}

/// The Goertzel recurrence of every filter over `part`, two samples a step: the second
/// sample's state is written in terms of the states before the first, so each step waits on
/// one multiply and add per filter instead of two of each.
fn step<const K: usize>(coeff: &[f32; K], s1: &mut [f32; K], s2: &mut [f32; K], part: &[f32]) {
    let pairs = part.chunks_exact(2);
    let odd = pairs.remainder();
    for pair in pairs {
        let (v0, v1) = (pair[0], pair[1]);
        for k in 0..K {
            let c = coeff[k];
            let a = (v0 - s2[k]) + c * s1[k];
            let b = (v1 + c * (v0 - s2[k])) + (c * c - 1.0) * s1[k];
            s2[k] = a;
            s1[k] = b;
        }
    }
    for &v in odd {
        for k in 0..K {
            let s = (v - s2[k]) + coeff[k] * s1[k];
            s2[k] = s1[k];
            s1[k] = s;
        }
    }
}

/// A filter's output over a block and over the block's first half.
#[derive(Clone, Copy)]
struct Term {
    full: (f32, f32),
    half: (f32, f32),
}

impl Term {
    /// The terms of the block's two halves, on the same phase reference.
    fn halves(&self, nominal: f32) -> [(f32, f32); 2] {
        // The first half's share of the full term, turned on by the second half's length.
        let w = 2.0 * PI * nominal * (BLOCK / 2) as f32 / RATE;
        let a = rotate(self.half, w);
        [self.half, (self.full.0 - a.0, self.full.1 - a.1)]
    }

    /// The tone's offset from `nominal` (Hz) from the turn between the block's halves: coarse,
    /// but unambiguous to ±157 Hz.
    fn coarse_offset(&self, nominal: f32) -> f32 {
        let [a, b] = self.halves(nominal);
        offset_hz(turn(a, b), nominal, BLOCK / 2)
    }
}

fn power((re, im): (f32, f32)) -> f32 {
    re * re + im * im
}

/// A block's candidate: the digit's row and column, their DFT terms, and their offsets from
/// nominal as the block's halves tell them.
#[derive(Clone, Copy)]
struct Candidate {
    row: usize,
    col: usize,
    terms: [(f32, f32); 2],
    coarse: [f32; 2],
}

/// The detector of one leg. Feed it the leg's audio in order with [`ToneDetector::push`].
pub struct ToneDetector {
    /// The rows' filters, then the columns'.
    bins: [Bin; 8],
    block: [f32; BLOCK],
    filled: usize,
    previous: Option<Candidate>,
    /// The digit being heard, its whole blocks, and the blocks since it was last heard.
    current: Option<(char, u32, u32)>,
}

impl Default for ToneDetector {
    fn default() -> Self {
        ToneDetector {
            bins: std::array::from_fn(|k| Bin::new(if k < 4 { ROWS[k] } else { COLS[k - 4] })),
            block: [0.0; BLOCK],
            filled: 0,
            previous: None,
            current: None,
        }
    }
}

impl ToneDetector {
    /// Takes the next samples; `found` hears of each digit that ended within them.
    pub fn push(&mut self, pcm: impl IntoIterator<Item = i16>, mut found: impl FnMut(Detected)) {
        let mut pcm = pcm.into_iter();
        loop {
            let room = &mut self.block[self.filled..];
            let before = self.filled;
            for (slot, s) in room.iter_mut().zip(&mut pcm) {
                *slot = f32::from(s);
                self.filled += 1;
            }
            if self.filled < BLOCK || self.filled == before {
                return;
            }
            self.filled = 0;
            if let Some(d) = self.on_block() {
                found(d);
            }
        }
    }

    fn on_block(&mut self) -> Option<Detected> {
        let candidate = self.candidate();
        let confirmed = match (self.previous, candidate) {
            (Some(a), Some(b)) if (a.row, a.col) == (b.row, b.col) => {
                in_tune(ROWS[b.row], a.terms[0], b.terms[0], b.coarse[0])
                    && in_tune(COLS[b.col], a.terms[1], b.terms[1], b.coarse[1])
            }
            _ => false,
        };
        self.previous = candidate;
        let heard = candidate.map(|c| KEYS[c.row][c.col]);
        match &mut self.current {
            Some((digit, blocks, misses)) if heard == Some(*digit) => {
                *blocks = blocks.saturating_add(1 + *misses);
                *misses = 0;
                None
            }
            Some((digit, blocks, misses)) => {
                *misses += 1;
                if *misses < END_MISSES && !confirmed {
                    return None;
                }
                let done = Detected {
                    digit: *digit,
                    // A tone held for days saturates rather than overflows.
                    duration_ms: (u64::from(*blocks) * BLOCK as u64 * 1000 / RATE as u64)
                        .min(u64::from(u32::MAX)) as u32,
                };
                self.current = confirmed.then(|| (heard.unwrap_or_default(), 2, 0));
                Some(done)
            }
            None => {
                if confirmed {
                    self.current = heard.map(|d| (d, 2, 0));
                }
                None
            }
        }
    }

    /// The digit this block's tones name, if they pass every check of one block.
    fn candidate(&self) -> Option<Candidate> {
        let x = &self.block;
        let energy = sum_of_squares(x);
        // A tone of amplitude A has a term of power (A·N/2)².
        let floor = (MIN_AMPLITUDE * BLOCK as f32 / 2.0).powi(2);
        if energy < 2.0 * floor / BLOCK as f32 {
            return None;
        }
        let terms = run(&self.bins, x);
        let row_terms: [Term; 4] = std::array::from_fn(|k| terms[k]);
        let col_terms: [Term; 4] = std::array::from_fn(|k| terms[k + 4]);
        let (row, row_p) = strongest(&row_terms.map(|t| power(t.full)))?;
        let (col, col_p) = strongest(&col_terms.map(|t| power(t.full)))?;
        if row_p < floor || col_p < floor {
            return None;
        }
        if !(MIN_TWIST..=MAX_TWIST).contains(&(col_p / row_p)) {
            return None;
        }
        // Both terms' power is (A·N/2)²; the block energy of those tones is A²·N/2.
        if share(row_p + col_p, energy, BLOCK) < MIN_TONE_SHARE {
            return None;
        }
        // Each half must hold the tones too: two blocks that a 20 ms tone fills 80 % each
        // pass the test above, but one of their halves is mostly silence.
        let (row_t, col_t) = (row_terms[row], col_terms[col]);
        let (rh, ch) = (row_t.halves(ROWS[row]), col_t.halves(COLS[col]));
        let (first, second) = x.split_at(BLOCK / 2);
        for (i, half) in [first, second].into_iter().enumerate() {
            let e = sum_of_squares(half);
            if share(power(rh[i]) + power(ch[i]), e, BLOCK / 2) < MIN_TONE_SHARE {
                return None;
            }
        }
        if !harmonic_clear(x, ROWS[row], row_p, Some(COLS[col]))
            || !harmonic_clear(x, COLS[col], col_p, None)
        {
            return None;
        }
        Some(Candidate {
            row,
            col,
            terms: [row_terms[row].full, col_terms[col].full],
            coarse: [
                row_terms[row].coarse_offset(ROWS[row]),
                col_terms[col].coarse_offset(COLS[col]),
            ],
        })
    }
}

/// The row and column frequencies of a DTMF key (Hz).
pub(crate) fn frequencies(digit: char) -> Option<(u16, u16)> {
    let digit = digit.to_ascii_uppercase();
    KEYS.iter().enumerate().find_map(|(r, row)| {
        let c = row.iter().position(|&k| k == digit)?;
        Some((ROWS[r] as u16, COLS[c] as u16))
    })
}

/// The strongest of a group's terms and its power, if it stands clear of the others.
fn strongest(powers: &[f32; 4]) -> Option<(usize, f32)> {
    let (best, &p) = powers
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))?;
    let clear = powers
        .iter()
        .enumerate()
        .all(|(i, &q)| i == best || p >= q * RELATIVE_PEAK);
    clear.then_some((best, p))
}

/// Whether the second harmonic of `freq` is weak, as in a pure tone and not in a voice. A
/// harmonic within two bins of the other tone (697 Hz's 1394 Hz by 1336 or 1477 Hz) is not
/// judged: that tone's own energy spills into its bin.
fn harmonic_clear(x: &[f32], freq: f32, p: f32, other: Option<f32>) -> bool {
    let h = 2.0 * freq;
    if other.is_some_and(|o| (o - h).abs() < 2.0 * RATE / BLOCK as f32) {
        return true;
    }
    power(run(&[Bin::new(h)], x)[0].full) <= p * MAX_HARMONIC
}

/// Whether the phase a tone's term turned through from one block to the next puts its
/// frequency within [`MAX_DEVIATION`] of `nominal`. That turn is exact but repeats every
/// 78 Hz of offset; the `coarse` offset from the block's halves picks the repeat.
fn in_tune(nominal: f32, a: (f32, f32), b: (f32, f32), coarse: f32) -> bool {
    let fine = offset_hz(turn(a, b), nominal, BLOCK);
    let period = RATE / BLOCK as f32;
    let hz = fine + ((coarse - fine) / period).round() * period;
    hz.abs() <= MAX_DEVIATION * nominal
}

/// The angle from term `a` to term `b`.
fn turn(a: (f32, f32), b: (f32, f32)) -> f32 {
    let re = b.0 * a.0 + b.1 * a.1;
    let im = b.1 * a.0 - b.0 * a.1;
    im.atan2(re)
}

/// `v` turned by `w` radians.
fn rotate(v: (f32, f32), w: f32) -> (f32, f32) {
    let (s, c) = w.sin_cos();
    (v.0 * c - v.1 * s, v.0 * s + v.1 * c)
}

/// The offset from `nominal` (Hz) of a tone whose phase turned by `turn` over `samples`,
/// within half a cycle per `samples` either side.
fn offset_hz(turn: f32, nominal: f32, samples: usize) -> f32 {
    let expected = 2.0 * PI * nominal * samples as f32 / RATE;
    let off = (turn - expected).rem_euclid(2.0 * PI);
    let off = if off > PI { off - 2.0 * PI } else { off };
    off * RATE / (2.0 * PI * samples as f32)
}

/// The sum of the squares of `x`, in eight partial sums that vector operations keep.
fn sum_of_squares(x: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = x.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    for c in chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v * v;
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The share of `energy` (of `samples` samples) that tone terms of total power `p` hold.
fn share(p: f32, energy: f32, samples: usize) -> f32 {
    2.0 * p / (samples as f32 * energy.max(f32::MIN_POSITIVE))
}

#[cfg(test)]
mod tests;

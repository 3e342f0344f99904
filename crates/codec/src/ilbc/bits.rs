//! The frame's parameters and their bit layout (RFC 3951 §3.6): every
//! parameter is split over three classes of decreasing perceptual importance
//! and the classes are written one after the other, most significant bits
//! first, followed by the "empty frame" bit.

use super::Mode;

/// Everything one iLBC frame carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// Split-VQ indices of one (20 ms) or two (30 ms) LSF sets.
    pub lsf: [u32; 6],
    /// The sub-frame pair (1-based) holding the start state.
    pub start: u32,
    /// Whether the scalar part of the start state comes first in its 80 samples.
    pub state_first: u32,
    /// Scale of the start state (index into `STATE_FRGQ`).
    pub idx_for_max: u32,
    /// The start state's samples (indices into `STATE_SQ3`).
    pub state: [u32; 58],
    /// Codebook indices and gains of the 22/23 samples completing the start state.
    pub extra_cb: [u32; 3],
    pub extra_gain: [u32; 3],
    /// Codebook indices and gains of the other sub-frames, 3 stages each.
    pub cb: [u32; 12],
    pub gain: [u32; 12],
}

impl Default for Params {
    fn default() -> Params {
        Params {
            lsf: [0; 6],
            start: 0,
            state_first: 0,
            idx_for_max: 0,
            state: [0; 58],
            extra_cb: [0; 3],
            extra_gain: [0; 3],
            cb: [0; 12],
            gain: [0; 12],
        }
    }
}

/// Bits of one parameter in each class.
type Split = [u8; 3];

const LSF_20: [Split; 3] = [[6, 0, 0], [7, 0, 0], [7, 0, 0]];
const LSF_30: [Split; 6] = [
    [6, 0, 0],
    [7, 0, 0],
    [7, 0, 0],
    [6, 0, 0],
    [7, 0, 0],
    [7, 0, 0],
];
const STATE_FIRST: Split = [1, 0, 0];
const SCALE: Split = [6, 0, 0];
const STATE: Split = [0, 1, 2];
const EXTRA_CB_20: [Split; 3] = [[6, 0, 1], [0, 0, 7], [0, 0, 7]];
const EXTRA_CB_30: [Split; 3] = [[4, 2, 1], [0, 0, 7], [0, 0, 7]];
const EXTRA_GAIN_20: [Split; 3] = [[2, 0, 3], [1, 1, 2], [0, 0, 3]];
const EXTRA_GAIN_30: [Split; 3] = [[1, 1, 3], [1, 1, 2], [0, 0, 3]];
const CB_20: [[Split; 3]; 2] = [
    [[7, 0, 1], [0, 0, 7], [0, 0, 7]],
    [[0, 0, 8], [0, 0, 8], [0, 0, 8]],
];
const CB_30: [[Split; 3]; 4] = [
    [[6, 1, 1], [0, 0, 7], [0, 0, 7]],
    [[0, 7, 1], [0, 0, 8], [0, 0, 8]],
    [[0, 7, 1], [0, 0, 8], [0, 0, 8]],
    [[0, 7, 1], [0, 0, 8], [0, 0, 8]],
];
const GAIN_20: [[Split; 3]; 2] = [
    [[1, 2, 2], [1, 1, 2], [0, 0, 3]],
    [[1, 1, 3], [0, 2, 2], [0, 0, 3]],
];
const GAIN_30: [[Split; 3]; 4] = [
    [[1, 2, 2], [1, 2, 1], [0, 0, 3]],
    [[0, 2, 3], [0, 2, 2], [0, 0, 3]],
    [[0, 1, 4], [0, 1, 3], [0, 0, 3]],
    [[0, 1, 4], [0, 1, 3], [0, 0, 3]],
];

/// Calls `f` on every parameter with its split, in bitstream order.
#[allow(clippy::type_complexity)] // one row per mode, matched at once
fn visit(mode: Mode, p: &mut Params, f: &mut impl FnMut(&mut u32, Split)) {
    let (lsf, start, extra_cb, extra_gain, cb, gain): (
        &[Split],
        Split,
        _,
        _,
        &[[Split; 3]],
        &[[Split; 3]],
    ) = match mode {
        Mode::Ms20 => (
            &LSF_20,
            [2, 0, 0],
            EXTRA_CB_20,
            EXTRA_GAIN_20,
            &CB_20,
            &GAIN_20,
        ),
        Mode::Ms30 => (
            &LSF_30,
            [3, 0, 0],
            EXTRA_CB_30,
            EXTRA_GAIN_30,
            &CB_30,
            &GAIN_30,
        ),
    };
    for (v, s) in p.lsf.iter_mut().zip(lsf) {
        f(v, *s);
    }
    f(&mut p.start, start);
    f(&mut p.state_first, STATE_FIRST);
    f(&mut p.idx_for_max, SCALE);
    for v in p.state.iter_mut().take(mode.state_short_len()) {
        f(v, STATE);
    }
    for (v, s) in p.extra_cb.iter_mut().zip(extra_cb) {
        f(v, s);
    }
    for (v, s) in p.extra_gain.iter_mut().zip(extra_gain) {
        f(v, s);
    }
    for (v, s) in p.cb.iter_mut().zip(cb.iter().flatten()) {
        f(v, *s);
    }
    for (v, s) in p.gain.iter_mut().zip(gain.iter().flatten()) {
        f(v, *s);
    }
}

/// Writes the frame into `out` (exactly `mode.bytes()` long).
pub fn pack(mode: Mode, p: &Params, out: &mut [u8]) {
    let mut p = p.clone();
    let mut w = BitWriter { out, pos: 0 };
    for class in 0..3 {
        visit(mode, &mut p, &mut |v, s| {
            let below: u8 = s[class + 1..].iter().sum();
            let n = s[class];
            w.put((*v >> below) & ((1 << n) - 1), n);
        });
    }
    w.put(0, 1);
}

/// Reads a frame; the result says whether the "empty frame" bit is clear.
pub fn unpack(mode: Mode, bytes: &[u8]) -> (Params, bool) {
    let mut p = Params::default();
    let mut r = BitReader {
        bytes: [0; 64],
        pos: 0,
    };
    let n = bytes.len().min(56);
    r.bytes[..n].copy_from_slice(&bytes[..n]);
    for class in 0..3 {
        visit(mode, &mut p, &mut |v, s| {
            let n = s[class];
            if n > 0 {
                *v = (*v << n) | r.get(n);
            }
        });
    }
    let empty = r.get(1);
    (p, empty == 0)
}

struct BitWriter<'a> {
    out: &'a mut [u8],
    pos: usize,
}

impl BitWriter<'_> {
    fn put(&mut self, v: u32, n: u8) {
        for i in (0..n).rev() {
            let byte = self.pos / 8;
            let bit = 7 - (self.pos % 8);
            if bit == 7 {
                self.out[byte] = 0;
            }
            self.out[byte] |= (((v >> i) & 1) as u8) << bit;
            self.pos += 1;
        }
    }
}

/// The frame (a 50-byte frame is the longest) followed by zeros, read 8 bytes at a time.
struct BitReader {
    bytes: [u8; 64],
    pos: usize,
}

impl BitReader {
    /// The next `n` (at most 32) bits; zeros past the frame.
    fn get(&mut self, n: u8) -> u32 {
        let at = (self.pos / 8).min(56);
        let word = u64::from_be_bytes(self.bytes[at..at + 8].try_into().unwrap());
        let v = (word << (self.pos % 8)) >> 32 >> (32 - n as u32);
        self.pos += n as usize;
        v as u32
    }
}

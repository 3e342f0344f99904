//! The decoder's enhancer (RFC 3951 §4.6): each 80-sample block of residual
//! is smoothed towards the pitch-synchronous average of its neighbouring
//! pitch cycles (found at 4x resolution), within a bound on how much energy
//! the correction may change. It delays the output by 40 (20 ms mode) or 80
//! (30 ms) samples and supplies the pitch to the concealment.

use std::f32::consts::PI;

use super::filter::downsample;
use super::lanes::{corr, corr_energy};
use super::tables::POLYPHASE;
use super::Mode;

const BLOCKL: usize = 80;
const HL: usize = 3;
const SLOP: usize = 2;
const FL: usize = 3;
const VECTL: usize = BLOCKL + 2 * FL;
const NBLOCKS_TOT: usize = 8;
const NBLOCKS_EXTRA: usize = 5;
const BUFL: usize = NBLOCKS_TOT * BLOCKL;
const ALPHA0: f32 = 0.05;
const OVERHANG: f32 = 2.0;
/// The centres of the blocks whose pitch `period` holds.
const PLOCS: [f32; NBLOCKS_TOT] = [40.0, 120.0, 200.0, 280.0, 360.0, 440.0, 520.0, 600.0];

pub struct Enhancer {
    buf: [f32; BUFL],
    period: [f32; NBLOCKS_TOT],
    /// The Hann weights of the segments around the centre one (which has none).
    weights: [f32; 2 * HL + 1],
}

/// `(x·y)² / (y·y)` when `x·y > 0`: how well `y` predicts `x`.
fn xcorr_coef(x: &[f32], y: &[f32]) -> f32 {
    let (mut xy, mut yy) = (0.0f32, 0.0f32);
    for (a, b) in x.iter().zip(y) {
        xy += a * b;
        yy += b * b;
    }
    coef(xy, yy)
}

fn coef(xy: f32, yy: f32) -> f32 {
    if xy > 0.0 {
        xy * xy / yy
    } else {
        0.0
    }
}

fn nearest(array: &[f32], value: f32) -> usize {
    let mut best = (0, f32::MAX);
    for (i, a) in array.iter().enumerate() {
        let d = (a - value) * (a - value);
        if d < best.1 {
            best = (i, d);
        }
    }
    best.0
}

/// The polyphase filter by tap: `[tap][phase]`, so the four phases are one vector.
const POLYPHASE_BY_TAP: [[f32; 4]; 7] = {
    let mut t = [[0.0; 4]; 7];
    let mut k = 0;
    while k < 7 {
        let mut phase = 0;
        while phase < 4 {
            t[k][phase] = POLYPHASE[phase][k];
            phase += 1;
        }
        k += 1;
    }
    t
};

/// 4x upsampling of a correlation with the polyphase filter, zeros outside
/// `seq` (at most `2 * SLOP + 1` long); `out` gets `4 * seq.len()` values (the
/// RFC writes a few more when `seq` is short, which the caller's buffer absorbs).
/// The four phases of an output are summed side by side, each in the RFC's order.
fn upsample(out: &mut [f32], seq: &[f32]) {
    let dim = seq.len();
    let (mut hfl, mut offset) = (FL, 0);
    if 2 * FL + 1 > dim {
        offset = FL - dim / 2;
        hfl = dim / 2;
    }
    let flen = 2 * hfl + 1;
    // `seq[i]` at `padded[i + flen]`, zeros around it.
    let mut padded = [0.0f32; 2 * (2 * FL + 1) + 2 * SLOP + 1];
    padded[flen..flen + dim].copy_from_slice(seq);
    let mut o = 0;
    let mut push = |last: usize, taps: std::ops::Range<usize>| {
        let mut acc = [-0.0f32; 4];
        for (k, c) in taps.enumerate() {
            let x = padded[last - k];
            for (a, c) in acc.iter_mut().zip(&POLYPHASE_BY_TAP[offset + c]) {
                *a += x * c;
            }
        }
        if let Some(slot) = out.get_mut(o..o + 4) {
            slot.copy_from_slice(&acc);
        }
        o += 4;
    };
    // Left overhang and full overlaps, then the right overhang.
    for i in hfl..flen.max(dim) {
        push(i + flen, 0..(i + 1).min(flen));
    }
    for q in 1..=hfl {
        push(dim - 1 + flen, q..flen);
    }
}

/// The segment near `est` (in `idata`) that best matches the centre block,
/// at quarter-sample resolution; returns the refined position.
fn refine(seg: &mut [f32], idata: &[f32], center: usize, est: f32) -> f32 {
    let idatal = idata.len() as isize;
    let rounded = (est - 0.5) as isize;
    let s = (rounded - SLOP as isize).max(0);
    let e = (rounded + SLOP as isize).min(idatal - BLOCKL as isize - 1);
    if e < s {
        seg.fill(0.0);
        return est;
    }
    let (s, e) = (s as usize, e as usize);
    let corrdim = e - s + 1;
    // As many windows as 8 lanes hold and `idata` has (at least `corrdim`): the
    // extra ones cost nothing.
    let mut cv = [0.0f32; 8];
    let windows = (idata.len() + 1 - BLOCKL - s).min(8);
    corr(
        &mut cv[..windows],
        &idata[s..s + windows + BLOCKL - 1],
        &idata[center..center + BLOCKL],
    );
    let mut ups = [0.0f32; (2 * SLOP + 1) * 4];
    upsample(&mut ups, &cv[..corrdim]);
    let mut tloc = 0;
    for i in 1..4 * corrdim {
        if ups[i] > ups[tloc] {
            tloc = i;
        }
    }
    let updated = s as f32 + tloc as f32 / 4.0 + 1.0;
    let tloc2 = tloc.div_ceil(4);
    let st = s as isize + tloc2 as isize - FL as isize;
    let mut vect = [0.0f32; VECTL];
    if st >= 0 && st + VECTL as isize <= idatal {
        vect.copy_from_slice(&idata[st as usize..st as usize + VECTL]);
    } else {
        for (i, v) in vect.iter_mut().enumerate() {
            let at = st + i as isize;
            if at >= 0 && at < idatal {
                *v = idata[at as usize];
            }
        }
    }
    let fraction = tloc2 * 4 - tloc;
    corr(seg, &vect, &POLYPHASE[fraction]);
    updated
}

/// Smooths the centre block of `sseq` towards the others (within `ALPHA0`).
fn smooth(out: &mut [f32], sseq: &[[f32; BLOCKL]; 2 * HL + 1], wt: &[f32; 2 * HL + 1]) {
    let mut surround = [0.0f32; BLOCKL];
    for (k, s) in sseq.iter().enumerate() {
        if k != HL {
            for i in 0..BLOCKL {
                surround[i] += s[i] * wt[k];
            }
        }
    }
    let cur = &sseq[HL];
    let (mut w00, mut w10, mut w11) = (0.0f32, 0.0f32, 0.0f32);
    for i in 0..BLOCKL {
        w00 += cur[i] * cur[i];
        w11 += surround[i] * surround[i];
        w10 += surround[i] * cur[i];
    }
    if w11.abs() < 1.0 {
        w11 = 1.0;
    }
    let c = (w00 / w11).sqrt();
    let mut errs = 0.0f32;
    for i in 0..BLOCKL {
        out[i] = c * surround[i];
        let e = cur[i] - out[i];
        errs += e * e;
    }
    if errs > ALPHA0 * w00 {
        let w00 = w00.max(1.0);
        let denom = (w11 * w00 - w10 * w10) / (w00 * w00);
        let (a, b) = if denom > 0.0001 {
            let a = ((ALPHA0 - ALPHA0 * ALPHA0 / 4.0) / denom).sqrt();
            (a, 1.0 - ALPHA0 / 2.0 - a * w10 / w00)
        } else {
            (0.0, 1.0)
        };
        for i in 0..BLOCKL {
            out[i] = a * surround[i] + b * cur[i];
        }
    }
}

impl Enhancer {
    pub fn new() -> Enhancer {
        Enhancer {
            buf: [0.0; BUFL],
            period: [40.0; NBLOCKS_TOT],
            weights: std::array::from_fn(|i| {
                let w = 0.5 * (1.0 - (2.0 * PI * (i + 1) as f32 / (2 * HL + 2) as f32).cos());
                if i == HL {
                    0.0
                } else {
                    w
                }
            }),
        }
    }

    /// The pitch-synchronous segments around the block at `center`.
    fn segments(&self, center: usize, sseq: &mut [[f32; BLOCKL]; 2 * HL + 1]) {
        let idata = &self.buf[..];
        let mut lag_block = [0usize; 2 * HL + 1];
        let mut pos = [0.0f32; 2 * HL + 1];
        lag_block[HL] = nearest(&PLOCS, center as f32 + (BLOCKL - 1) as f32 / 2.0);
        pos[HL] = center as f32;
        sseq[HL].copy_from_slice(&idata[center..center + BLOCKL]);
        for q in (0..HL).rev() {
            let period = self.period[lag_block[q + 1]];
            pos[q] = pos[q + 1] - period;
            lag_block[q] = nearest(&PLOCS, pos[q] + (BLOCKL / 2) as f32 - period);
            if pos[q] - OVERHANG >= 0.0 {
                pos[q] = refine(&mut sseq[q], idata, center, pos[q]);
            } else {
                sseq[q].fill(0.0);
            }
        }
        let plocs2: [f32; NBLOCKS_TOT] = std::array::from_fn(|i| PLOCS[i] - self.period[i]);
        for q in HL + 1..=2 * HL {
            lag_block[q] = nearest(&plocs2, pos[q - 1] + (BLOCKL / 2) as f32);
            pos[q] = pos[q - 1] + self.period[lag_block[q]];
            if pos[q] + BLOCKL as f32 + OVERHANG < BUFL as f32 {
                pos[q] = refine(&mut sseq[q], idata, center, pos[q]);
            } else {
                sseq[q].fill(0.0);
            }
        }
    }

    /// Enhances one frame of residual `input` into `out` (same length, delayed).
    /// `after_loss` says the previous frame was concealed: its tail is then
    /// re-estimated backwards from this frame and cross-faded. Returns the
    /// pitch lag for the concealment.
    pub fn run(&mut self, mode: Mode, input: &[f32], out: &mut [f32], after_loss: bool) -> usize {
        let blockl = input.len();
        self.buf.copy_within(blockl.., 0);
        self.buf[BUFL - blockl..].copy_from_slice(input);
        let (plc_blockl, ioffset) = match mode {
            Mode::Ms30 => (BLOCKL, 0),
            Mode::Ms20 => (40, 1),
        };
        let shift = 3 - ioffset;
        self.period.copy_within(shift.., 0);

        // Pitch per block on the signal decimated by 2.
        let from = (NBLOCKS_EXTRA + ioffset) * BLOCKL;
        let mut state = [0.0f32; 6];
        state.copy_from_slice(&self.buf[from - 126..from - 120]);
        let len = 3 * BLOCKL + 120 - ioffset * BLOCKL;
        let mut ds = [0.0f32; (3 * BLOCKL + 120) / 2];
        downsample(
            &self.buf[from - 120..from - 120 + len],
            &state,
            &mut ds[..len / 2],
        );
        // Lags 10..60 of the 40-sample target: window `p` of `ds[at - 59..]` lags by `59 - p`.
        let mut lag = 10;
        for iblock in 0..3 - ioffset {
            let at = 60 + iblock * BLOCKL / 2;
            let target = &ds[at..at + BLOCKL / 2];
            let (mut xy, mut yy) = ([0.0f32; 50], [0.0f32; 50]);
            corr_energy(&mut xy, &mut yy, &ds[at - 59..at + 30], target);
            lag = 10;
            let mut max = coef(xy[49], yy[49]);
            for l in 11..60 {
                let c = coef(xy[59 - l], yy[59 - l]);
                if c > max {
                    max = c;
                    lag = l;
                }
            }
            self.period[iblock + NBLOCKS_EXTRA + ioffset] = (2 * lag) as f32;
        }

        if after_loss {
            lag = self.blend_after_loss(input, plc_blockl, ioffset);
        }

        let (nblocks, first) = match mode {
            Mode::Ms20 => (2, 5 * BLOCKL + 40),
            Mode::Ms30 => (3, 4 * BLOCKL),
        };
        let mut sseq = [[0.0f32; BLOCKL]; 2 * HL + 1];
        for b in 0..nblocks {
            self.segments(first + b * BLOCKL, &mut sseq);
            smooth(&mut out[b * BLOCKL..(b + 1) * BLOCKL], &sseq, &self.weights);
        }
        2 * lag
    }

    /// After a concealed frame: predict its last `plc_blockl` samples
    /// backwards from the new frame's first pitch cycle and cross-fade them
    /// with what the concealment produced. Returns the refined lag.
    fn blend_after_loss(&mut self, input: &[f32], plc_blockl: usize, ioffset: usize) -> usize {
        let blockl = input.len();
        let inlag =
            (self.period[NBLOCKS_EXTRA + ioffset] as usize).clamp(2, blockl - plc_blockl - 1);
        let mut lag = inlag - 1;
        let mut max = xcorr_coef(&input[..plc_blockl], &input[lag..lag + plc_blockl]);
        for l in inlag..=inlag + 1 {
            let c = xcorr_coef(&input[..plc_blockl], &input[l..l + plc_blockl]);
            if c > max {
                max = c;
                lag = l;
            }
        }
        self.period[NBLOCKS_EXTRA + ioffset - 1] = lag as f32;

        // plc_pred ends with the new frame's samples before `lag`, preceded
        // by the concealed samples.
        let mut pred = [0.0f32; BLOCKL];
        let start = lag.min(plc_blockl);
        for i in 0..start {
            pred[plc_blockl - 1 - i] = input[lag - 1 - i];
        }
        let old_end = BUFL - 1 - blockl;
        for i in start..plc_blockl {
            pred[plc_blockl - 1 - i] = self.buf[old_end - (i - start)];
        }
        let (mut e_old, mut e_pred) = (0.0f32, 0.0f32);
        for (i, p) in pred[..plc_blockl].iter().enumerate() {
            e_old += self.buf[old_end - i] * self.buf[old_end - i];
            e_pred += p * p;
        }
        let rms_pred = (e_pred / plc_blockl as f32).sqrt();
        let rms_old = (e_old / plc_blockl as f32).sqrt();
        if rms_pred > 2.0 * rms_old && rms_pred > 0.0 {
            let r = 2.0 * rms_old / rms_pred;
            for (i, p) in pred[..plc_blockl].iter_mut().enumerate() {
                *p *= if i < plc_blockl - 10 {
                    r
                } else {
                    (i + 10 - plc_blockl) as f32 * (1.0 - r) / 10.0 + r
                };
            }
        }
        for i in 0..plc_blockl {
            let w = (i + 1) as f32 / (plc_blockl + 1) as f32;
            let at = old_end - i;
            self.buf[at] = self.buf[at] * w + (1.0 - w) * pred[plc_blockl - 1 - i];
        }
        lag
    }
}

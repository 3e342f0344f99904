//! The start state (RFC 3951 §3.5): the most energetic pair of sub-frames is
//! found, and 57/58 of its 80 residual samples are coded directly, with a
//! scalar quantiser in an all-pass-filtered domain; the rest of the frame is
//! then predicted from it forwards and backwards.

use super::filter::{all_pass, all_pole, all_pole_fast};
use super::lpc::Lpc;
use super::tables::{STATE_FRGQ, STATE_SQ3};
use super::{Mode, ORDER, SUBL};

/// The 1-based index of the sub-frame pair with the most (weighted) energy.
pub fn classify(residual: &[f32], mode: Mode) -> usize {
    const EDGE: [f32; 5] = [1.0 / 6.0, 2.0 / 6.0, 3.0 / 6.0, 4.0 / 6.0, 5.0 / 6.0];
    const PAIR_WEIGHT: [f32; 5] = [0.8, 0.9, 1.0, 0.9, 0.8];
    let nsub = mode.nsub();
    let mut front = [0.0f32; 6];
    let mut back = [0.0f32; 6];
    for n in 0..nsub {
        let sub = &residual[n * SUBL..(n + 1) * SUBL];
        for (l, &x) in sub.iter().enumerate() {
            let e = x * x;
            // The first 5 samples fade in for the front energy, the last 5
            // fade out for the back energy.
            front[n] += if l < 5 { EDGE[l] * e } else { e };
            back[n] += if l >= SUBL - 5 {
                EDGE[SUBL - l - 1] * e
            } else {
                e
            };
        }
    }
    let mut w = if mode == Mode::Ms20 { 1 } else { 0 };
    let mut best = (front[0] + back[1]) * PAIR_WEIGHT[w];
    let mut best_n = 1;
    for n in 2..nsub {
        w += 1;
        let e = (front[n - 1] + back[n]) * PAIR_WEIGHT[w];
        if e > best {
            best = e;
            best_n = n;
        }
    }
    best_n
}

/// Scalar quantiser: the index of the entry of the sorted `cb` nearest to `x`.
pub fn sort_sq(x: f32, cb: &[f32]) -> usize {
    if x <= cb[0] {
        return 0;
    }
    let mut i = 0;
    while x > cb[i] && i < cb.len() - 1 {
        i += 1;
    }
    if x > (cb[i] + cb[i - 1]) / 2.0 {
        i
    } else {
        i - 1
    }
}

/// Encodes `residual` (the state's `len` samples): returns the scale index
/// and writes the sample indices to `idx`. `synt`/`weight` are the filters
/// of the two sub-frames the state spans.
pub fn search(
    residual: &[f32],
    synt: &[Lpc],
    weight: &[Lpc],
    state_first: bool,
    idx: &mut [u32],
) -> u32 {
    let len = residual.len();
    let mut padded = [0.0f32; 2 * 58];
    padded[..len].copy_from_slice(residual);
    let mut f = [0.0f32; 2 * 58];
    all_pass(&padded[..2 * len], &synt[0], &mut f, all_pole);
    for k in 0..len {
        f[k] += f[k + len];
    }
    let peak = f[..len]
        .iter()
        .fold(0.0f32, |m, &x| if x * x > m * m { x } else { m });
    let idx_for_max = sort_sq(peak.abs().max(10.0).log10(), &STATE_FRGQ);
    let scale = 4.5 / 10f32.powf(STATE_FRGQ[idx_for_max]);

    // Noise-shaped quantisation in the weighted domain (AbsQuantW).
    let mut input = [0.0f32; ORDER + 58];
    for k in 0..len {
        input[ORDER + k] = f[k] * scale;
    }
    let mut quant = [0.0f32; ORDER + 58];
    let switch = if state_first { SUBL } else { len - SUBL };
    all_pole(&mut input, ORDER, ORDER + switch, &weight[0]);
    let mut w = &weight[0];
    for (n, out) in idx.iter_mut().enumerate().take(len) {
        if n == switch {
            w = &weight[1];
            all_pole(&mut input, ORDER + n, ORDER + len, w);
        }
        let at = ORDER + n;
        quant[at] = 0.0;
        all_pole(&mut quant, at, at + 1, w);
        let i = sort_sq(input[at] - quant[at], &STATE_SQ3);
        *out = i as u32;
        quant[at] = STATE_SQ3[i];
        all_pole(&mut quant, at, at + 1, w);
    }
    idx_for_max as u32
}

/// Decodes the state's `idx.len()` samples into `out`.
pub fn construct(idx_for_max: u32, idx: &[u32], synt: &Lpc, out: &mut [f32]) {
    let len = idx.len();
    let amp = 10f32.powf(STATE_FRGQ[idx_for_max as usize]) / 4.5;
    let mut x = [0.0f32; 2 * 58];
    for k in 0..len {
        x[k] = amp * STATE_SQ3[idx[len - 1 - k] as usize];
    }
    let mut f = [0.0f32; 2 * 58];
    all_pass(&x[..2 * len], synt, &mut f, all_pole_fast);
    for k in 0..len {
        out[k] = f[len - 1 - k] + f[2 * len - 1 - k];
    }
}

/// Where the state's scalar part starts in the frame, and the length of the
/// part predicted from it within the same 80 samples.
pub fn layout(mode: Mode, start: usize, state_first: bool) -> (usize, usize) {
    let diff = 80 - mode.state_short_len();
    let pos = (start - 1) * SUBL + if state_first { 0 } else { diff };
    (pos, diff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sort_sq_picks_nearest() {
        assert_eq!(sort_sq(-10.0, &STATE_SQ3), 0);
        assert_eq!(sort_sq(10.0, &STATE_SQ3), 7);
        assert_eq!(sort_sq(0.4, &STATE_SQ3), 4);
        assert_eq!(sort_sq(-0.3, &STATE_SQ3), 3);
    }
}

//! Linear prediction: analysis windows, Levinson-Durbin, LPC <-> LSF,
//! split-VQ quantisation of the LSFs and their per-sub-frame interpolation
//! (RFC 3951 sections 3.2 and 4.1).

use std::f32::consts::PI;
use std::sync::OnceLock;

use super::tables::{LSF_CB, LSF_SPLIT_DIM, LSF_SPLIT_SIZE, LSF_WEIGHT_20MS, LSF_WEIGHT_30MS};
use super::{Mode, ORDER};

/// One set of LPC coefficients, `a[0] = 1`.
pub type Lpc = [f32; ORDER + 1];

/// Bandwidth expansion of the synthesis filter found by analysis.
pub const CHIRP_SYNT: f32 = 0.9025;
/// Bandwidth expansion of the perceptual weighting filter.
pub const CHIRP_WEIGHT: f32 = 0.4222;
/// Samples of the previous frame the analysis window reaches back.
pub const LOOKBACK: usize = 60;
const WINDOW: usize = 240;

struct Windows {
    symmetric: [f32; WINDOW],
    asymmetric: [f32; WINDOW],
    lag: [f32; ORDER + 1],
}

/// The analysis windows of RFC 3951 §3.2.1, from their definitions, at the
/// RFC's 16-bit precision: a Hann window for the first analysis of a 30 ms
/// frame; for the last one, a window rising over 220 samples and falling over
/// 20 (there is no look-ahead); a Gaussian lag window of 60 Hz with a
/// white-noise correction of 40 dB.
fn windows() -> &'static Windows {
    static W: OnceLock<Windows> = OnceLock::new();
    W.get_or_init(|| {
        let q15 = |x: f64| ((x * 32768.0).round() / 32768.0) as f32;
        let mut w = Windows {
            symmetric: [0.0; WINDOW],
            asymmetric: [0.0; WINDOW],
            lag: [0.0; ORDER + 1],
        };
        let pi = std::f64::consts::PI;
        for i in 0..WINDOW {
            w.symmetric[i] = q15(0.5 * (1.0 - (2.0 * pi * (i + 1) as f64 / 241.0).cos()));
            w.asymmetric[i] = q15(if i < 220 {
                (pi * (i + 1) as f64 / 442.0).sin().powi(2)
            } else {
                (pi * (i - 220) as f64 / 40.0).cos()
            });
        }
        w.lag[0] = 1.0001;
        for k in 1..=ORDER {
            let x = 2.0 * pi * 60.0 * k as f64 / 8000.0;
            w.lag[k] = (-0.5 * x * x).exp() as f32;
        }
        w
    })
}

fn levinson(r: &[f32; ORDER + 1]) -> Lpc {
    let mut a = [0.0; ORDER + 1];
    a[0] = 1.0;
    if r[0] < f32::EPSILON {
        return a;
    }
    let mut k = -r[1] / r[0];
    a[1] = k;
    let mut alpha = r[0] + r[1] * k;
    for m in 1..ORDER {
        let mut sum = r[m + 1];
        for i in 0..m {
            sum += a[i + 1] * r[m - i];
        }
        k = -sum / alpha;
        alpha += k * sum;
        for i in 0..m.div_ceil(2) {
            let t = a[i + 1] + k * a[m - i];
            a[m - i] += k * a[i + 1];
            a[i + 1] = t;
        }
        a[m + 1] = k;
    }
    a
}

pub fn bw_expand(a: &Lpc, coef: f32) -> Lpc {
    let mut out = *a;
    let mut chirp = coef;
    for v in out.iter_mut().skip(1) {
        *v *= chirp;
        chirp *= coef;
    }
    out
}

/// The LSFs of the frame's `mode.lpc_n()` analyses (the encoder's LPC
/// buffer holds the look-back followed by the new frame).
pub fn analyse(buffer: &[f32; LOOKBACK + WINDOW], mode: Mode, lsf: &mut [[f32; ORDER]; 2]) {
    let w = windows();
    for (k, out) in lsf.iter_mut().enumerate().take(mode.lpc_n()) {
        let mut x = [0.0f32; WINDOW];
        if k + 1 < mode.lpc_n() {
            for i in 0..WINDOW {
                x[i] = buffer[i] * w.symmetric[i];
            }
        } else {
            for i in 0..WINDOW {
                x[i] = buffer[LOOKBACK + i] * w.asymmetric[i];
            }
        }
        let mut r = [0.0f32; ORDER + 1];
        for (lag, rv) in r.iter_mut().enumerate() {
            *rv = x[..WINDOW - lag]
                .iter()
                .zip(&x[lag..])
                .map(|(a, b)| a * b)
                .sum::<f32>()
                * w.lag[lag];
        }
        *out = a_to_lsf(&bw_expand(&levinson(&r), CHIRP_SYNT));
    }
}

/// LPC to line spectral frequencies (radians), by a coarse-to-fine grid search
/// of the roots of the symmetric and antisymmetric polynomials.
fn a_to_lsf(a: &Lpc) -> [f32; ORDER] {
    const STEPS: [f32; 4] = [0.00635, 0.003175, 0.0015875, 0.00079375];
    const HALF: usize = ORDER / 2;
    let mut p = [0.0f32; HALF];
    let mut q = [0.0f32; HALF];
    for i in 0..HALF {
        p[i] = -(a[i + 1] + a[ORDER - i]);
        q[i] = a[ORDER - i] - a[i + 1];
    }
    let mut pq = [[0.0f32; HALF]; 2];
    pq[0][0] = -1.0 - p[0];
    pq[1][0] = 1.0 - q[0];
    for i in 1..HALF {
        pq[0][i] = -pq[0][i - 1] - p[i];
        pq[1][i] = pq[1][i - 1] - q[i];
    }
    pq[0][HALF - 1] /= 2.0;
    pq[1][HALF - 1] /= 2.0;

    let mut freq = [0.0f32; ORDER];
    let mut old = [f32::MAX; 2];
    let mut omega = 0.0f32;
    let mut old_omega = 0.0f32;
    for (idx, f) in freq.iter_mut().enumerate() {
        let which = idx & 1;
        let c = &pq[which];
        let mut step_idx = 0;
        while step_idx < STEPS.len() {
            let h = (omega * 2.0 * PI).cos();
            let h1 = 2.0 * h + c[0];
            let h2 = 2.0 * h * h1 - 1.0 + c[1];
            let h3 = 2.0 * h * h2 - h1 + c[2];
            let h4 = 2.0 * h * h3 - h2 + c[3];
            let h5 = h * h4 - h3 + c[4];
            if h5 * old[which] <= 0.0 || omega >= 0.5 {
                if step_idx == STEPS.len() - 1 {
                    *f = if h5.abs() >= old[which].abs() {
                        omega - STEPS[step_idx]
                    } else {
                        omega
                    };
                    old[which] = if old[which] >= 0.0 {
                        -f32::MAX
                    } else {
                        f32::MAX
                    };
                    omega = old_omega;
                    step_idx = STEPS.len();
                } else {
                    if step_idx == 0 {
                        old_omega = omega;
                    }
                    step_idx += 1;
                    omega -= STEPS[step_idx];
                }
            } else {
                old[which] = h5;
                omega += STEPS[step_idx];
            }
        }
    }
    freq.map(|f| f * 2.0 * PI)
}

/// LSFs (radians) back to LPC coefficients.
pub fn lsf_to_a(lsf: &[f32; ORDER]) -> Lpc {
    const HALF: usize = ORDER / 2;
    let mut freq = lsf.map(|f| f / (2.0 * PI));
    // Ill-conditioned input: spread the frequencies evenly (RFC 3951 A.39).
    if freq[0] <= 0.0 || freq[ORDER - 1] >= 0.5 {
        if freq[0] <= 0.0 {
            freq[0] = 0.022;
        }
        if freq[ORDER - 1] >= 0.5 {
            freq[ORDER - 1] = 0.499;
        }
        let step = (freq[ORDER - 1] - freq[0]) / (ORDER - 1) as f32;
        for i in 1..ORDER {
            freq[i] = freq[i - 1] + step;
        }
    }
    let mut p = [0.0f32; HALF];
    let mut q = [0.0f32; HALF];
    for i in 0..HALF {
        p[i] = (2.0 * PI * freq[2 * i]).cos();
        q[i] = (2.0 * PI * freq[2 * i + 1]).cos();
    }
    let (mut a, mut a1, mut a2) = ([0.0f32; HALF + 1], [0.0f32; HALF], [0.0f32; HALF]);
    let (mut b, mut b1, mut b2) = ([0.0f32; HALF + 1], [0.0f32; HALF], [0.0f32; HALF]);
    let mut step = |a: &mut [f32; HALF + 1], b: &mut [f32; HALF + 1]| {
        for i in 0..HALF {
            a[i + 1] = a[i] - 2.0 * p[i] * a1[i] + a2[i];
            b[i + 1] = b[i] - 2.0 * q[i] * b1[i] + b2[i];
            a2[i] = a1[i];
            a1[i] = a[i];
            b2[i] = b1[i];
            b1[i] = b[i];
        }
    };
    a[0] = 0.25;
    b[0] = 0.25;
    step(&mut a, &mut b);
    let mut out = [0.0f32; ORDER + 1];
    out[0] = 1.0;
    for (j, o) in out.iter_mut().skip(1).enumerate() {
        (a[0], b[0]) = if j == 0 { (0.25, -0.25) } else { (0.0, 0.0) };
        step(&mut a, &mut b);
        *o = 2.0 * (a[HALF] + b[HALF]);
    }
    out
}

/// Split-VQ of one LSF vector: the three indices and the quantised vector.
pub fn quantise(lsf: &[f32; ORDER]) -> ([usize; 3], [f32; ORDER]) {
    let mut idx = [0; 3];
    let mut q = [0.0; ORDER];
    let (mut cb_pos, mut x_pos) = (0, 0);
    for s in 0..3 {
        let dim = LSF_SPLIT_DIM[s];
        let x = &lsf[x_pos..x_pos + dim];
        let cb = &LSF_CB[cb_pos..cb_pos + dim * LSF_SPLIT_SIZE[s]];
        let (best, _) = cb
            .chunks_exact(dim)
            .map(|v| v.iter().zip(x).map(|(c, x)| (x - c) * (x - c)).sum::<f32>())
            .enumerate()
            .fold((0, f32::MAX), |b, (i, d)| if d < b.1 { (i, d) } else { b });
        idx[s] = best;
        q[x_pos..x_pos + dim].copy_from_slice(&cb[best * dim..(best + 1) * dim]);
        x_pos += dim;
        cb_pos += dim * LSF_SPLIT_SIZE[s];
    }
    (idx, q)
}

/// The LSF vector of three split-VQ indices (each below its split's size).
pub fn dequantise(idx: &[u32]) -> [f32; ORDER] {
    let mut q = [0.0; ORDER];
    let (mut cb_pos, mut x_pos) = (0, 0);
    for s in 0..3 {
        let dim = LSF_SPLIT_DIM[s];
        let at = cb_pos + idx[s] as usize * dim;
        q[x_pos..x_pos + dim].copy_from_slice(&LSF_CB[at..at + dim]);
        x_pos += dim;
        cb_pos += dim * LSF_SPLIT_SIZE[s];
    }
    q
}

/// Forces a minimum distance between neighbouring LSFs and keeps them within
/// (0, π) so the synthesis filter stays stable.
pub fn stabilise(lsf: &mut [f32; ORDER]) {
    const EPS: f32 = 0.039;
    const EPS2: f32 = 0.0195;
    for _ in 0..2 {
        for k in 0..ORDER - 1 {
            if lsf[k + 1] - lsf[k] < EPS {
                if lsf[k + 1] < lsf[k] {
                    lsf[k + 1] = lsf[k] + EPS2;
                    lsf[k] = lsf[k + 1] - EPS2;
                } else {
                    lsf[k] -= EPS2;
                    lsf[k + 1] += EPS2;
                }
            }
            // RFC 3951 clamps to [0.01, 3.14], just inside (0, π).
            #[allow(clippy::approx_constant)]
            let top = 3.14;
            lsf[k] = lsf[k].clamp(0.01, top);
        }
    }
}

fn interpolate(a: &[f32; ORDER], b: &[f32; ORDER], coef: f32) -> [f32; ORDER] {
    std::array::from_fn(|i| coef * a[i] + (1.0 - coef) * b[i])
}

/// The LPC filter of every sub-frame, interpolated between the previous
/// frame's last LSF set `old` and this frame's `lsf` sets (RFC 3951 §3.2.6).
/// `old` becomes the frame's last set.
pub fn interpolated_filters(
    mode: Mode,
    old: &mut [f32; ORDER],
    lsf: &[[f32; ORDER]; 2],
    out: &mut [Lpc; 6],
) {
    match mode {
        Mode::Ms30 => {
            out[0] = lsf_to_a(&interpolate(old, &lsf[0], LSF_WEIGHT_30MS[0]));
            for i in 1..6 {
                out[i] = lsf_to_a(&interpolate(&lsf[0], &lsf[1], LSF_WEIGHT_30MS[i]));
            }
            *old = lsf[1];
        }
        Mode::Ms20 => {
            for i in 0..4 {
                out[i] = lsf_to_a(&interpolate(old, &lsf[0], LSF_WEIGHT_20MS[i]));
            }
            *old = lsf[0];
        }
    }
}

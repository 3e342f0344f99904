//! The small filters iLBC runs: the input/output high-pass biquads, LPC
//! analysis and synthesis with carried state, and the enhancer's decimator.

use super::lanes::corr;
use super::lpc::Lpc;
use super::tables::LP_DOWNSAMPLE;
use super::{BLOCKL_MAX, ORDER};

/// A second-order section (`zeros`, and `poles` with `poles[0] = 1`) with its
/// two input and two output samples of memory.
#[derive(Debug, Clone, Default)]
pub struct Biquad {
    x: [f32; 2],
    y: [f32; 2],
}

impl Biquad {
    pub fn run(&mut self, zeros: &[f32; 3], poles: &[f32; 3], io: &mut [f32]) {
        for s in io {
            let x = *s;
            let y = zeros[0] * x + zeros[1] * self.x[0] + zeros[2] * self.x[1]
                - poles[1] * self.y[0]
                - poles[2] * self.y[1];
            self.x = [x, self.x[0]];
            self.y = [y, self.y[0]];
            *s = y;
        }
    }
}

/// LPC analysis (inverse) filter `A(z)`: `out = A(z) in`, carrying the last
/// `ORDER` inputs in `mem`.
pub fn analysis(input: &[f32], a: &Lpc, out: &mut [f32], mem: &mut [f32; ORDER]) {
    for (n, o) in out.iter_mut().enumerate().take(input.len()) {
        let mut acc = 0.0;
        for (k, c) in a.iter().enumerate() {
            acc += c * if n >= k {
                input[n - k]
            } else {
                mem[ORDER + n - k]
            };
        }
        *o = acc;
    }
    remember(input, mem);
}

/// LPC synthesis filter `1/A(z)` in place (at most a frame), carrying the last `ORDER`
/// outputs; by [`all_pole_fast`], for the decoder's output.
pub fn synthesis(io: &mut [f32], a: &Lpc, mem: &mut [f32; ORDER]) {
    let n = io.len();
    let mut buf = [0.0f32; ORDER + BLOCKL_MAX];
    buf[..ORDER].copy_from_slice(mem);
    buf[ORDER..ORDER + n].copy_from_slice(io);
    all_pole_fast(&mut buf, ORDER, ORDER + n, a);
    io.copy_from_slice(&buf[ORDER..ORDER + n]);
    mem.copy_from_slice(&buf[n..n + ORDER]);
}

fn remember(signal: &[f32], mem: &mut [f32; ORDER]) {
    if signal.len() >= ORDER {
        mem.copy_from_slice(&signal[signal.len() - ORDER..]);
    } else {
        mem.rotate_left(signal.len());
        mem[ORDER - signal.len()..].copy_from_slice(signal);
    }
}

/// All-pole filter in place over `buf[from..to]`, where the `ORDER` samples
/// before `from` are the filter's history: RFC 3951's direct form, which the
/// encoder's quantisation runs on.
pub fn all_pole(buf: &mut [f32], from: usize, to: usize, a: &Lpc) {
    for n in from..to {
        let w: &mut [f32; ORDER + 1] = (&mut buf[n - ORDER..=n]).try_into().unwrap();
        let mut acc = w[ORDER];
        for k in 1..ORDER + 1 {
            acc -= a[k] * w[ORDER - k];
        }
        w[ORDER] = acc;
    }
}

/// [`all_pole`] with its terms added in another order. The direct form subtracts the
/// newest output's term first, so each output waits on the previous one through ten
/// subtractions; here the seven older outputs' terms are summed first, in a tree, and the
/// three newest subtracted last, so an output waits on its predecessor for one multiplication
/// and one subtraction, some four times faster. The results differ from the direct form's
/// in the last bits: the decoder's synthesis and start state take it (a decoded sample may
/// round to ±1 of the direct form's), the encoder keeps the direct form.
pub fn all_pole_fast(buf: &mut [f32], from: usize, to: usize, a: &Lpc) {
    let [_, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10] = *a;
    for t in from..to {
        let w: &mut [f32; ORDER + 1] = (&mut buf[t - ORDER..=t]).try_into().unwrap();
        let older = ((a4 * w[6] + a5 * w[5]) + (a6 * w[4] + a7 * w[3]))
            + ((a8 * w[2] + a9 * w[1]) + a10 * w[0]);
        w[10] = (((w[10] - older) - a3 * w[7]) - a2 * w[8]) - a1 * w[9];
    }
}

/// Pole-zero filter of `input` (at most 160 samples) with zero initial state: the numerator
/// is the reversed denominator, which makes it all-pass (used on the start state). The zeros'
/// part is a correlation of the time-reversed input with `a`, summed in the same order as the
/// direct form; the poles' part, by `poles` ([`all_pole`] or [`all_pole_fast`]), runs on it.
pub fn all_pass(
    input: &[f32],
    a: &Lpc,
    out: &mut [f32],
    poles: impl Fn(&mut [f32], usize, usize, &Lpc),
) {
    const MAX: usize = 2 * 80;
    let n = input.len();
    let mut rev = [0.0f32; ORDER + MAX];
    for (r, x) in rev[..n].iter_mut().zip(input.iter().rev()) {
        *r = *x;
    }
    let mut a_rev = *a;
    a_rev.reverse();
    let mut y = [0.0f32; ORDER + MAX];
    corr(&mut y[ORDER..ORDER + n], &rev[..n + ORDER], &a_rev);
    y[ORDER..ORDER + n].reverse();
    poles(&mut y, ORDER, ORDER + n, a);
    out[..n].copy_from_slice(&y[ORDER..ORDER + n]);
}

/// Low-pass and 2:1 decimation of `input` (at most 360 samples, whose 6 preceding
/// samples are `state`), as the enhancer's pitch estimator wants it; `out` gets
/// `input.len() / 2` samples. Past the end the input is taken as zero (the filter's
/// delay is 3).
pub fn downsample(input: &[f32], state: &[f32; 6], out: &mut [f32]) {
    const MAX: usize = 360;
    let n = input.len();
    assert!(n <= MAX);
    // The padded signal (state, input, zeros) split into its even and odd samples, so
    // that each tap's contribution to every output is a contiguous run, added tap by
    // tap in the order of the direct form.
    let (mut even, mut odd) = ([0.0f32; MAX / 2 + 8], [0.0f32; MAX / 2 + 8]);
    for (p, &x) in state.iter().chain(input).enumerate() {
        if p % 2 == 0 {
            even[p / 2] = x;
        } else {
            odd[p / 2] = x;
        }
    }
    let outs = out.len().min(n.div_ceil(2));
    let mut acc = [-0.0f32; MAX / 2];
    for (j, &c) in LP_DOWNSAMPLE.iter().enumerate() {
        // Output `o` takes padded sample `9 + 2o - j`.
        let src = if j % 2 == 1 {
            &even[(9 - j) / 2..]
        } else {
            &odd[(8 - j) / 2..]
        };
        for (a, x) in acc[..outs].iter_mut().zip(src) {
            *a += c * x;
        }
    }
    out[..outs].copy_from_slice(&acc[..outs]);
}

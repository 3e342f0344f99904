//! The adaptive codebook (RFC 3951 §3.6 and §4.3): vectors are cut from the
//! already decoded residual (`mem`), from its last part repeated with an
//! interpolated seam ("augmented" vectors, 40-sample targets only), and from
//! the same two sections of `mem` passed through an 8-tap filter. Three
//! stages of gain-shape quantisation code each target.

use super::lanes::corr;
use super::tables::{CB_FILTER, GAIN_SQ3, GAIN_SQ4, GAIN_SQ5};
use super::SUBL;

/// Samples of decoded residual the codebook of a 40-sample sub-frame is cut from.
pub const MEM_LEN: usize = 147;
/// The (shorter) memory for the 22/23 samples completing the start state.
pub const STATE_MEM_LEN: usize = 85;
const MAX_GAIN: f32 = 1.3;
const STAGES: usize = 3;

/// A codebook over one memory: the memory and its filtered copy.
pub struct Codebook {
    mem: [f32; MEM_LEN],
    filtered: [f32; MEM_LEN],
    len: usize,
    veclen: usize,
}

impl Codebook {
    /// The codebook for `veclen`-sample targets over the last `mem.len()`
    /// samples of decoded residual.
    pub fn new(mem: &[f32], veclen: usize) -> Codebook {
        let len = mem.len();
        let mut cb = Codebook {
            mem: [0.0; MEM_LEN],
            filtered: [0.0; MEM_LEN],
            len,
            veclen,
        };
        cb.mem[..len].copy_from_slice(mem);
        // filtered[t] = sum_j mem[t - 3 + j] * CB_FILTER[7 - j], zero outside.
        let mut padded = [0.0f32; MEM_LEN + 7];
        padded[3..3 + len].copy_from_slice(mem);
        let mut taps = CB_FILTER;
        taps.reverse();
        corr(&mut cb.filtered[..len], &padded[..len + 7], &taps);
        cb
    }

    /// Vectors cut straight from memory, before the augmented ones.
    fn plain(&self) -> usize {
        self.len - self.veclen + 1
    }

    /// Size of one section (plain plus augmented vectors).
    fn section(&self) -> usize {
        self.plain() + if self.veclen == SUBL { SUBL / 2 } else { 0 }
    }

    /// Number of vectors: the section, then its filtered twin.
    pub fn size(&self) -> usize {
        2 * self.section()
    }

    /// Writes vector `index` (below [`Codebook::size`]) into `out`.
    pub fn vector(&self, index: usize, out: &mut [f32]) {
        let (m, i) = if index < self.section() {
            (&self.mem[..self.len], index)
        } else {
            (&self.filtered[..self.len], index - self.section())
        };
        let (l, n) = (self.len, self.veclen);
        if i < self.plain() {
            let k = i + n;
            out[..n].copy_from_slice(&m[l - k..l - k + n]);
        } else {
            // The last `k/2` samples repeated, crossfaded over 5 samples.
            let k = 2 * (i - self.plain()) + n;
            let high = k / 2;
            let low = high - 5;
            out[..low].copy_from_slice(&m[l - high..l - high + low]);
            let mut alpha = 0.0f32;
            for j in low..high {
                out[j] = (1.0 - alpha) * m[l - high + j] + alpha * m[l - k + j];
                alpha += 0.2;
            }
            out[high..n].copy_from_slice(&m[l - k + high..l - k + n]);
        }
    }
}

fn gain_table(stage: usize) -> &'static [f32] {
    match stage {
        0 => &GAIN_SQ5,
        1 => &GAIN_SQ4,
        _ => &GAIN_SQ3,
    }
}

/// The gain of a stage, relative to the previous stage's gain (`1.0` first).
pub fn dequantise_gain(stage: usize, index: u32, previous: f32) -> f32 {
    previous.abs().max(0.1) * gain_table(stage)[index as usize]
}

fn quantise_gain(stage: usize, gain: f32, previous: f32) -> (u32, f32) {
    let scale = previous.abs().max(0.1);
    let table = gain_table(stage);
    let (i, _) = table
        .iter()
        .map(|c| (gain - scale * c) * (gain - scale * c))
        .enumerate()
        .fold((0, f32::MAX), |b, (i, d)| if d < b.1 { (i, d) } else { b });
    (i as u32, scale * table[i])
}

/// Decodes a target: the sum of the three stages' gained vectors.
pub fn construct(cb: &Codebook, index: &[u32], gain: &[u32], out: &mut [f32]) {
    let n = cb.veclen;
    let g0 = dequantise_gain(0, gain[0], 1.0);
    let g1 = dequantise_gain(1, gain[1], g0);
    let g2 = dequantise_gain(2, gain[2], g1);
    let mut v = [0.0f32; SUBL];
    out[..n].fill(0.0);
    for (k, g) in [g0, g1, g2].into_iter().enumerate() {
        cb.vector(index[k] as usize, &mut v);
        for j in 0..n {
            out[j] += g * v[j];
        }
    }
}

/// Which indices the bitstream can carry for a stage: the later stages of
/// the first sub-frame after the start state have 7 bits, which RFC 3951
/// maps to a subset of the 256 vectors (see [`to_wire`]).
pub fn allowed(restricted: bool, stage: usize, index: usize) -> bool {
    !restricted || stage == 0 || index < 44 || (108..172).contains(&index) || index >= 236
}

/// 7-bit wire index of a later-stage vector of the first sub-frame.
pub fn to_wire(index: u32) -> u32 {
    match index {
        108..=171 => index - 64,
        236.. => index - 128,
        i => i,
    }
}

/// Inverse of [`to_wire`].
pub fn from_wire(index: u32) -> u32 {
    match index {
        44..=107 => index + 64,
        108..=127 => index + 128,
        i => i,
    }
}

/// Most vectors in a codebook (two sections of 108 plain and 20 augmented).
const MAX_SIZE: usize = 2 * (MEM_LEN - SUBL + 1 + SUBL / 2);
/// Augmented vectors in a codebook of 40-sample targets (both sections).
const MAX_AUG: usize = SUBL;

/// The encoder's search state: correlations and energies of every vector of
/// a codebook, computed without building the plain vectors. A plain vector
/// is a window of memory, so with the memory reversed (`rev`) its sample `j`
/// is `rev[i + n - 1 - j]`: the target's correlation with all of them is `n`
/// unit-stride loops over the vector index, which vectorise, instead of one
/// short dot product (and a horizontal sum) per vector; their energies are
/// differences of a running sum. The few augmented vectors are built once per
/// target.
pub struct SearchSpace {
    rev: [[f32; MEM_LEN]; 2],
    aug: [[f32; SUBL]; MAX_AUG],
    /// `1 / energy` of each vector (0 for a silent one).
    inv_energy: [f32; MAX_SIZE],
    cross: [f32; MAX_SIZE],
    measure: [f32; MAX_SIZE],
}

impl SearchSpace {
    pub fn new() -> SearchSpace {
        SearchSpace {
            rev: [[0.0; MEM_LEN]; 2],
            aug: [[0.0; SUBL]; MAX_AUG],
            inv_energy: [0.0; MAX_SIZE],
            cross: [0.0; MAX_SIZE],
            measure: [0.0; MAX_SIZE],
        }
    }

    /// Reverses both sections of `cb`, builds its augmented vectors and
    /// inverts every vector's energy.
    fn prepare(&mut self, cb: &Codebook) {
        let (n, plain, section) = (cb.veclen, cb.plain(), cb.section());
        let inv = |e: f32| {
            if e > 0.0 {
                1.0 / (e + f32::EPSILON)
            } else {
                0.0
            }
        };
        for (s, m) in [&cb.mem, &cb.filtered].into_iter().enumerate() {
            let rev = &mut self.rev[s];
            for (r, x) in rev[..cb.len].iter_mut().zip(m[..cb.len].iter().rev()) {
                *r = *x;
            }
            // Running sum of squares in f64, so differences lose nothing.
            let mut prefix = [0.0f64; MEM_LEN + 1];
            for (k, x) in rev[..cb.len].iter().enumerate() {
                prefix[k + 1] = prefix[k] + f64::from(x * x);
            }
            for i in 0..plain {
                self.inv_energy[s * section + i] = inv((prefix[i + n] - prefix[i]) as f32);
            }
            for a in 0..section - plain {
                let v = &mut self.aug[s * (section - plain) + a];
                cb.vector(s * section + plain + a, v);
                self.inv_energy[s * section + plain + a] = inv(dot(&v[..n], &v[..n]));
            }
        }
    }

    /// The correlation of `t` with every vector of `cb`, into `cross`.
    fn correlate(&mut self, cb: &Codebook, t: &[f32]) {
        let (n, plain, section) = (cb.veclen, cb.plain(), cb.section());
        for s in 0..2 {
            let out = &mut self.cross[s * section..s * section + plain];
            out.fill(0.0);
            for (j, &tj) in t[..n].iter().enumerate() {
                axpy(out, tj, &self.rev[s][n - 1 - j..n - 1 - j + plain]);
            }
            for a in 0..section - plain {
                self.cross[s * section + plain + a] =
                    dot(&t[..n], &self.aug[s * (section - plain) + a][..n]);
            }
        }
    }

    /// Three-stage search of `target` (weighted, as is `cb`): the indices and
    /// gain indices to send. `first_subframe` restricts the later stages to
    /// the indices 7 bits can carry.
    pub fn search(
        &mut self,
        cb: &Codebook,
        target: &[f32],
        first_subframe: bool,
        index: &mut [u32],
        gain_index: &mut [u32],
    ) {
        let n = cb.veclen;
        let size = cb.size();
        self.prepare(cb);
        let mut t = [0.0f32; SUBL];
        t[..n].copy_from_slice(&target[..n]);
        let target_energy = dot(&t[..n], &t[..n]);
        let mut sum = [0.0f32; SUBL];
        let mut gains = [0.0f32; STAGES];
        let mut v = [0.0f32; SUBL];
        for stage in 0..STAGES {
            self.correlate(cb, &t[..n]);
            // Every vector's measure without branches (so the loop vectorises), -inf where
            // the gain is out of range or the bitstream cannot carry the index; then the
            // first largest above -1e7.
            let measure = &mut self.measure[..size];
            for ((m, &c), &inv) in measure.iter_mut().zip(&self.cross).zip(&self.inv_energy) {
                let g = c * inv;
                let value = if stage == 0 && c <= 0.0 {
                    -1e7
                } else {
                    c * c * inv
                };
                *m = if g.abs() < MAX_GAIN {
                    value
                } else {
                    f32::NEG_INFINITY
                };
            }
            if first_subframe && n == SUBL && stage > 0 {
                for i in (0..size).filter(|&i| !allowed(true, stage, i)) {
                    measure[i] = f32::NEG_INFINITY;
                }
            }
            let (mut best, mut best_measure) = (0, -1e7f32);
            for (i, &m) in measure.iter().enumerate() {
                if m > best_measure {
                    (best, best_measure) = (i, m);
                }
            }
            let best_gain = if best_measure > -1e7 {
                self.cross[best] * self.inv_energy[best]
            } else {
                0.0
            };
            let previous = if stage == 0 { 1.0 } else { gains[stage - 1] };
            let g = if stage == 0 {
                best_gain.clamp(0.0, MAX_GAIN)
            } else {
                best_gain
            };
            let (gi, q) = quantise_gain(stage, g, previous);
            index[stage] = best as u32;
            gain_index[stage] = gi;
            gains[stage] = q;
            cb.vector(best, &mut v);
            for j in 0..n {
                sum[j] += q * v[j];
                t[j] -= q * v[j];
            }
        }
        // Raise the first gain while the decoded energy stays below the
        // target's (energy matching, RFC 3951 §3.6.4.2).
        let coded_energy = dot(&sum[..n], &sum[..n]);
        let first = gain_index[0] as usize;
        let mut j = first;
        for (i, g) in GAIN_SQ5.iter().enumerate().skip(first) {
            if coded_energy * g * g < target_energy * gains[0] * gains[0]
                && GAIN_SQ5[j] < 2.0 * gains[0]
            {
                j = i;
            }
        }
        gain_index[0] = j as u32;
    }
}

/// `out += a * x`, the search's inner loop. A function of its own so the
/// slices are known not to overlap, which lets the loop vectorise; 8 lanes
/// wide where the CPU has AVX2 (checked once, cached by std), else 4 (SSE2,
/// x86-64's baseline). Multiplication and addition stay separate (no FMA), so
/// every machine computes the same bitstream.
fn axpy(out: &mut [f32], a: f32, x: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, the only feature the function enables.
        return unsafe { axpy_avx2(out, a, x) };
    }
    axpy_body(out, a, x)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn axpy_avx2(out: &mut [f32], a: f32, x: &[f32]) {
    axpy_body(out, a, x)
}

#[inline(always)]
fn axpy_body(out: &mut [f32], a: f32, x: &[f32]) {
    for (o, x) in out.iter_mut().zip(x) {
        *o += a * x;
    }
}

/// Dot product with independent partial sums so the compiler can vectorise it.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            acc[k] += x[k] * y[k];
        }
    }
    let tail: f32 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

//! The adaptive codebook (RFC 3951 §3.6 and §4.3): vectors are cut from the
//! already decoded residual (`mem`), from its last part repeated with an
//! interpolated seam ("augmented" vectors, 40-sample targets only), and from
//! the same two sections of `mem` passed through an 8-tap filter. Three
//! stages of gain-shape quantisation code each target.

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
        for t in 0..len {
            let mut acc = 0.0;
            for (j, c) in CB_FILTER.iter().rev().enumerate() {
                let i = t as isize - 3 + j as isize;
                if i >= 0 && (i as usize) < len {
                    acc += mem[i as usize] * c;
                }
            }
            cb.filtered[t] = acc;
        }
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

/// The vectors of a codebook with their energies, for the encoder's search.
pub struct SearchSpace {
    vectors: Vec<f32>,
    energy: Vec<f32>,
    veclen: usize,
}

impl SearchSpace {
    pub fn new() -> SearchSpace {
        SearchSpace {
            vectors: vec![0.0; 2 * (MEM_LEN - SUBL + 1 + SUBL / 2) * SUBL],
            energy: vec![0.0; 2 * (MEM_LEN - SUBL + 1 + SUBL / 2)],
            veclen: 0,
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
        self.veclen = n;
        let size = cb.size();
        for i in 0..size {
            let v = &mut self.vectors[i * n..(i + 1) * n];
            cb.vector(i, v);
            self.energy[i] = dot(v, v);
        }
        let mut t = [0.0f32; SUBL];
        t[..n].copy_from_slice(&target[..n]);
        let target_energy = dot(&t[..n], &t[..n]);
        let mut sum = [0.0f32; SUBL];
        let mut gains = [0.0f32; STAGES];
        for stage in 0..STAGES {
            let (mut best, mut best_measure, mut best_gain) = (0, -1e7f32, 0.0f32);
            for i in 0..size {
                if !allowed(first_subframe && n == SUBL, stage, i) {
                    continue;
                }
                let cross = dot(&t[..n], &self.vectors[i * n..(i + 1) * n]);
                let e = self.energy[i];
                let inv = if e > 0.0 {
                    1.0 / (e + f32::EPSILON)
                } else {
                    0.0
                };
                let measure = if stage == 0 && cross <= 0.0 {
                    -1e7
                } else {
                    cross * cross * inv
                };
                let g = cross * inv;
                if measure > best_measure && g.abs() < MAX_GAIN {
                    (best, best_measure, best_gain) = (i, measure, g);
                }
            }
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
            let v = &self.vectors[best * n..(best + 1) * n];
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

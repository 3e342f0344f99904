//! GSM 06.10 full rate (ETSI EN 300 961, "RPE-LTP"): 160 samples of 16-bit linear PCM to a
//! 33-byte frame and back, in the frame layout of RFC 3551 §4.5.8 (a 0xD signature nibble,
//! then the 260 bits of the parameters, most significant bit first).
//!
//! Bit-exact with libgsm, which strowger linked for GSM before (conformance.rs compares the two
//! on speech, music, tones, noise and random frames): the standard's 16-bit fixed-point
//! arithmetic with libgsm's integer widths, as its default build (no `FAST`, no
//! `USE_FLOAT_MUL`) computes it, including where a result is truncated to 16 bits rather than
//! saturated. The standard's sums of products are exact in 32 bits (the ranges are argued at
//! each), so the encoder's correlations — the long-term predictor's 81 lags, the
//! autocorrelation and the weighting filter — run as SSE2 `pmaddwd` on x86-64, and so does its
//! analysis lattice, stage by stage, all tested equal to the portable loops they replace.

/// Samples in one frame (20 ms at 8 kHz).
pub const FRAME_SAMPLES: usize = 160;
/// Bytes in one frame.
pub const FRAME_BYTES: usize = 33;

/// A frame without the 0xD signature of GSM 06.10 (libgsm refuses it the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadSignature;

// The standard's arithmetic operators (§4.2 and add.c of libgsm) on 16-bit words.

#[inline(always)]
fn add(a: i16, b: i16) -> i16 {
    a.saturating_add(b)
}

#[inline(always)]
fn sub(a: i16, b: i16) -> i16 {
    a.saturating_sub(b)
}

/// mult_r, truncated to 16 bits as libgsm's macro is (no operand pair reaches -32768 * -32768).
#[inline(always)]
fn mult_r(a: i16, b: i16) -> i16 {
    ((i32::from(a) * i32::from(b) + 16384) >> 15) as i16
}

#[inline(always)]
fn mult(a: i16, b: i16) -> i16 {
    ((i32::from(a) * i32::from(b)) >> 15) as i16
}

/// norm: left shifts that normalise a non-zero 32-bit value (0 for -2^30 and below).
#[inline(always)]
fn norm(a: i64) -> u32 {
    let a = a as i32;
    if a < 0 {
        if a <= -(1 << 30) {
            0
        } else {
            (!a).leading_zeros() - 1
        }
    } else {
        a.leading_zeros() - 1
    }
}

/// div for 0 <= num <= den: the standard's 15-step restoring division, whose
/// quotient saturates at 32767 when num equals den.
#[inline(always)]
fn div(num: i16, den: i16) -> i16 {
    if num == 0 {
        return 0;
    }
    ((i32::from(num) << 15) / i32::from(den)).min(32767) as i16
}

/// The decoded long-term gains (table 4.3b of the standard, QLB).
const QLB: [i16; 4] = [3277, 11469, 21299, 32767];
/// Decision levels of the long-term gain (table 4.3a, DLB).
const DLB: [i16; 3] = [6554, 16384, 26214];
/// Inverse mantissas of the APCM quantiser (table 4.5, NRFAC).
const NRFAC: [i16; 8] = [29128, 26215, 23832, 21846, 20165, 18725, 17476, 16384];
/// Mantissas of the APCM inverse quantiser (table 4.6, FAC).
const FAC: [i16; 8] = [18431, 20479, 22527, 24575, 26623, 28671, 30719, 32767];
/// Bits of the eight coded log-area ratios.
const LAR_BITS: [u32; 8] = [6, 6, 5, 5, 4, 4, 3, 3];
/// The four stretches of a frame that use one set of interpolated coefficients (§4.2.9.1).
const SEGMENTS: [(usize, usize); 4] = [(0, 13), (13, 27), (27, 40), (40, 160)];

/// The coded parameters of one frame (table 1.1 of the standard).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Params {
    larc: [i16; 8],
    nc: [i16; 4],
    bc: [i16; 4],
    mc: [i16; 4],
    xmaxc: [i16; 4],
    xmc: [[i16; 13]; 4],
}

impl Params {
    fn pack(&self, out: &mut [u8; FRAME_BYTES]) {
        let mut w = Bits::default();
        w.put(0xD, 4, out);
        for (&v, &n) in self.larc.iter().zip(&LAR_BITS) {
            w.put(v, n, out);
        }
        for j in 0..4 {
            w.put(self.nc[j], 7, out);
            w.put(self.bc[j], 2, out);
            w.put(self.mc[j], 2, out);
            w.put(self.xmaxc[j], 6, out);
            for &x in &self.xmc[j] {
                w.put(x, 3, out);
            }
        }
    }

    fn unpack(frame: &[u8; FRAME_BYTES]) -> Result<Params, BadSignature> {
        let mut r = Bits::default();
        if r.get(4, frame) != 0xD {
            return Err(BadSignature);
        }
        let mut p = Params::default();
        for (v, &n) in p.larc.iter_mut().zip(&LAR_BITS) {
            *v = r.get(n, frame);
        }
        for j in 0..4 {
            p.nc[j] = r.get(7, frame);
            p.bc[j] = r.get(2, frame);
            p.mc[j] = r.get(2, frame);
            p.xmaxc[j] = r.get(6, frame);
            for x in &mut p.xmc[j] {
                *x = r.get(3, frame);
            }
        }
        Ok(p)
    }
}

/// A most-significant-bit-first cursor over a frame.
#[derive(Default)]
struct Bits {
    acc: u32,
    len: u32,
    at: usize,
}

impl Bits {
    #[inline(always)]
    fn put(&mut self, v: i16, bits: u32, out: &mut [u8; FRAME_BYTES]) {
        self.acc = (self.acc << bits) | (v as u32 & ((1 << bits) - 1));
        self.len += bits;
        while self.len >= 8 {
            self.len -= 8;
            out[self.at] = (self.acc >> self.len) as u8;
            self.at += 1;
        }
    }

    #[inline(always)]
    fn get(&mut self, bits: u32, frame: &[u8; FRAME_BYTES]) -> i16 {
        while self.len < bits {
            self.acc = (self.acc << 8) | u32::from(frame[self.at]);
            self.at += 1;
            self.len += 8;
        }
        self.len -= bits;
        ((self.acc >> self.len) & ((1 << bits) - 1)) as i16
    }
}

/// The decoded log-area ratios of this frame and the last, from which both the analysis and
/// the synthesis filter interpolate their reflection coefficients (§4.2.8, §4.2.9).
#[derive(Debug, Clone, Default)]
struct Lars {
    pp: [[i16; 8]; 2],
    j: usize,
}

impl Lars {
    /// Decodes `larc` and returns the reflection coefficients of the four [`SEGMENTS`].
    fn segments(&mut self, larc: &[i16; 8]) -> [[i16; 8]; 4] {
        const MIC: [i16; 8] = [-32, -32, -16, -16, -8, -8, -4, -4];
        const B2: [i16; 8] = [0, 0, 4096, -5120, 188, -3584, -682, -2288];
        const INVA: [i16; 8] = [13107, 13107, 13107, 13107, 19223, 17476, 31454, 29708];
        let cur = self.j;
        self.j ^= 1;
        let prev = self.pp[self.j];
        for i in 0..8 {
            let t = add(larc[i], MIC[i]).wrapping_shl(10);
            let t = mult_r(INVA[i], sub(t, B2[i]));
            self.pp[cur][i] = add(t, t);
        }
        let now = self.pp[cur];
        let mut out = [[0i16; 8]; 4];
        for i in 0..8 {
            let (p, c) = (prev[i], now[i]);
            out[0][i] = add(add(p >> 2, c >> 2), p >> 1);
            out[1][i] = add(p >> 1, c >> 1);
            out[2][i] = add(add(p >> 2, c >> 2), c >> 1);
            out[3][i] = c;
        }
        for seg in &mut out {
            for r in seg.iter_mut() {
                // §4.2.9.2: LARp to rp, symmetric in the sign.
                let t = r.saturating_abs();
                let m = if t < 11059 {
                    t << 1
                } else if t < 20070 {
                    t + 11059
                } else {
                    add(t >> 2, 26112)
                };
                *r = if *r < 0 { -m } else { m };
            }
        }
        out
    }
}

/// A GSM 06.10 encoder: 160 samples in, one 33-byte frame out.
#[derive(Debug, Clone)]
pub struct GsmEncoder {
    /// Offset compensation (§4.2.2) and pre-emphasis (§4.2.3).
    z1: i16,
    l_z2: i32,
    mp: i16,
    /// The short-term analysis lattice (§4.2.10).
    u: [i16; 8],
    lars: Lars,
    /// The reconstructed short-term residual: 120 past samples, then this frame's 160.
    dp: [i16; 280],
}

impl Default for GsmEncoder {
    fn default() -> Self {
        Self::new()
    }
}

impl GsmEncoder {
    pub fn new() -> GsmEncoder {
        GsmEncoder {
            z1: 0,
            l_z2: 0,
            mp: 0,
            u: [0; 8],
            lars: Lars::default(),
            dp: [0; 280],
        }
    }

    /// Encodes one frame.
    pub fn encode(&mut self, pcm: &[i16; FRAME_SAMPLES], out: &mut [u8; FRAME_BYTES]) {
        let mut s = self.preprocess(pcm);
        let mut p = Params::default();
        // §4.2.4-4.2.7: LPC analysis.
        let acf = autocorrelation(&mut s);
        let mut r = reflection_coefficients(&acf);
        for (i, r) in r.iter_mut().enumerate() {
            *r = quantize_lar(i, to_lar(*r));
        }
        p.larc = r;
        // §4.2.8-4.2.10: short-term analysis filtering.
        for (rp, &(a, b)) in self.lars.segments(&p.larc).iter().zip(&SEGMENTS) {
            kernels::analysis_filter(&mut self.u, rp, &mut s[a..b]);
        }
        // §4.2.11-4.2.18: the four sub-frames of long-term prediction and RPE coding.
        for j in 0..4 {
            let d: &[i16; 40] = s[j * 40..][..40].try_into().unwrap();
            let (past, now) = self.dp.split_at_mut(120 + j * 40);
            let past: &[i16; 120] = past[j * 40..].try_into().unwrap();
            let (nc, bc) = ltp_parameters(d, past);
            p.nc[j] = nc;
            p.bc[j] = bc;
            // Long-term analysis filtering (§4.2.12); e is padded by five zeros each side for
            // the weighting filter.
            let mut e = [0i16; 50];
            let mut dpp = [0i16; 40];
            let lag = 120 - nc as usize;
            for k in 0..40 {
                dpp[k] = mult_r(QLB[bc as usize], past[lag + k]);
                e[5 + k] = sub(d[k], dpp[k]);
            }
            // §4.2.13-4.2.18: weighting filter, grid selection, APCM, the reconstruction.
            let x = kernels::weighting(&e);
            let (mc, xm) = grid_selection(&x);
            let (xmc, exp, mant, xmaxc) = apcm_quantize(&xm);
            p.mc[j] = mc as i16;
            p.xmaxc[j] = xmaxc;
            p.xmc[j] = xmc;
            let ep = grid_position(mc, &apcm_dequantize(&xmc, exp, mant));
            for k in 0..40 {
                now[k] = add(ep[k], dpp[k]);
            }
        }
        self.dp.copy_within(160.., 0);
        p.pack(out);
    }

    /// §4.2.1-4.2.3: downscaling, offset compensation and pre-emphasis.
    fn preprocess(&mut self, pcm: &[i16; FRAME_SAMPLES]) -> [i16; FRAME_SAMPLES] {
        let (mut z1, mut l_z2, mut mp) = (self.z1, self.l_z2, self.mp);
        let mut so = [0i16; FRAME_SAMPLES];
        for (o, &x) in so.iter_mut().zip(pcm) {
            let so = (x >> 3) << 2;
            let s1 = so - z1;
            z1 = so;
            // The recursive part in 31 by 16 bits; msp and lsp are 16-bit words in libgsm, so
            // a saturated L_z2 wraps here as there.
            let msp = (l_z2 >> 15) as i16;
            let lsp = (i64::from(l_z2) - (i64::from(msp) << 15)) as i16;
            let l_s2 = (i32::from(s1) << 15) + i32::from(mult_r(lsp, 32735));
            l_z2 = (i32::from(msp) * 32735).saturating_add(l_s2);
            let l_temp = l_z2.saturating_add(16384);
            let msp = mult_r(mp, -28180);
            mp = (l_temp >> 15) as i16;
            *o = add(mp, msp);
        }
        (self.z1, self.l_z2, self.mp) = (z1, l_z2, mp);
        so
    }
}

/// §4.2.4: the autocorrelation of the frame at lags 0-8 after scaling it so that every sum
/// fits, leaving `s` rescaled (truncated to 16 bits as in libgsm).
fn autocorrelation(s: &mut [i16; FRAME_SAMPLES]) -> [i32; 9] {
    let smax = s.iter().map(|x| x.saturating_abs()).max().unwrap_or(0);
    let scalauto = if smax == 0 {
        0
    } else {
        4 - norm(i64::from(smax) << 16) as i32
    };
    if scalauto > 0 {
        let f = 16384 >> (scalauto - 1);
        for x in s.iter_mut() {
            *x = mult_r(*x, f);
        }
    }
    // Every sample is now below 2^11 in magnitude, so the 160 products of a lag sum to less
    // than 2^30: the 32-bit sums are exact.
    let acf = kernels::autocorrelation(s);
    if scalauto > 0 {
        for x in s.iter_mut() {
            *x = x.wrapping_shl(scalauto as u32);
        }
    }
    acf
}

/// §4.2.5: reflection coefficients by the Schur recursion.
fn reflection_coefficients(l_acf: &[i32; 9]) -> [i16; 8] {
    let mut r = [0i16; 8];
    if l_acf[0] == 0 {
        return r;
    }
    let t = norm(i64::from(l_acf[0]));
    let acf: [i16; 9] = std::array::from_fn(|i| ((i64::from(l_acf[i]) << t) >> 16) as i16);
    let mut k = acf;
    let mut p = acf;
    for n in 1..=8 {
        let t = p[1].saturating_abs();
        if p[0] < t {
            return r;
        }
        let mut rn = div(t, p[0]);
        if p[1] > 0 {
            rn = -rn;
        }
        r[n - 1] = rn;
        if n == 8 {
            break;
        }
        p[0] = add(p[0], mult_r(p[1], rn));
        for m in 1..=8 - n {
            let old = p[m + 1];
            p[m] = add(old, mult_r(k[m], rn));
            k[m] = add(k[m], mult_r(old, rn));
        }
    }
    r
}

/// §4.2.6: a reflection coefficient to its log-area ratio.
fn to_lar(r: i16) -> i16 {
    let t = r.saturating_abs();
    let t = if t < 22118 {
        t >> 1
    } else if t < 31130 {
        t - 11059
    } else {
        (t - 26112) << 2
    };
    if r < 0 {
        -t
    } else {
        t
    }
}

/// §4.2.7: quantising and coding log-area ratio `i`.
fn quantize_lar(i: usize, lar: i16) -> i16 {
    const A: [i16; 8] = [20480, 20480, 20480, 20480, 13964, 15360, 8534, 9036];
    const B: [i16; 8] = [0, 0, 2048, -2560, 94, -1792, -341, -1144];
    const MAC: [i16; 8] = [31, 31, 15, 15, 7, 7, 3, 3];
    const MIC: [i16; 8] = [-32, -32, -16, -16, -8, -8, -4, -4];
    let t = add(add(mult(A[i], lar), B[i]), 256) >> 9;
    if t > MAC[i] {
        MAC[i] - MIC[i]
    } else if t < MIC[i] {
        0
    } else {
        t - MIC[i]
    }
}

/// §4.2.11: the lag (40-120) and coded gain of the long-term predictor for sub-frame `d`
/// against the 120 past reconstructed residual samples `dp`.
fn ltp_parameters(d: &[i16; 40], dp: &[i16; 120]) -> (i16, i16) {
    let dmax = d.iter().map(|x| x.saturating_abs()).max().unwrap_or(0);
    let t = if dmax == 0 {
        0
    } else {
        norm(i64::from(dmax) << 16)
    };
    let scal = 6u32.saturating_sub(t);
    // Scaled to at most 512 in magnitude: 40 products with 16-bit samples stay below 2^30.
    let wt: [i16; 40] = std::array::from_fn(|k| d[k] >> scal);
    let (nc, l_max) = kernels::best_lag(&wt, dp);
    let l_max = (i64::from(l_max) << 1) >> (6 - scal);
    let lag = 120 - nc;
    let l_power: i64 = dp[lag..lag + 40]
        .iter()
        .map(|&x| {
            let x = i64::from(x >> 3);
            x * x
        })
        .sum::<i64>()
        << 1;
    let bc = if l_max <= 0 {
        0
    } else if l_max >= l_power {
        3
    } else {
        let t = norm(l_power);
        let r = ((l_max << t) >> 16) as i16;
        let s = ((l_power << t) >> 16) as i16;
        DLB.iter().position(|&b| r <= mult(s, b)).unwrap_or(3) as i16
    };
    (nc as i16, bc)
}

/// §4.2.14: the grid of the four with the most energy, and its 13 samples.
fn grid_selection(x: &[i16; 40]) -> (usize, [i16; 13]) {
    let energy = |m: usize| -> i64 {
        (0..13)
            .map(|i| {
                let t = i64::from(x[m + 3 * i] >> 2);
                t * t
            })
            .sum::<i64>()
            << 1
    };
    let (mut mc, mut em) = (0, energy(0));
    for m in 1..4 {
        let e = energy(m);
        if e > em {
            (mc, em) = (m, e);
        }
    }
    (mc, std::array::from_fn(|i| x[mc + 3 * i]))
}

/// §4.2.15: exponent and mantissa of a coded block maximum.
fn exp_mant(xmaxc: i16) -> (i16, i16) {
    let mut exp = if xmaxc > 15 { (xmaxc >> 3) - 1 } else { 0 };
    let mut mant = xmaxc - (exp << 3);
    if mant == 0 {
        return (-4, 7);
    }
    while mant <= 7 {
        mant = (mant << 1) | 1;
        exp -= 1;
    }
    (exp, mant - 8)
}

/// §4.2.15: APCM quantisation of the selected samples: their 3-bit codes, the exponent and
/// mantissa of the block maximum, and its 6-bit code.
fn apcm_quantize(xm: &[i16; 13]) -> ([i16; 13], i16, i16, i16) {
    let xmax = xm.iter().map(|x| x.saturating_abs()).max().unwrap_or(0);
    let mut exp = 0i16;
    let mut t = xmax >> 9;
    let mut itest = false;
    for _ in 0..6 {
        itest |= t <= 0;
        t >>= 1;
        if !itest {
            exp += 1;
        }
    }
    let xmaxc = add(xmax >> (exp + 5), exp << 3);
    let (exp, mant) = exp_mant(xmaxc);
    let shift = (6 - exp) as u32;
    let nr = NRFAC[mant as usize];
    let xmc = std::array::from_fn(|i| (mult(xm[i].wrapping_shl(shift), nr) >> 12) + 4);
    (xmc, exp, mant, xmaxc)
}

/// §4.2.16: APCM inverse quantisation.
fn apcm_dequantize(xmc: &[i16; 13], exp: i16, mant: i16) -> [i16; 13] {
    let fac = FAC[mant as usize];
    let shift = sub(6, exp);
    // gsm_asl(1, shift - 1), which is 0 for a shift of 0.
    let round = if shift > 0 { 1i16 << (shift - 1) } else { 0 };
    std::array::from_fn(|i| {
        let t = ((xmc[i] << 1) - 7) << 12;
        add(mult_r(fac, t), round) >> shift
    })
}

/// §4.2.17: the 13 samples on grid `mc` of a 40-sample sub-frame.
fn grid_position(mc: usize, xmp: &[i16; 13]) -> [i16; 40] {
    let mut ep = [0i16; 40];
    for (i, &x) in xmp.iter().enumerate() {
        ep[mc + 3 * i] = x;
    }
    ep
}

/// A GSM 06.10 decoder: one 33-byte frame in, 160 samples out.
#[derive(Debug, Clone)]
pub struct GsmDecoder {
    /// The reconstructed short-term residual: 120 past samples, then this frame's 160.
    drp: [i16; 280],
    /// The last valid long-term lag (a lag outside 40-120 repeats it).
    nrp: i16,
    /// The short-term synthesis lattice (§4.3.4); libgsm's ninth element is never read.
    v: [i16; 8],
    /// De-emphasis (§4.3.5).
    msr: i16,
    lars: Lars,
}

impl Default for GsmDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl GsmDecoder {
    pub fn new() -> GsmDecoder {
        GsmDecoder {
            drp: [0; 280],
            nrp: 40,
            v: [0; 8],
            msr: 0,
            lars: Lars::default(),
        }
    }

    /// Decodes one frame; a frame without the GSM signature leaves the state as it was.
    pub fn decode(
        &mut self,
        frame: &[u8; FRAME_BYTES],
        out: &mut [i16; FRAME_SAMPLES],
    ) -> Result<(), BadSignature> {
        let p = Params::unpack(frame)?;
        for j in 0..4 {
            // §4.3.2 RPE decoding, §4.3.3 long-term synthesis.
            let (exp, mant) = exp_mant(p.xmaxc[j]);
            let erp = grid_position(p.mc[j] as usize, &apcm_dequantize(&p.xmc[j], exp, mant));
            let nr = if (40..=120).contains(&p.nc[j]) {
                p.nc[j]
            } else {
                self.nrp
            };
            self.nrp = nr;
            let brp = QLB[p.bc[j] as usize];
            let (past, now) = self.drp.split_at_mut(120 + j * 40);
            let past = &past[j * 40 + 120 - nr as usize..][..40];
            for k in 0..40 {
                now[k] = add(erp[k], mult_r(brp, past[k]));
            }
        }
        let wt: [i16; FRAME_SAMPLES] = self.drp[120..].try_into().unwrap();
        self.drp.copy_within(160.., 0);
        // §4.3.4 short-term synthesis filtering, §4.3.5 de-emphasis.
        let rrp = self.lars.segments(&p.larc);
        if !self.synthesize_unsaturated(&rrp, &wt, out) {
            self.synthesize(&rrp, &wt, out);
        }
        Ok(())
    }

    /// The synthesis lattice and de-emphasis as the standard computes them.
    fn synthesize(
        &mut self,
        rrp: &[[i16; 8]; 4],
        wt: &[i16; FRAME_SAMPLES],
        out: &mut [i16; FRAME_SAMPLES],
    ) {
        let v = &mut self.v;
        for (rrp, &(a, b)) in rrp.iter().zip(&SEGMENTS) {
            for n in a..b {
                let mut sri = wt[n];
                for i in (0..8).rev() {
                    sri = sub(sri, mult_r(rrp[i], v[i]));
                    if i < 7 {
                        v[i + 1] = add(v[i], mult_r(rrp[i], sri));
                    }
                }
                v[0] = sri;
                out[n] = sri;
            }
        }
        let mut msr = self.msr;
        for s in out.iter_mut() {
            msr = add(*s, mult_r(msr, 28180));
            *s = add(msr, msr) & !7;
        }
        self.msr = msr;
    }

    /// The same without saturation, or false (and nothing changed) if any value left the
    /// 16-bit range, where the standard saturates. The lattice is a recursion whose every
    /// step is a multiply and an add; branch-free saturation would add two conditional moves
    /// to each, while overflow, rare in speech, is checked off the critical path by OR-ing
    /// every value into one word. The values are kept offset by 2^15, so that a value is in
    /// range when it lies in 0..=0xFFFF: the offset costs nothing in the multiplies, since
    /// (r * x + 16384) >> 15 = (r * (x + 2^15) + 16384 - 2^15 * r) >> 15 and the last two
    /// terms are one constant per coefficient. They are 64-bit so that the compiler keeps
    /// them in scalar registers (in 32 bits it packs the stages into SSE2 lanes, whose
    /// emulated 32-bit multiplies and shuffles cost more than they save).
    fn synthesize_unsaturated(
        &mut self,
        rrp: &[[i16; 8]; 4],
        wt: &[i16; FRAME_SAMPLES],
        out: &mut [i16; FRAME_SAMPLES],
    ) -> bool {
        const OFFSET: i64 = 1 << 15;
        let [mut v0, mut v1, mut v2, mut v3, mut v4, mut v5, mut v6, mut v7] =
            self.v.map(|v| i64::from(v) + OFFSET);
        let mut msr = i64::from(self.msr) + OFFSET;
        let mut range = 0u64;
        // A coefficient and its rounding constant for offset operands.
        let coef = |r: i16| (i64::from(r), 16384 - OFFSET * i64::from(r));
        let mult_r = |(r, c): (i64, i64), x: i64| (r.wrapping_mul(x).wrapping_add(c)) >> 15;
        let deemphasis = coef(28180);
        for (rrp, &(a, b)) in rrp.iter().zip(&SEGMENTS) {
            let [r0, r1, r2, r3, r4, r5, r6, r7] = rrp.map(coef);
            for n in a..b {
                // Stage by stage from the eighth, each value checked as it is made.
                let mut check = |x: i64| range |= x as u64;
                let mut sri = (i64::from(wt[n]) + OFFSET).wrapping_sub(mult_r(r7, v7));
                check(sri);
                macro_rules! stage {
                    ($r:ident, $v:ident, $next:ident) => {
                        sri = sri.wrapping_sub(mult_r($r, $v));
                        check(sri);
                        $next = $v.wrapping_add(mult_r($r, sri));
                        check($next);
                    };
                }
                stage!(r6, v6, v7);
                stage!(r5, v5, v6);
                stage!(r4, v4, v5);
                stage!(r3, v3, v4);
                stage!(r2, v2, v3);
                stage!(r1, v1, v2);
                stage!(r0, v0, v1);
                v0 = sri;
                msr = sri.wrapping_add(mult_r(deemphasis, msr));
                // Twice msr in range means msr in range too.
                let up = msr.wrapping_mul(2).wrapping_sub(OFFSET);
                check(up);
                out[n] = (up.wrapping_sub(OFFSET) & !7) as i16;
            }
        }
        if range > 0xFFFF {
            return false;
        }
        self.v = [v0, v1, v2, v3, v4, v5, v6, v7].map(|x| (x - OFFSET) as i16);
        self.msr = (msr - OFFSET) as i16;
        true
    }
}

/// The encoder's inner loops, portable and (on x86-64) in SSE2: the sums of products, and
/// the short-term analysis lattice.
mod kernels {
    #[cfg(any(test, not(target_arch = "x86_64")))]
    use super::{add, mult_r};

    /// The weighting filter's taps (table 4.4, H), padded to 12.
    const H: [i16; 12] = [
        -134, -374, 0, 2054, 5741, 8192, 5741, 2054, 0, -374, -134, 0,
    ];

    /// Lags 0-8 of the autocorrelation, doubled.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    pub(super) fn autocorrelation_scalar(s: &[i16; 160]) -> [i32; 9] {
        std::array::from_fn(|k| {
            2 * (k..160)
                .map(|i| i32::from(s[i]) * i32::from(s[i - k]))
                .sum::<i32>()
        })
    }

    /// The lag of 40-120 with the largest cross-correlation (the first on a tie, 40 if none
    /// is positive) and that correlation.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    pub(super) fn best_lag_scalar(wt: &[i16; 40], dp: &[i16; 120]) -> (usize, i32) {
        let (mut nc, mut l_max) = (40, 0);
        for lambda in 40..=120 {
            let past = &dp[120 - lambda..][..40];
            let c: i32 = wt
                .iter()
                .zip(past)
                .map(|(&a, &b)| i32::from(a) * i32::from(b))
                .sum();
            if c > l_max {
                (nc, l_max) = (lambda, c);
            }
        }
        (nc, l_max)
    }

    /// §4.2.13: the weighting filter over a sub-frame padded by five zeros each side, each
    /// output the rounded, saturated sum of 11 taps.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    pub(super) fn weighting_scalar(e: &[i16; 50]) -> [i16; 40] {
        std::array::from_fn(|k| {
            let sum: i32 = (0..11).map(|i| i32::from(e[k + i]) * i32::from(H[i])).sum();
            ((4096 + sum) >> 13).clamp(-32768, 32767) as i16
        })
    }

    /// §4.2.10: the short-term analysis lattice over one segment, in place.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    pub(super) fn analysis_filter_scalar(u: &mut [i16; 8], rp: &[i16; 8], s: &mut [i16]) {
        for x in s.iter_mut() {
            let mut di = *x;
            let mut sav = di;
            for i in 0..8 {
                let ui = u[i];
                u[i] = sav;
                sav = add(ui, mult_r(rp[i], di));
                di = add(di, mult_r(rp[i], ui));
            }
            *x = di;
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) use self::{
        analysis_filter_scalar as analysis_filter, autocorrelation_scalar as autocorrelation,
        best_lag_scalar as best_lag, weighting_scalar as weighting,
    };

    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;

    /// The sums of the four vectors' lanes, as one vector.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn sum4(a: __m128i, b: __m128i, c: __m128i, d: __m128i) -> __m128i {
        let ab = _mm_add_epi32(_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b));
        let cd = _mm_add_epi32(_mm_unpacklo_epi32(c, d), _mm_unpackhi_epi32(c, d));
        _mm_add_epi32(_mm_unpacklo_epi64(ab, cd), _mm_unpackhi_epi64(ab, cd))
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn sum1(a: __m128i) -> i32 {
        let a = _mm_add_epi32(a, _mm_shuffle_epi32(a, 0b01_00_11_10));
        _mm_cvtsi128_si32(_mm_add_epi32(a, _mm_shuffle_epi32(a, 0b10_11_00_01)))
    }

    /// Nine lags over the frame padded with eight zeros in front: 180 `pmaddwd`s, each of
    /// eight products.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn autocorrelation(s: &[i16; 160]) -> [i32; 9] {
        let mut p = [0i16; 168];
        p[8..].copy_from_slice(s);
        let mut out = [0i32; 12];
        // SAFETY: SSE2 is part of x86-64; every load is of 8 samples at p[8 * b + 8 - k],
        // 0 <= k <= 8, b < 20: within the 168.
        unsafe {
            let mut acc = [_mm_setzero_si128(); 9];
            let ptr = p.as_ptr();
            for b in 0..20 {
                let x = _mm_loadu_si128(ptr.add(8 + 8 * b).cast());
                for (k, a) in acc.iter_mut().enumerate() {
                    let y = _mm_loadu_si128(ptr.add(8 + 8 * b - k).cast());
                    *a = _mm_add_epi32(*a, _mm_madd_epi16(x, y));
                }
            }
            let two = |v: __m128i| _mm_slli_epi32(v, 1);
            _mm_storeu_si128(
                out.as_mut_ptr().cast(),
                two(sum4(acc[0], acc[1], acc[2], acc[3])),
            );
            _mm_storeu_si128(
                out.as_mut_ptr().add(4).cast(),
                two(sum4(acc[4], acc[5], acc[6], acc[7])),
            );
            out[8] = 2 * sum1(acc[8]);
        }
        out[..9].try_into().unwrap()
    }

    /// The 81 correlations as five `pmaddwd`s each, reduced four lags at a time, then the
    /// standard's scan from lag 40 up.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn best_lag(wt: &[i16; 40], dp: &[i16; 120]) -> (usize, i32) {
        // Correlation at offset o into dp, i.e. lag 120 - o.
        let mut c = [0i32; 84];
        // SAFETY: SSE2 is part of x86-64; a load at dp[o + 8 * i], o <= 80, i < 5, reads
        // dp[o + 8 * i..o + 8 * i + 8], at most up to dp[119].
        unsafe {
            let w: [__m128i; 5] =
                std::array::from_fn(|i| _mm_loadu_si128(wt.as_ptr().add(8 * i).cast()));
            let dp = dp.as_ptr();
            let corr = |o: usize| {
                let mut acc = _mm_madd_epi16(w[0], _mm_loadu_si128(dp.add(o).cast()));
                for (i, w) in w.iter().enumerate().skip(1) {
                    let x = _mm_loadu_si128(dp.add(o + 8 * i).cast());
                    acc = _mm_add_epi32(acc, _mm_madd_epi16(*w, x));
                }
                acc
            };
            for o in (0..80).step_by(4) {
                let v = sum4(corr(o), corr(o + 1), corr(o + 2), corr(o + 3));
                _mm_storeu_si128(c.as_mut_ptr().add(o).cast(), v);
            }
            c[80] = sum1(corr(80));
        }
        let (mut nc, mut l_max) = (40, 0);
        for lambda in 40..=120 {
            if c[120 - lambda] > l_max {
                (nc, l_max) = (lambda, c[120 - lambda]);
            }
        }
        (nc, l_max)
    }

    /// mult_r in eight 16-bit lanes: (a * b + 2^14) >> 15 from the product's high half and
    /// the top two bits of its low half, truncated to 16 bits as the scalar one is.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn mult_r8(a: __m128i, b: __m128i) -> __m128i {
        let hi = _mm_mulhi_epi16(a, b);
        let lo = _mm_mullo_epi16(a, b);
        let carry = _mm_srli_epi16(_mm_add_epi16(_mm_srli_epi16(lo, 14), _mm_set1_epi16(1)), 1);
        _mm_add_epi16(_mm_slli_epi16(hi, 1), carry)
    }

    /// The lattice stage by stage over the whole segment: each stage's input at sample n
    /// depends only on the previous stage at samples n and n - 1, so a stage runs eight
    /// samples per vector, its delayed input one lane over.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn analysis_filter(u: &mut [i16; 8], rp: &[i16; 8], s: &mut [i16]) {
        let len = s.len();
        let (mut di, mut sav) = ([0i16; 120], [0i16; 120]);
        di[..len].copy_from_slice(s);
        sav[..len].copy_from_slice(s);
        // SAFETY: SSE2 is part of x86-64; loads and stores are of 8 at b, a multiple of 8 below
        // len, so they end by the next multiple of 8 above len: within the 120-sample buffers,
        // since a segment is at most 120 samples.
        unsafe {
            let (dp, sp) = (di.as_mut_ptr(), sav.as_mut_ptr());
            for i in 0..8 {
                let r = _mm_set1_epi16(rp[i]);
                let mut prev = _mm_insert_epi16(_mm_setzero_si128(), i32::from(u[i]), 7);
                u[i] = sav[len - 1];
                for b in (0..len).step_by(8) {
                    let d = _mm_loadu_si128(dp.add(b).cast());
                    let sv = _mm_loadu_si128(sp.add(b).cast());
                    let ui = _mm_or_si128(_mm_slli_si128(sv, 2), _mm_srli_si128(prev, 14));
                    prev = sv;
                    _mm_storeu_si128(dp.add(b).cast(), _mm_adds_epi16(d, mult_r8(r, ui)));
                    _mm_storeu_si128(sp.add(b).cast(), _mm_adds_epi16(ui, mult_r8(r, d)));
                }
            }
        }
        s.copy_from_slice(&di[..len]);
    }

    /// Four outputs per `pmaddwd` of tap pairs: the filter is symmetric, so the pairs are the
    /// taps of equal weight (0 and 10, 1 and 9, 3 and 7, 4 and 6) and the centre tap alone.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn weighting(e: &[i16; 50]) -> [i16; 40] {
        let mut out = [0i16; 40];
        // SAFETY: SSE2 is part of x86-64; loads of 8 at e[k + i], k <= 32, i <= 10, end at
        // most at e[49]; the stores are of 8 at out[k].
        unsafe {
            let e = e.as_ptr();
            let pairs = [(0, 10), (1, 9), (3, 7), (4, 6)].map(|(i, j)| {
                let h = (H[i] as u16 as i32) | (i32::from(H[j]) << 16);
                (i, j, _mm_set1_epi32(h))
            });
            let centre = _mm_set1_epi32(i32::from(H[5]));
            let round = _mm_set1_epi32(4096);
            for k in (0..40).step_by(8) {
                let (mut lo, mut hi) = (round, round);
                for &(i, j, h) in &pairs {
                    let a = _mm_loadu_si128(e.add(k + i).cast());
                    let b = _mm_loadu_si128(e.add(k + j).cast());
                    lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), h));
                    hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, b), h));
                }
                let a = _mm_loadu_si128(e.add(k + 5).cast());
                let z = _mm_setzero_si128();
                lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, z), centre));
                hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, z), centre));
                let x = _mm_packs_epi32(_mm_srai_epi32(lo, 13), _mm_srai_epi32(hi, 13));
                _mm_storeu_si128(out.as_mut_ptr().add(k).cast(), x);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn div_is_the_restoring_division() {
        for den in (1..=i16::MAX).step_by(97) {
            for num in (0..=den).step_by(13).chain([den]) {
                let (mut l, mut q) = (i32::from(num), 0i16);
                if num != 0 {
                    for _ in 0..15 {
                        q <<= 1;
                        l <<= 1;
                        if l >= i32::from(den) {
                            l -= i32::from(den);
                            q += 1;
                        }
                    }
                }
                assert_eq!(div(num, den), q, "{num}/{den}");
            }
        }
    }

    #[test]
    fn frames_pack_and_unpack() {
        let mut p = Params::default();
        for (i, (v, &n)) in p.larc.iter_mut().zip(&LAR_BITS).enumerate() {
            *v = (i as i16 * 5) & ((1 << n) - 1);
        }
        for j in 0..4 {
            p.nc[j] = 40 + j as i16 * 27;
            p.bc[j] = j as i16;
            p.mc[j] = 3 - j as i16;
            p.xmaxc[j] = 63 - j as i16 * 9;
            p.xmc[j] = std::array::from_fn(|i| ((i + j) % 8) as i16);
        }
        let mut f = [0u8; FRAME_BYTES];
        p.pack(&mut f);
        assert_eq!(f[0] >> 4, 0xD);
        assert_eq!(Params::unpack(&f), Ok(p));
        f[0] = 0x3F;
        assert_eq!(Params::unpack(&f), Err(BadSignature));
    }

    /// The vector correlations equal the portable ones on random and extreme samples.
    #[test]
    fn vector_correlations_are_the_scalar_ones() {
        let mut x = 7u32;
        let mut r = move || {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 16) as i16
        };
        for round in 0..3000 {
            // Full-scale, then the ranges the encoder guarantees (|s| <= 2^11, |wt| <= 2^9).
            let mut pick = |min: i16, max: i16| match round % 3 {
                0 => [min, max, 0][(r() as u16 % 3) as usize],
                _ if max == i16::MAX => r(),
                _ => r() % (max + 1),
            };
            let e: [i16; 50] = std::array::from_fn(|i| {
                if (5..45).contains(&i) {
                    pick(i16::MIN, i16::MAX)
                } else {
                    0
                }
            });
            assert_eq!(kernels::weighting(&e), kernels::weighting_scalar(&e));
            let s: [i16; 160] = std::array::from_fn(|_| pick(-2048, 2048));
            assert_eq!(
                kernels::autocorrelation(&s),
                kernels::autocorrelation_scalar(&s)
            );
            let wt: [i16; 40] = std::array::from_fn(|_| pick(-512, 512));
            let dp: [i16; 120] = std::array::from_fn(|_| pick(i16::MIN, i16::MAX));
            assert_eq!(
                kernels::best_lag(&wt, &dp),
                kernels::best_lag_scalar(&wt, &dp)
            );
        }
    }

    /// The unsaturated synthesis gives the standard's samples whenever it accepts a frame,
    /// and refuses some (loud or random frames), leaving the state for the exact path.
    #[test]
    fn unsaturated_synthesis_is_exact_or_refuses() {
        let mut x = 11u32;
        let mut r = move || {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 16) as i16
        };
        let (mut fast, mut slow) = (GsmDecoder::new(), GsmDecoder::new());
        let (mut taken, mut refused) = (0, 0);
        for round in 0..2000 {
            let larc = std::array::from_fn(|i| r() & ((1 << LAR_BITS[i]) - 1));
            let rrp = fast.lars.segments(&larc);
            slow.lars.segments(&larc);
            // Quiet and full-scale excitation in turn.
            let scale = if round % 4 == 0 { 0 } else { 6 };
            let wt: [i16; 160] = std::array::from_fn(|_| r() >> scale);
            let (mut a, mut b) = ([0i16; 160], [0i16; 160]);
            let before = (fast.v, fast.msr);
            if fast.synthesize_unsaturated(&rrp, &wt, &mut a) {
                taken += 1;
                slow.synthesize(&rrp, &wt, &mut b);
                assert_eq!(a, b, "round {round}");
            } else {
                refused += 1;
                assert_eq!((fast.v, fast.msr), before);
                fast.synthesize(&rrp, &wt, &mut a);
                slow.synthesize(&rrp, &wt, &mut b);
            }
            assert_eq!((fast.v, fast.msr), (slow.v, slow.msr));
        }
        assert!(
            taken > 100 && refused > 100,
            "{taken} taken, {refused} refused"
        );
    }

    /// The stage-by-stage vector lattice equals the sample-by-sample one, for every segment
    /// length, extreme coefficients and saturating signals included.
    #[test]
    fn vector_analysis_filter_is_the_scalar_one() {
        let mut x = 13u32;
        let mut r = move || {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 16) as i16
        };
        for round in 0..3000 {
            let len = [13, 14, 120, 1 + round % 120][round % 4];
            let rp: [i16; 8] = std::array::from_fn(|_| match round % 3 {
                0 => [-32767, 32767, 0][(r() as u16 % 3) as usize],
                _ => r().max(-32767),
            });
            let u: [i16; 8] = std::array::from_fn(|_| r());
            let s: Vec<i16> = (0..len).map(|_| r() >> (round % 5)).collect();
            let (mut u1, mut s1) = (u, s.clone());
            let (mut u2, mut s2) = (u, s);
            kernels::analysis_filter(&mut u1, &rp, &mut s1);
            kernels::analysis_filter_scalar(&mut u2, &rp, &mut s2);
            assert_eq!((u1, s1), (u2, s2), "round {round}");
        }
    }
}

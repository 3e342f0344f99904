//! G.726 ADPCM (ITU-T G.726, 12/1990) at 16, 24, 32 and 40 kbit/s from 16-bit linear PCM,
//! code words packed as RFC 3551 §4.5.4 orders them (the first code word in the least
//! significant bits of the first byte: spandsp's `G726_PACKING_RIGHT`).
//!
//! Bit-exact with spandsp, which strowger linked for G.726 before (tests.rs compares the two on
//! speech, music, tones and noise), including its 16-bit wrap-around on corrupt streams. The
//! arithmetic is the recommendation's, arranged for speed: the quantiser is one table load
//! instead of a search, the predictor's eight floating multiplies (FMULT) run as SSE2 lanes on
//! x86-64 (elsewhere: `leading_zeros` and branch-free shifts), and the state is one flat struct
//! with no allocation per sample.

/// The four rates of G.726, by bits per code word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    Kbps16 = 2,
    Kbps24 = 3,
    Kbps32 = 4,
    Kbps40 = 5,
}

impl Rate {
    pub const ALL: [Rate; 4] = [Rate::Kbps16, Rate::Kbps24, Rate::Kbps32, Rate::Kbps40];

    pub fn bits(self) -> u32 {
        self as u32
    }

    pub fn bit_rate(self) -> u32 {
        self.bits() * 8000
    }

    /// Bytes of `samples` code words (whole bytes only; spandsp keeps the remainder for the next call).
    pub fn bytes_for(self, samples: usize) -> usize {
        samples * self.bits() as usize / 8
    }
}

/// A rate's tables (G.726 Tables 1-4 and the quantiser decision levels).
struct Tables {
    /// Decision levels of the log-magnitude quantiser, ascending, padded with `i16::MAX`
    /// (tabulated once in [`QUAN`]).
    levels: [i16; 16],
    /// Code word to normalised log magnitude of the reconstructed difference (DQLN).
    dqln: [i16; 32],
    /// Code word to scale factor multiplier (W).
    wi: [i32; 32],
    /// Code word to the speed-control input F, shifted by 9 as the fixed-point code keeps it.
    fi: [i16; 32],
}

const fn pad<const N: usize>(v: [i16; N], fill: i16) -> [i16; 32] {
    let mut out = [fill; 32];
    let mut i = 0;
    while i < N {
        out[i] = v[i];
        i += 1;
    }
    out
}

const fn pad32<const N: usize>(v: [i32; N]) -> [i32; 32] {
    let mut out = [0; 32];
    let mut i = 0;
    while i < N {
        out[i] = v[i];
        i += 1;
    }
    out
}

const fn levels<const N: usize>(v: [i16; N]) -> [i16; 16] {
    let mut out = [i16::MAX; 16];
    let mut i = 0;
    while i < N {
        out[i] = v[i];
        i += 1;
    }
    out
}

const T16: Tables = Tables {
    levels: levels([261]),
    dqln: pad([116, 365, 365, 116], 0),
    wi: pad32([-704, 14048, 14048, -704]),
    fi: pad([0, 0xE00, 0xE00, 0], 0),
};

const T24: Tables = Tables {
    levels: levels([8, 218, 331]),
    dqln: pad([-2048, 135, 273, 373, 373, 273, 135, -2048], 0),
    wi: pad32([-128, 960, 4384, 18624, 18624, 4384, 960, -128]),
    fi: pad([0, 0x200, 0x400, 0xE00, 0xE00, 0x400, 0x200, 0], 0),
};

const T32: Tables = Tables {
    levels: levels([-124, 80, 178, 246, 300, 349, 400]),
    dqln: pad(
        [
            -2048, 4, 135, 213, 273, 323, 373, 425, 425, 373, 323, 273, 213, 135, 4, -2048,
        ],
        0,
    ),
    wi: pad32([
        -384, 576, 1312, 2048, 3584, 6336, 11360, 35904, 35904, 11360, 6336, 3584, 2048, 1312, 576,
        -384,
    ]),
    fi: pad(
        [
            0, 0, 0, 0x200, 0x200, 0x200, 0x600, 0xE00, 0xE00, 0x600, 0x200, 0x200, 0x200, 0, 0, 0,
        ],
        0,
    ),
};

const T40: Tables = Tables {
    levels: levels([
        -122, -16, 68, 139, 198, 250, 298, 339, 378, 413, 445, 475, 502, 528, 553,
    ]),
    dqln: [
        -2048, -66, 28, 104, 169, 224, 274, 318, 358, 395, 429, 459, 488, 514, 539, 566, 566, 539,
        514, 488, 459, 429, 395, 358, 318, 274, 224, 169, 104, 28, -66, -2048,
    ],
    wi: [
        448, 448, 768, 1248, 1280, 1312, 1856, 3200, 4512, 5728, 7008, 8960, 11456, 14080, 16928,
        22272, 22272, 16928, 14080, 11456, 8960, 7008, 5728, 4512, 3200, 1856, 1312, 1280, 1248,
        768, 448, 448,
    ],
    fi: [
        0, 0, 0, 0, 0, 0x200, 0x200, 0x200, 0x200, 0x200, 0x400, 0x600, 0x800, 0xA00, 0xC00, 0xC00,
        0xC00, 0xC00, 0xA00, 0x800, 0x600, 0x400, 0x200, 0x200, 0x200, 0x200, 0x200, 0, 0, 0, 0, 0,
    ],
};

fn tables(bits: u32) -> &'static Tables {
    match bits {
        2 => &T16,
        3 => &T24,
        4 => &T32,
        _ => &T40,
    }
}

/// Index of the highest set bit, -1 for 0.
#[inline(always)]
fn top_bit(x: i32) -> i32 {
    31 - (x as u32).leading_zeros() as i32
}

/// FMULT: the 14-bit coefficient `an` times `srn` in the 4-bit exponent, 6-bit mantissa
/// floating format of the difference and reconstructed signal history. The portable form, and
/// the reference the SSE2 lanes are tested against.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn fmult(an: i16, srn: i16) -> i32 {
    let a = i32::from(an);
    let mag = if a > 0 { a } else { (-a) & 0x1FFF };
    let t = top_bit(mag);
    // The 6-bit mantissa, normalised (the recommendation's 32 for a zero magnitude).
    let mant = if mag == 0 { 32 } else { (mag << 6) >> (t + 1) };
    let srn = i32::from(srn);
    // Exponent of the product minus 19, so that one shift of a 64-bit value covers both directions.
    let exp = t - 5 + ((srn >> 6) & 0xF) - 13;
    let wmant = (mant * (srn & 0x3F) + 0x30) >> 4;
    let r = ((((wmant as u64) << 19) >> (19 - exp) as u32) & 0x7FFF) as i32;
    let sign = (i32::from(an) ^ srn) >> 31;
    (r ^ sign) - sign
}

/// The eight floating multiplies of the predictors, FMULT(coef >> 2, hist) lane by lane.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn products_scalar(coef: &[i16; 8], hist: &[i16; 8]) -> [i32; 8] {
    std::array::from_fn(|i| fmult(coef[i] >> 2, hist[i]))
}

#[cfg(not(target_arch = "x86_64"))]
use self::products_scalar as products;

/// The eight floating multiplies of the predictors in SSE2 (every x86-64 has it), four lanes at
/// a time. SSE2 has no per-lane shifts or bit counts, so the float unit does both: converting
/// the magnitude to `f32` gives its top bit as the exponent and its 6-bit mantissa as the top
/// fraction bits, and the product's scaling by 2^exp is a multiply by a float built from bits.
/// Every value stays below 2^24, so each step is exact and the result is FMULT's, bit for bit.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn products(coef: &[i16; 8], hist: &[i16; 8]) -> [i32; 8] {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; the loads and store are unaligned ones of 16 bytes.
    unsafe {
        let c = _mm_srai_epi16(_mm_loadu_si128(coef.as_ptr().cast()), 2);
        let h = _mm_loadu_si128(hist.as_ptr().cast());
        let widen = |v: __m128i, hi: bool| {
            let u = if hi {
                _mm_unpackhi_epi16(v, v)
            } else {
                _mm_unpacklo_epi16(v, v)
            };
            _mm_srai_epi32(u, 16)
        };
        let fmult4 = |an: __m128i, srn: __m128i| {
            let pos = _mm_cmpgt_epi32(an, _mm_setzero_si128());
            let neg = _mm_and_si128(
                _mm_sub_epi32(_mm_setzero_si128(), an),
                _mm_set1_epi32(0x1FFF),
            );
            let mag = _mm_or_si128(_mm_and_si128(pos, an), _mm_andnot_si128(pos, neg));
            // 2 * mag, or 1 for 0: the recommendation's mantissa 32 at exponent -6 for a zero.
            let zero = _mm_cmpeq_epi32(mag, _mm_setzero_si128());
            let mag2 = _mm_or_si128(_mm_slli_epi32(mag, 1), _mm_srli_epi32(zero, 31));
            let bits = _mm_castps_si128(_mm_cvtepi32_ps(mag2));
            let top = _mm_sub_epi32(_mm_srli_epi32(bits, 23), _mm_set1_epi32(127));
            let mant = _mm_or_si128(
                _mm_and_si128(_mm_srli_epi32(bits, 18), _mm_set1_epi32(31)),
                _mm_set1_epi32(32),
            );
            let sexp = _mm_and_si128(_mm_srli_epi32(srn, 6), _mm_set1_epi32(0xF));
            let smant = _mm_and_si128(srn, _mm_set1_epi32(0x3F));
            let exp = _mm_sub_epi32(_mm_add_epi32(top, sexp), _mm_set1_epi32(19));
            // Both factors are below 64: a 16-bit multiply of the low halves is exact.
            let wmant = _mm_srli_epi32(
                _mm_add_epi32(_mm_mullo_epi16(mant, smant), _mm_set1_epi32(0x30)),
                4,
            );
            let scale =
                _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(exp, _mm_set1_epi32(127)), 23));
            let r = _mm_and_si128(
                _mm_cvttps_epi32(_mm_mul_ps(_mm_cvtepi32_ps(wmant), scale)),
                _mm_set1_epi32(0x7FFF),
            );
            let sign = _mm_srai_epi32(_mm_xor_si128(an, srn), 31);
            _mm_sub_epi32(_mm_xor_si128(r, sign), sign)
        };
        let lo = fmult4(widen(c, false), widen(h, false));
        let hi = fmult4(widen(c, true), widen(h, true));
        let mut out = [0i32; 8];
        _mm_storeu_si128(out.as_mut_ptr().cast(), lo);
        _mm_storeu_si128(out.as_mut_ptr().add(4).cast(), hi);
        out
    }
}

// The predictor state is written back whole (one 16-byte store on x86-64) so that the next
// sample's 16-byte loads in `products` are forwarded from the store, not stalled on lanes
// written one by one.

/// UPB for B1..B6 (lanes 0-5): leak by `shift`, then `step` towards the sign agreement of DQ
/// with each past DQ; lanes 6 and 7 take the pole coefficients A2 and A1.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn upb_scalar(
    coef: &mut [i16; 8],
    hist: &[i16; 8],
    dq: i16,
    step: i16,
    shift: u32,
    a2: i16,
    a1: i16,
) {
    for i in 0..6 {
        let s = ((dq ^ hist[i]) >> 15) | 1;
        coef[i] = coef[i]
            .wrapping_sub(coef[i] >> shift)
            .wrapping_add(step.wrapping_mul(s));
    }
    coef[6] = a2;
    coef[7] = a1;
}

#[cfg(not(target_arch = "x86_64"))]
use self::upb_scalar as upb;

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn upb(coef: &mut [i16; 8], hist: &[i16; 8], dq: i16, step: i16, shift: u32, a2: i16, a1: i16) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; unaligned 16-byte loads and store of the arrays.
    unsafe {
        let b = _mm_loadu_si128(coef.as_ptr().cast());
        let h = _mm_loadu_si128(hist.as_ptr().cast());
        let leaked = _mm_sub_epi16(b, _mm_sra_epi16(b, _mm_cvtsi32_si128(shift as i32)));
        // -1 where the signs differ: step negated as (step ^ -1) + 1.
        let differ = _mm_srai_epi16(_mm_xor_si128(h, _mm_set1_epi16(dq)), 15);
        let inc = _mm_sub_epi16(_mm_xor_si128(_mm_set1_epi16(step), differ), differ);
        let b = _mm_add_epi16(leaked, inc);
        let b = _mm_insert_epi16(_mm_insert_epi16(b, i32::from(a2), 6), i32::from(a1), 7);
        _mm_storeu_si128(coef.as_mut_ptr().cast(), b);
    }
}

/// DELAY: DQ(k) enters lane 0 pushing DQ(k-1)..DQ(k-5) along; SR(k-1) moves to lane 6 and
/// SR(k) enters lane 7.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn delay_scalar(hist: &mut [i16; 8], dq: i16, sr: i16) {
    let h = *hist;
    *hist = [dq, h[0], h[1], h[2], h[3], h[4], h[7], sr];
}

#[cfg(not(target_arch = "x86_64"))]
use self::delay_scalar as delay;

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn delay(hist: &mut [i16; 8], dq: i16, sr: i16) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; an unaligned 16-byte load and store of the array.
    unsafe {
        let h = _mm_loadu_si128(hist.as_ptr().cast());
        let last = _mm_extract_epi16(h, 7);
        let v = _mm_insert_epi16(_mm_slli_si128(h, 2), i32::from(dq), 0);
        let v = _mm_insert_epi16(_mm_insert_epi16(v, last, 6), i32::from(sr), 7);
        _mm_storeu_si128(hist.as_mut_ptr().cast(), v);
    }
}

/// The 4-bit exponent, 6-bit mantissa form of a difference or reconstructed sample (FLOATA/B).
#[inline(always)]
fn float(mag: i32, negative: bool) -> i16 {
    let f = if mag == 0 {
        0x20
    } else {
        let e = top_bit(mag) + 1;
        (e << 6) + ((mag << 6) >> e)
    };
    (f - if negative { 0x400 } else { 0 }) as i16
}

/// Encoder or decoder state (G.726 §4 with spandsp's integer widths and wrap-around).
#[derive(Debug, Clone)]
struct State {
    yl: i32,
    yu: i16,
    dms: i16,
    dml: i16,
    ap: i16,
    /// The predictor's coefficients, laid out for its eight floating multiplies:
    /// B1..B6 of the zero predictor in lanes 0-5, then A2 and A1 of the pole predictor.
    coef: [i16; 8],
    /// What they multiply, in the floating format: DQ(k-1)..DQ(k-6), then SR(k-2) and SR(k-1).
    hist: [i16; 8],
    pk: [i16; 2],
    td: bool,
}

impl State {
    fn new() -> State {
        State {
            yl: 34816,
            yu: 544,
            dms: 0,
            dml: 0,
            ap: 0,
            coef: [0; 8],
            pk: [0; 2],
            hist: [32; 8],
            td: false,
        }
    }

    /// The zero predictor's estimate SEZ and the whole estimate SE (FMULT, ACCUM).
    #[inline(always)]
    fn predict(&self) -> (i16, i16) {
        let p = products(&self.coef, &self.hist);
        let sezi = (p[0] + p[1] + p[2] + p[3] + p[4] + p[5]) as i16;
        let pole = (p[6] + p[7]) as i16;
        (sezi, sezi.wrapping_add(pole) >> 1)
    }

    /// Quantiser scale factor (MIX of the locked and unlocked factors).
    #[inline(always)]
    fn step_size(&self) -> i32 {
        if self.ap >= 256 {
            return i32::from(self.yu);
        }
        let y = self.yl >> 6;
        let dif = i32::from(self.yu) - y;
        let al = i32::from(self.ap >> 2);
        y + ((dif * al + if dif < 0 { 0x3F } else { 0 }) >> 6)
    }

    /// Everything after the code word is known: reconstruction and adaptation. Returns SR.
    #[inline(always)]
    fn step<const BITS: u32>(&mut self, code: usize, sezi: i16, se: i16, y: i32) -> i16 {
        let t = tables(BITS);
        let sign = code & (1 << (BITS - 1)) != 0;
        let dq = reconstruct(sign, i32::from(t.dqln[code]), y);
        let mask = if BITS == 5 { 0x7FFF } else { 0x3FFF };
        let sr = if dq < 0 {
            se.wrapping_sub(dq & mask)
        } else {
            se.wrapping_add(dq)
        };
        let dqsez = sr.wrapping_add(sezi >> 1).wrapping_sub(se);
        self.update::<BITS>(y, t.wi[code], t.fi[code], dq, sr, dqsez);
        sr
    }

    #[inline(always)]
    fn update<const BITS: u32>(&mut self, y: i32, wi: i32, fi: i16, dq: i16, sr: i16, dqsez: i16) {
        let pk0: i16 = (dqsez < 0) as i16;
        let dq32 = i32::from(dq);
        let mag = dq32 & 0x7FFF;
        // TRANS: a large difference after a data-like signal marks a transition.
        let ylint = self.yl >> 15;
        let ylfrac = (self.yl >> 10) & 0x1F;
        let thr = if ylint > 9 {
            31 << 10
        } else {
            (32 + ylfrac) << ylint
        };
        let dqthr = (thr + (thr >> 1)) >> 1;
        let tr = self.td && mag > dqthr;

        // FUNCTW, FILTD, LIMB, FILTE: scale factor adaptation.
        let yu = (y + ((wi - y) >> 5)).clamp(544, 5120) as i16;
        self.yu = yu;
        self.yl += i32::from(yu) + ((-self.yl) >> 6);

        let mut a2p: i16 = 0;
        if tr {
            self.coef = [0; 8];
        } else {
            // UPA2, LIMC and UPA1, LIMD, without branches: the signs of speech change
            // unpredictably. The recommendation's three-way FA1 limit is a clamp of FA1 >> 5.
            let moved = dqsez != 0;
            let pks1 = pk0 ^ self.pk[0];
            let (a1, a2) = (i32::from(self.coef[7]), i32::from(self.coef[6]));
            let fa1 = if pks1 != 0 { a1 } else { -a1 };
            let toward = if pk0 ^ self.pk[1] != 0 { -0x80 } else { 0x80 };
            let leaked2 = a2 - (a2 >> 7);
            let moved2 = (leaked2 + (fa1 >> 5).clamp(-0x100, 0xFF) + toward).clamp(-12288, 12288);
            a2p = (if moved { moved2 } else { leaked2 }) as i16;
            let push1 = if !moved {
                0
            } else if pks1 == 0 {
                192
            } else {
                -192
            };
            let a1ul = 15360 - i32::from(a2p);
            let a1 = (a1 - (a1 >> 8) + push1).clamp(-a1ul, a1ul) as i16;
            // UPB: sign-sign update of the zero predictor.
            let step: i16 = if mag != 0 { 128 } else { 0 };
            upb(
                &mut self.coef,
                &self.hist,
                dq,
                step,
                if BITS == 5 { 9 } else { 8 },
                a2p,
                a1,
            );
        }

        // DELAY of the difference and reconstructed signals in floating form.
        let sr = if sr == i16::MIN {
            0xFC20u16 as i16
        } else {
            float(i32::from(sr).abs(), sr < 0)
        };
        delay(&mut self.hist, float(mag, dq < 0), sr);
        self.pk[1] = self.pk[0];
        self.pk[0] = pk0;

        // TONE
        self.td = !tr && a2p < -11776;

        // FILTA, FILTB, SUBTC, FILTC: adaptation speed control.
        let (fi, dms, dml) = (i32::from(fi), i32::from(self.dms), i32::from(self.dml));
        self.dms = (dms + ((fi - dms) >> 5)) as i16;
        self.dml = (dml + ((i32::from((fi << 2) as i16) - dml) >> 7)) as i16;
        let ap = i32::from(self.ap);
        let fast = (y < 1536)
            | self.td
            | (((i32::from(self.dms) << 2) - i32::from(self.dml)).abs()
                >= i32::from(self.dml >> 3));
        self.ap = if tr {
            256
        } else if fast {
            (ap + ((0x200 - ap) >> 4)) as i16
        } else {
            (ap + ((-ap) >> 4)) as i16
        };
    }
}

/// DQ from a code word's log magnitude (ADDA, ANTILOG), as sign and 15-bit magnitude; a
/// negative log is a zero magnitude, selected without a branch (silence makes it common).
#[inline(always)]
fn reconstruct(sign: bool, dqln: i32, y: i32) -> i16 {
    let dql = i32::from((dqln + (y >> 2)) as i16);
    let dex = (dql >> 7) & 15;
    let dqt = 128 + (dql & 127);
    // A non-negative log has `dex` at most 14; the mask only keeps the discarded case in range.
    let mag = (dqt << 7) >> ((14 - dex) & 15);
    let mag = if dql < 0 { 0 } else { mag };
    (mag + if sign { -0x8000 } else { 0 }) as i16
}

/// QUAN as a table: the number of a rate's decision levels at or below each normalised log
/// magnitude DLN (offset by 2048; DLN lies in -1280..=1911), so quantising is one load.
const fn quan_table(levels: [i16; 16]) -> [u8; 4096] {
    let mut t = [0u8; 4096];
    let mut i = 0;
    while i < 4096 {
        let dln = i as i32 - 2048;
        let mut n = 0;
        let mut k = 0;
        while k < 16 {
            if dln >= levels[k] as i32 {
                n += 1;
            }
            k += 1;
        }
        t[i] = n;
        i += 1;
    }
    t
}

static QUAN: [[u8; 4096]; 4] = [
    quan_table(T16.levels),
    quan_table(T24.levels),
    quan_table(T32.levels),
    quan_table(T40.levels),
];

/// The code word for difference `d` at scale `y` (LOG, SUBTB, QUAN), with the sign as the
/// recommendation codes it.
#[inline(always)]
fn quantize<const BITS: u32>(d: i16, y: i32) -> usize {
    let dqm = i32::from(d).abs();
    let exp = top_bit(dqm >> 1) + 1;
    let mant = ((dqm << 7) >> exp) & 0x7F;
    let dl = (exp << 7) + mant;
    let dln = (dl - (y >> 2)) as i16;
    let i = usize::from(QUAN[BITS as usize - 2][(i32::from(dln) + 2048) as usize & 4095]);
    // Magnitude levels; an odd number of states (all rates but 16 kbit/s) has no +0 code word.
    let states: usize = if BITS == 2 { 4 } else { (1 << BITS) - 1 };
    let size = (states - 1) >> 1;
    if d < 0 {
        (size << 1) + 1 - i
    } else if i == 0 && BITS != 2 {
        states
    } else {
        i
    }
}

/// Bits waiting between calls (spandsp's bit stream state, so packets of odd lengths at
/// 24 and 40 kbit/s carry over exactly as before).
#[derive(Debug, Clone, Copy, Default)]
struct Bits {
    buf: u32,
    len: u32,
}

/// A G.726 encoder: 16-bit linear PCM in, packed code words out.
#[derive(Debug, Clone)]
pub struct G726Encoder {
    rate: Rate,
    state: State,
    bits: Bits,
}

impl G726Encoder {
    pub fn new(rate: Rate) -> G726Encoder {
        G726Encoder {
            rate,
            state: State::new(),
            bits: Bits::default(),
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Encodes `pcm` into `out` (room for [`Rate::bytes_for`] plus one byte); returns bytes written.
    pub fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> usize {
        match self.rate {
            Rate::Kbps16 => self.run::<2>(pcm, out),
            Rate::Kbps24 => self.run::<3>(pcm, out),
            Rate::Kbps32 => self.run::<4>(pcm, out),
            Rate::Kbps40 => self.run::<5>(pcm, out),
        }
    }

    fn run<const BITS: u32>(&mut self, pcm: &[i16], out: &mut [u8]) -> usize {
        let s = &mut self.state;
        let Bits { mut buf, mut len } = self.bits;
        let mut n = 0;
        for &x in pcm {
            let (sezi, se) = s.predict();
            let d = (x >> 2).wrapping_sub(se);
            let y = s.step_size();
            let code = quantize::<BITS>(d, y);
            s.step::<BITS>(code, sezi, se, y);
            buf |= (code as u32) << len;
            len += BITS;
            if len >= 8 {
                out[n] = buf as u8;
                n += 1;
                buf >>= 8;
                len -= 8;
            }
        }
        self.bits = Bits { buf, len };
        n
    }
}

/// A G.726 decoder: packed code words in, 16-bit linear PCM out.
#[derive(Debug, Clone)]
pub struct G726Decoder {
    rate: Rate,
    state: State,
    bits: Bits,
}

impl G726Decoder {
    pub fn new(rate: Rate) -> G726Decoder {
        G726Decoder {
            rate,
            state: State::new(),
            bits: Bits::default(),
        }
    }

    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// Samples `payload` decodes to, with the bits left over from the previous call.
    pub fn samples_in(&self, payload: usize) -> usize {
        (self.bits.len as usize + 8 * payload) / self.rate.bits() as usize
    }

    /// Decodes `payload` into `out` (room for [`G726Decoder::samples_in`]); returns samples written.
    pub fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        match self.rate {
            Rate::Kbps16 => self.run::<2>(payload, out),
            Rate::Kbps24 => self.run::<3>(payload, out),
            Rate::Kbps32 => self.run::<4>(payload, out),
            Rate::Kbps40 => self.run::<5>(payload, out),
        }
    }

    fn run<const BITS: u32>(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        let s = &mut self.state;
        let Bits { mut buf, mut len } = self.bits;
        let mut bytes = payload.iter();
        let mut n = 0;
        loop {
            if len < BITS {
                let Some(&b) = bytes.next() else { break };
                buf |= u32::from(b) << len;
                len += 8;
            }
            let code = (buf & ((1 << BITS) - 1)) as usize;
            buf >>= BITS;
            len -= BITS;
            let (sezi, se) = s.predict();
            let y = s.step_size();
            let sr = s.step::<BITS>(code, sezi, se, y);
            out[n] = sr.wrapping_shl(2);
            n += 1;
        }
        self.bits = Bits { buf, len };
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector UPB and DELAY equal the portable ones, wrap-around included.
    #[test]
    fn vector_updates_are_the_scalar_ones() {
        let mut x = 5u32;
        let mut r = move || {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 16) as i16
        };
        for round in 0..20_000 {
            let coef: [i16; 8] = std::array::from_fn(|_| r());
            let hist: [i16; 8] = std::array::from_fn(|_| r());
            let (dq, a2, a1, f1, f2) = (r(), r(), r(), r(), r());
            let step = if round % 2 == 0 { 128 } else { 0 };
            let shift = if round % 3 == 0 { 9 } else { 8 };
            let (mut c1, mut c2) = (coef, coef);
            upb(&mut c1, &hist, dq, step, shift, a2, a1);
            upb_scalar(&mut c2, &hist, dq, step, shift, a2, a1);
            assert_eq!(c1, c2);
            let (mut h1, mut h2) = (hist, hist);
            delay(&mut h1, f1, f2);
            delay_scalar(&mut h2, f1, f2);
            assert_eq!(h1, h2);
        }
    }

    /// The vector FMULT equals the scalar one for every coefficient against a spread of
    /// floating-format values (every exponent and mantissa, both signs, and bit patterns
    /// only corrupt streams reach).
    #[test]
    fn vector_fmult_is_the_scalar_one() {
        let mut hist = Vec::new();
        for e in 0..16i16 {
            for m in [0i16, 1, 31, 32, 45, 63] {
                let f = (e << 6) | m;
                hist.extend([f, f - 0x400, f | i16::MIN]);
            }
        }
        for an in (i16::MIN..=i16::MAX)
            .step_by(7)
            .chain([0, 1, -1, 4, -4, -32768, 32767])
        {
            for h in hist.chunks(8).filter(|h| h.len() == 8) {
                let coef = [an; 8];
                let h: [i16; 8] = h.try_into().unwrap();
                assert_eq!(
                    products(&coef, &h),
                    products_scalar(&coef, &h),
                    "an {an} hist {h:?}"
                );
            }
        }
    }
}

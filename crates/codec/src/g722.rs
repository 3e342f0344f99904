//! G.722 (ITU-T G.722, mode 1: 64 kbit/s) from 16 kHz 16-bit linear PCM, one code word per
//! byte (high band in the top two bits), as RFC 3551 §4.5.2 carries it.
//!
//! Bit-exact with spandsp's `g722_encode`/`g722_decode` at 64 kbit/s without the 8 kHz or packed
//! options, the settings strowger used before (tests.rs compares the two on speech, music, tones
//! and noise). The quadrature mirror filters, the hot loop, keep the last twelve sample pairs
//! interleaved in one window, so each filter output is one 24-term dot product of 16-bit values:
//! three SSE2 multiply-adds on x86-64.

/// QMF coefficients (G.722 Table 11), the oldest sample's first, for the first and second
/// sample of each pair.
const QMF_FIRST: [i32; 12] = [3, -11, 12, 32, -210, 951, 3876, -805, 362, -156, 53, -11];
const QMF_SECOND: [i32; 12] = [-11, 53, -156, 362, -805, 3876, 951, -210, 32, 12, -11, 3];

/// Interleaves the two filters into one 24-term dot product over (first, second) pairs.
const fn interleave(first: i16, second: i16) -> [i16; 24] {
    let mut c = [0i16; 24];
    let mut i = 0;
    while i < 12 {
        c[2 * i] = QMF_FIRST[i] as i16 * first;
        c[2 * i + 1] = QMF_SECOND[i] as i16 * second;
        i += 1;
    }
    c
}

/// Transmit QMF: the low band is the sum of the two filters, the high band their difference.
const TX_LOW: [i16; 24] = interleave(1, 1);
const TX_HIGH: [i16; 24] = interleave(-1, 1);
/// Receive QMF: the first output sample filters the differences, the second the sums.
const RX_FIRST: [i16; 24] = interleave(0, 1);
const RX_SECOND: [i16; 24] = interleave(1, 0);

const QM2: [i32; 4] = [-7408, -1616, 7408, 1616];
const QM4: [i32; 16] = [
    0, -20456, -12896, -8968, -6288, -4240, -2584, -1200, 20456, 12896, 8968, 6288, 4240, 2584,
    1200, 0,
];
const QM6: [i32; 64] = [
    -136, -136, -136, -136, -24808, -21904, -19008, -16704, -14984, -13512, -12280, -11192, -10232,
    -9360, -8576, -7856, -7192, -6576, -6000, -5456, -4944, -4464, -4008, -3576, -3168, -2776,
    -2400, -2032, -1688, -1360, -1040, -728, 24808, 21904, 19008, 16704, 14984, 13512, 12280,
    11192, 10232, 9360, 8576, 7856, 7192, 6576, 6000, 5456, 4944, 4464, 4008, 3576, 3168, 2776,
    2400, 2032, 1688, 1360, 1040, 728, 432, 136, -432, -136,
];
/// Low-band decision levels (Table 12), entries 1 to 29, and three zeros that every
/// difference is at or above (subtracted again in [`quantl`]).
const Q6: [i16; 32] = [
    35, 72, 110, 150, 190, 233, 276, 323, 370, 422, 473, 530, 587, 650, 714, 786, 858, 940, 1023,
    1121, 1219, 1339, 1458, 1612, 1765, 1980, 2195, 2557, 2919, 0, 0, 0,
];
const ILB: [i32; 32] = [
    2048, 2093, 2139, 2186, 2233, 2282, 2332, 2383, 2435, 2489, 2543, 2599, 2656, 2714, 2774, 2834,
    2896, 2960, 3025, 3091, 3158, 3228, 3298, 3371, 3444, 3520, 3597, 3676, 3756, 3838, 3922, 4008,
];
/// Low-band code word by decision interval, for a positive and a negative difference.
const IL: [[u8; 31]; 2] = [ILP, ILN];
const ILN: [u8; 31] = [
    0, 63, 62, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11,
    10, 9, 8, 7, 6, 5, 4,
];
const ILP: [u8; 31] = [
    0, 61, 60, 59, 58, 57, 56, 55, 54, 53, 52, 51, 50, 49, 48, 47, 46, 45, 44, 43, 42, 41, 40, 39,
    38, 37, 36, 35, 34, 33, 32,
];
const WL: [i32; 8] = [-60, -30, 58, 172, 334, 538, 1198, 3042];
const RL42: [usize; 16] = [0, 7, 6, 5, 4, 3, 2, 1, 7, 6, 5, 4, 3, 2, 1, 0];
const WH: [i32; 3] = [0, -214, 798];
const RH2: [usize; 4] = [2, 1, 2, 1];

/// SCALEL and SCALEH as tables: the scale factor for each value of `nb >> 6` (`nb` is at most
/// 22528), the antilog of ILB shifted by the integer part, so scaling is one load.
const fn det_table(shift: i32) -> [i16; 353] {
    let mut t = [0i16; 353];
    let mut i = 0;
    while i < 353 {
        let wd2 = shift - (i as i32 >> 5);
        let ilb = ILB[i & 31];
        let wd3 = if wd2 < 0 { ilb << -wd2 } else { ilb >> wd2 };
        t[i] = (wd3 << 2) as i16;
        i += 1;
    }
    t
}

static DET_LOW: [i16; 353] = det_table(8);
static DET_HIGH: [i16; 353] = det_table(10);

#[inline(always)]
fn sat16(x: i32) -> i16 {
    x.clamp(-32768, 32767) as i16
}

#[inline(always)]
fn sat_add(a: i16, b: i16) -> i16 {
    a.saturating_add(b)
}

/// A QMF output: 24 products of 16-bit values summed (never beyond 2^29, so never wrapping).
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn dot24_scalar(w: &[i16; 24], c: &[i16; 24]) -> i32 {
    w.iter()
        .zip(c)
        .map(|(&a, &b)| i32::from(a) * i32::from(b))
        .sum()
}

#[cfg(not(target_arch = "x86_64"))]
use self::dot24_scalar as dot24;

/// A QMF output in SSE2 (every x86-64 has it): three multiply-adds of eight 16-bit pairs. Left
/// to itself the compiler folds the constant coefficients into 24 scalar multiplies.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn dot24(w: &[i16; 24], c: &[i16; 24]) -> i32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; three unaligned 16-byte loads from each 48-byte array.
    unsafe {
        let (w, c) = (w.as_ptr().cast::<__m128i>(), c.as_ptr().cast::<__m128i>());
        let mut acc = _mm_madd_epi16(_mm_loadu_si128(w), _mm_loadu_si128(c));
        for k in 1..3 {
            acc = _mm_add_epi32(
                acc,
                _mm_madd_epi16(_mm_loadu_si128(w.add(k)), _mm_loadu_si128(c.add(k))),
            );
        }
        acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, 0b01_00_11_10));
        acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, 0b10_11_00_01));
        _mm_cvtsi128_si32(acc)
    }
}

/// QUANTL's decision interval (1 to 30) of the magnitude `wd` at scale `det`: one plus the
/// number of levels `(Q6 * det) >> 12` at or below it (the levels rise with the index, so this is
/// where the recommendation's search stops).
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn quantl_scalar(wd: i32, det: i16) -> usize {
    let n: usize = Q6
        .iter()
        .map(|&q| usize::from(wd >= (i32::from(q) * i32::from(det)) >> 12))
        .sum();
    n - 2
}

#[cfg(not(target_arch = "x86_64"))]
use self::quantl_scalar as quantl;

/// QUANTL in SSE2: the 32 levels as 16-bit lanes (below 2^15: `det` is at most 32064), from
/// the high and low halves of the 16-bit products, compared with `wd` and counted.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn quantl(wd: i32, det: i16) -> usize {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; four unaligned 16-byte loads of `Q6`.
    unsafe {
        let (d, w) = (_mm_set1_epi16(det), _mm_set1_epi16(wd as i16));
        let mut below = _mm_setzero_si128();
        for k in 0..4 {
            let q = _mm_loadu_si128(Q6.as_ptr().cast::<__m128i>().add(k));
            let level = _mm_or_si128(
                _mm_slli_epi16(_mm_mulhi_epi16(q, d), 4),
                _mm_srli_epi16(_mm_mullo_epi16(q, d), 12),
            );
            // -1 in each lane whose level is above `wd`.
            below = _mm_add_epi16(below, _mm_cmpgt_epi16(level, w));
        }
        let sum = _mm_madd_epi16(below, _mm_set1_epi16(1));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0b01_00_11_10));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0b10_11_00_01));
        // 32 lanes less those above, less the three zero lanes, plus one.
        (32 + _mm_cvtsi128_si32(sum) - 2) as usize
    }
}

/// UPZERO and FILTEZ: the sign-sign update of B1..B6 against the previous differences, then
/// the zero predictor's sum over the new coefficients and this difference with the five before
/// it, which become the previous differences. Lanes 6 and 7 of `d` stay zero, so those of `b`
/// never count.
#[cfg(any(test, not(target_arch = "x86_64")))]
#[inline(always)]
fn upzero_scalar(b: &mut [i16; 8], d: &mut [i16; 8], dx: i16) -> i32 {
    let step: i16 = if dx == 0 { 0 } else { 128 };
    let old = *d;
    *b = std::array::from_fn(|i| {
        let wd2 = if (old[i] ^ dx) < 0 { -step } else { step };
        sat_add(wd2, ((i32::from(b[i]) * 32640) >> 15) as i16)
    });
    *d = std::array::from_fn(|i| match i {
        0 => dx,
        1..=5 => old[i - 1],
        _ => 0,
    });
    (0..8)
        .map(|i| (i32::from(b[i]) * i32::from(sat_add(d[i], d[i]))) >> 15)
        .sum()
}

#[cfg(not(target_arch = "x86_64"))]
use self::upzero_scalar as upzero;

/// UPZERO and FILTEZ in SSE2 lanes, each product built from its 16-bit halves.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn upzero(b: &mut [i16; 8], d: &mut [i16; 8], dx: i16) -> i32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; unaligned 16-byte loads and stores of the arrays.
    unsafe {
        let mul15 = |x: __m128i, y: __m128i| {
            _mm_or_si128(
                _mm_slli_epi16(_mm_mulhi_epi16(x, y), 1),
                _mm_srli_epi16(_mm_mullo_epi16(x, y), 15),
            )
        };
        let old = _mm_loadu_si128(d.as_ptr().cast());
        let step = _mm_set1_epi16(if dx == 0 { 0 } else { 128 });
        let differ = _mm_srai_epi16(_mm_xor_si128(old, _mm_set1_epi16(dx)), 15);
        let wd2 = _mm_sub_epi16(_mm_xor_si128(step, differ), differ);
        let bv = _mm_loadu_si128(b.as_ptr().cast());
        let bv = _mm_adds_epi16(wd2, mul15(bv, _mm_set1_epi16(32640)));
        let keep = _mm_set_epi16(0, 0, -1, -1, -1, -1, -1, -1);
        let dv = _mm_insert_epi16(
            _mm_and_si128(_mm_slli_si128(old, 2), keep),
            i32::from(dx),
            0,
        );
        _mm_storeu_si128(b.as_mut_ptr().cast(), bv);
        _mm_storeu_si128(d.as_mut_ptr().cast(), dv);
        // (-32768 * -32768) >> 15 needs 17 bits: these products are widened to 32.
        let d2 = _mm_adds_epi16(dv, dv);
        let (lo, hi) = (_mm_mullo_epi16(bv, d2), _mm_mulhi_epi16(bv, d2));
        let sum = _mm_add_epi32(
            _mm_srai_epi32(_mm_unpacklo_epi16(lo, hi), 15),
            _mm_srai_epi32(_mm_unpackhi_epi16(lo, hi), 15),
        );
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0b01_00_11_10));
        let sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0b10_11_00_01));
        _mm_cvtsi128_si32(sum)
    }
}

/// The last twelve sample pairs, oldest first.
#[derive(Debug, Clone)]
struct Qmf {
    w: [i16; 24],
}

impl Qmf {
    fn new() -> Qmf {
        Qmf { w: [0; 24] }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[inline(always)]
    fn push(&mut self, first: i16, second: i16) -> &[i16; 24] {
        self.push_scalar(first, second)
    }

    #[cfg(any(test, not(target_arch = "x86_64")))]
    #[inline(always)]
    fn push_scalar(&mut self, first: i16, second: i16) -> &[i16; 24] {
        self.w.copy_within(2.., 0);
        self.w[22] = first;
        self.w[23] = second;
        &self.w
    }

    /// Shifts the window by one pair in three SSE2 registers and stores them whole, so the
    /// dot products' 16-byte loads are forwarded from these stores rather than stalled on
    /// two-byte writes.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn push(&mut self, first: i16, second: i16) -> &[i16; 24] {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86-64.
        unsafe {
            let pair = _mm_cvtsi32_si128(i32::from(first as u16) | (i32::from(second) << 16));
            self.push_pair(pair)
        }
    }

    /// [`Qmf::push`] of the pair in lanes 0 and 1 of `pair`.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn push_pair(&mut self, pair: std::arch::x86_64::__m128i) -> &[i16; 24] {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86-64; three unaligned 16-byte loads and stores of `w`.
        unsafe {
            let p = self.w.as_mut_ptr().cast::<__m128i>();
            let (r0, r1, r2) = (
                _mm_loadu_si128(p),
                _mm_loadu_si128(p.add(1)),
                _mm_loadu_si128(p.add(2)),
            );
            let shift = |lo: __m128i, hi: __m128i| {
                _mm_or_si128(_mm_srli_si128(lo, 4), _mm_slli_si128(hi, 12))
            };
            _mm_storeu_si128(p, shift(r0, r1));
            _mm_storeu_si128(p.add(1), shift(r1, r2));
            _mm_storeu_si128(p.add(2), shift(r2, pair));
        }
        &self.w
    }
}

/// One sub-band's ADPCM state (G.722 blocks 3 and 4).
#[derive(Debug, Clone, Default)]
struct Band {
    nb: i16,
    det: i16,
    s: i16,
    sz: i16,
    r: i16,
    p: [i16; 2],
    a: [i16; 2],
    /// Zero predictor coefficients B1..B6 (lanes 6 and 7 multiply zeros).
    b: [i16; 8],
    /// Quantised differences D(k-1)..D(k-6); lanes 6 and 7 stay zero.
    d: [i16; 8],
}

impl Band {
    fn new(det: i16) -> Band {
        Band {
            det,
            ..Band::default()
        }
    }

    /// LOGSCL/LOGSCH and SCALEL/SCALEH: the new scale factor from the code's weight.
    #[inline(always)]
    fn scale(&mut self, weight: i32, max: i32, det: &[i16; 353]) {
        let nb = (((i32::from(self.nb) * 127) >> 7) + weight) as i16;
        self.nb = nb.clamp(0, max as i16);
        self.det = det[(self.nb >> 6) as usize];
    }

    /// Block 4: reconstruction, pole and zero predictor adaptation, the next estimate.
    #[inline(always)]
    fn block4(&mut self, dx: i16) {
        let r = sat_add(self.s, dx);
        let p = sat_add(self.sz, dx);
        let differ0 = (p ^ self.p[0]) < 0;
        let differ1 = (p ^ self.p[1]) < 0;

        // UPPOL2
        let wd1 = i32::from(sat16(i32::from(self.a[0]) << 2));
        let wd32 = if differ0 { wd1 } else { -wd1 }.min(32767);
        let wd3 = ((if differ1 { -128 } else { 128 })
            + (wd32 >> 7)
            + ((i32::from(self.a[1]) * 32512) >> 15)) as i16;
        let ap1 = wd3.clamp(-12288, 12288);

        // UPPOL1
        let wd1: i16 = if differ0 { -192 } else { 192 };
        let wd2 = ((i32::from(self.a[0]) * 32640) >> 15) as i16;
        let mut ap0 = sat_add(wd1, wd2);
        let lim = 15360i16.saturating_sub(ap1);
        ap0 = ap0.clamp(-lim, lim);

        // FILTEP
        let wd1 = ((i32::from(ap0) * i32::from(sat_add(r, r))) >> 15) as i16;
        let wd2 = ((i32::from(ap1) * i32::from(sat_add(self.r, self.r))) >> 15) as i16;
        let sp = sat_add(wd1, wd2);
        self.r = r;
        self.a = [ap0, ap1];
        self.p = [p, self.p[0]];

        let sz = upzero(&mut self.b, &mut self.d, dx);
        self.sz = sat16(sz);
        self.s = sat_add(sp, self.sz);
    }
}

/// A G.722 encoder: 16 kHz linear PCM in, one byte per two samples out.
#[derive(Debug, Clone)]
pub struct G722Encoder {
    qmf: Qmf,
    low: Band,
    high: Band,
}

impl Default for G722Encoder {
    fn default() -> Self {
        G722Encoder {
            qmf: Qmf::new(),
            low: Band::new(32),
            high: Band::new(8),
        }
    }
}

impl G722Encoder {
    pub fn new() -> G722Encoder {
        G722Encoder::default()
    }

    /// Encodes pairs of `pcm` into `out` (room for `pcm.len() / 2` bytes); returns bytes written.
    pub fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> usize {
        let mut n = 0;
        for (pair, o) in pcm.chunks_exact(2).zip(out.iter_mut()) {
            let w = self.qmf.push(pair[0], pair[1]);
            let xlow = (dot24(w, &TX_LOW) >> 14) as i16;
            let xhigh = (dot24(w, &TX_HIGH) >> 14) as i16;

            // Low band: SUBTRA, QUANTL (the count of decision levels at or below the
            // difference, levels rising with the scale), INVQAL, LOGSCL, SCALEL.
            let low = &mut self.low;
            let el = xlow.saturating_sub(low.s);
            let wd = i32::from(if el >= 0 { el } else { !el });
            let det = i32::from(low.det);
            let interval = quantl(wd, low.det);
            let ilow = IL[usize::from(el < 0)][interval];
            let ril = usize::from(ilow >> 2);
            let dlow = ((det * QM4[ril]) >> 15) as i16;
            low.scale(WL[RL42[ril]], 18432, &DET_LOW);
            low.block4(dlow);

            // High band: SUBTRA, QUANTH, INVQAH, LOGSCH, SCALEH.
            let high = &mut self.high;
            let eh = xhigh.saturating_sub(high.s);
            let wd = i32::from(if eh >= 0 { eh } else { !eh });
            let det = i32::from(high.det);
            let big = wd >= (564 * det) >> 12;
            let ihigh: usize = match (eh < 0, big) {
                (true, false) => 1,
                (true, true) => 0,
                (false, false) => 3,
                (false, true) => 2,
            };
            let dhigh = ((det * QM2[ihigh]) >> 15) as i16;
            high.scale(WH[RH2[ihigh]], 22528, &DET_HIGH);
            high.block4(dhigh);

            *o = ((ihigh as u8) << 6) | ilow;
            n += 1;
        }
        n
    }
}

/// A G.722 decoder: one byte per two samples of 16 kHz linear PCM.
#[derive(Debug, Clone)]
pub struct G722Decoder {
    qmf: Qmf,
    low: Band,
    high: Band,
}

impl Default for G722Decoder {
    fn default() -> Self {
        G722Decoder {
            qmf: Qmf::new(),
            low: Band::new(32),
            high: Band::new(8),
        }
    }
}

impl G722Decoder {
    pub fn new() -> G722Decoder {
        G722Decoder::default()
    }

    /// Decodes `payload` into `out` (room for `2 * payload.len()` samples); returns samples written.
    #[cfg(target_arch = "x86_64")]
    pub fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        lanes::decode(self, payload, out)
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        self.decode_scalar(payload, out)
    }

    /// The decoder band by band, as the recommendation writes it.
    #[cfg(any(test, not(target_arch = "x86_64")))]
    fn decode_scalar(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        let mut n = 0;
        for (&code, o) in payload.iter().zip(out.chunks_exact_mut(2)) {
            let code = usize::from(code);
            let ilow = code & 0x3F;
            let ihigh = code >> 6;

            // Low band: INVQBL, RECONS, LIMIT; INVQAL, LOGSCL, SCALEL, block 4.
            let low = &mut self.low;
            let det = i32::from(low.det);
            let rlow = (i32::from(low.s) + ((det * QM6[ilow]) >> 15)).clamp(-16384, 16383);
            let ril = ilow >> 2;
            let dlow = ((det * QM4[ril]) >> 15) as i16;
            low.scale(WL[RL42[ril]], 18432, &DET_LOW);
            low.block4(dlow);

            // High band: INVQAH, RECONS, LIMIT, LOGSCH, SCALEH, block 4.
            let high = &mut self.high;
            let dhigh = ((i32::from(high.det) * QM2[ihigh]) >> 15) as i16;
            let rhigh = (i32::from(dhigh) + i32::from(high.s)).clamp(-16384, 16383);
            high.scale(WH[RH2[ihigh]], 22528, &DET_HIGH);
            high.block4(dhigh);

            let w = self.qmf.push(sat16(rlow + rhigh), sat16(rlow - rhigh));
            // Wrapped, not saturated, as spandsp 0.0.6 does (only corrupt streams get there).
            o[0] = (dot24(w, &RX_FIRST) >> 11) as i16;
            o[1] = (dot24(w, &RX_SECOND) >> 11) as i16;
            n += 2;
        }
        n
    }
}

/// The decoder with both bands' ADPCM in the lanes of SSE2 registers (the low band in lane 0,
/// the high band in lane 1): the two bands run the same block 4 on different values, so one
/// saturating vector instruction does what two scalar ones and their overflow checks did.
#[cfg(target_arch = "x86_64")]
mod lanes {
    use super::*;
    use std::arch::x86_64::*;

    /// Per code word, the low and high band's entries (low in the bottom 16 bits) of: the
    /// reconstruction's quantiser output (QM6, QM2), the predictor's difference (QM4, QM2) and
    /// the scale factor's weight (WL, WH).
    const fn by_code(table: usize) -> [i32; 256] {
        let mut t = [0; 256];
        let mut c = 0;
        while c < 256 {
            let (l, h) = (c & 63, c >> 6);
            let (low, high) = match table {
                0 => (QM6[l], QM2[h]),
                1 => (QM4[l >> 2], QM2[h]),
                _ => (WL[RL42[l >> 2]], WH[RH2[h]]),
            };
            t[c] = (low & 0xFFFF) | (high << 16);
            c += 1;
        }
        t
    }
    static RECON: [i32; 256] = by_code(0);
    static DIFF: [i32; 256] = by_code(1);
    static WEIGHT: [i32; 256] = by_code(2);

    /// Both bands' `Band` fields, one vector each.
    struct Bands {
        nb: __m128i,
        det: __m128i,
        s: __m128i,
        sz: __m128i,
        r: __m128i,
        p0: __m128i,
        p1: __m128i,
        a0: __m128i,
        a1: __m128i,
        b: [__m128i; 2],
        d: [__m128i; 2],
    }

    /// The low 16 bits of `(x * y) >> 15` in each lane, from the product's two halves.
    #[inline(always)]
    unsafe fn mul15(x: __m128i, y: __m128i) -> __m128i {
        _mm_or_si128(
            _mm_slli_epi16(_mm_mulhi_epi16(x, y), 1),
            _mm_srli_epi16(_mm_mullo_epi16(x, y), 15),
        )
    }

    /// `v` if a lane of `mask` is 0, its negation (wrapping) if -1.
    #[inline(always)]
    unsafe fn negate_where(mask: __m128i, v: __m128i) -> __m128i {
        _mm_sub_epi16(_mm_xor_si128(v, mask), mask)
    }

    #[inline(always)]
    unsafe fn clamp(v: __m128i, lo: i16, hi: i16) -> __m128i {
        _mm_min_epi16(_mm_max_epi16(v, _mm_set1_epi16(lo)), _mm_set1_epi16(hi))
    }

    impl Bands {
        unsafe fn load(low: &Band, high: &Band) -> Bands {
            let v = |l: i16, h: i16| _mm_cvtsi32_si128(i32::from(l as u16) | (i32::from(h) << 16));
            let arr = |a: &[i16; 8]| _mm_loadu_si128(a.as_ptr().cast());
            Bands {
                nb: v(low.nb, high.nb),
                det: v(low.det, high.det),
                s: v(low.s, high.s),
                sz: v(low.sz, high.sz),
                r: v(low.r, high.r),
                p0: v(low.p[0], high.p[0]),
                p1: v(low.p[1], high.p[1]),
                a0: v(low.a[0], high.a[0]),
                a1: v(low.a[1], high.a[1]),
                b: [arr(&low.b), arr(&high.b)],
                d: [arr(&low.d), arr(&high.d)],
            }
        }

        unsafe fn store(&self, low: &mut Band, high: &mut Band) {
            let lanes = |v: __m128i| {
                let x = _mm_cvtsi128_si32(v);
                (x as i16, (x >> 16) as i16)
            };
            (low.nb, high.nb) = lanes(self.nb);
            (low.det, high.det) = lanes(self.det);
            (low.s, high.s) = lanes(self.s);
            (low.sz, high.sz) = lanes(self.sz);
            (low.r, high.r) = lanes(self.r);
            (low.p[0], high.p[0]) = lanes(self.p0);
            (low.p[1], high.p[1]) = lanes(self.p1);
            (low.a[0], high.a[0]) = lanes(self.a0);
            (low.a[1], high.a[1]) = lanes(self.a1);
            _mm_storeu_si128(low.b.as_mut_ptr().cast(), self.b[0]);
            _mm_storeu_si128(high.b.as_mut_ptr().cast(), self.b[1]);
            _mm_storeu_si128(low.d.as_mut_ptr().cast(), self.d[0]);
            _mm_storeu_si128(high.d.as_mut_ptr().cast(), self.d[1]);
        }

        /// INVQBL/INVQAH and RECONS, LIMIT: both bands' reconstructed signals for `code`;
        /// then block 4 and the new scale factors.
        #[inline(always)]
        unsafe fn step(&mut self, code: usize) -> __m128i {
            let recon = _mm_cvtsi32_si128(RECON[code]);
            let recon = clamp(
                _mm_adds_epi16(self.s, mul15(self.det, recon)),
                -16384,
                16383,
            );
            let dx = mul15(self.det, _mm_cvtsi32_si128(DIFF[code]));

            // LOGSCL/LOGSCH ((nb * 127) >> 7 as the high half of nb * (127 << 9)), SCALEL/SCALEH.
            let nb = _mm_add_epi16(
                _mm_mulhi_epu16(self.nb, _mm_set1_epi16((127u16 << 9) as i16)),
                _mm_cvtsi32_si128(WEIGHT[code]),
            );
            let nb = _mm_min_epi16(
                _mm_max_epi16(nb, _mm_setzero_si128()),
                _mm_set_epi16(0, 0, 0, 0, 0, 0, 22528, 18432),
            );
            self.nb = nb;
            let i = _mm_cvtsi128_si32(_mm_srli_epi16(nb, 6)) as u32;
            let det = i32::from(DET_LOW[(i & 0xFFFF) as usize] as u16)
                | (i32::from(DET_HIGH[(i >> 16) as usize]) << 16);
            self.det = _mm_cvtsi32_si128(det);

            self.block4(dx);
            recon
        }

        /// Block 4 as `Band::block4`, lane by lane.
        #[inline(always)]
        unsafe fn block4(&mut self, dx: __m128i) {
            let zero = _mm_setzero_si128();
            let r = _mm_adds_epi16(self.s, dx);
            let p = _mm_adds_epi16(self.sz, dx);
            let differ0 = _mm_srai_epi16(_mm_xor_si128(p, self.p0), 15);
            let differ1 = _mm_srai_epi16(_mm_xor_si128(p, self.p1), 15);

            // UPPOL2: 4 * a0 saturated, negated (saturating) unless differ0.
            let twice = _mm_adds_epi16(self.a0, self.a0);
            let wd1 = _mm_adds_epi16(twice, twice);
            let wd32 = _mm_or_si128(
                _mm_and_si128(differ0, wd1),
                _mm_andnot_si128(differ0, _mm_subs_epi16(zero, wd1)),
            );
            let wd3 = _mm_add_epi16(
                _mm_add_epi16(
                    negate_where(differ1, _mm_set1_epi16(128)),
                    _mm_srai_epi16(wd32, 7),
                ),
                mul15(self.a1, _mm_set1_epi16(32512)),
            );
            let ap1 = clamp(wd3, -12288, 12288);

            // UPPOL1
            let ap0 = _mm_adds_epi16(
                negate_where(differ0, _mm_set1_epi16(192)),
                mul15(self.a0, _mm_set1_epi16(32640)),
            );
            let lim = _mm_subs_epi16(_mm_set1_epi16(15360), ap1);
            let ap0 = _mm_min_epi16(_mm_max_epi16(ap0, _mm_sub_epi16(zero, lim)), lim);

            // FILTEP
            let sp = _mm_adds_epi16(
                mul15(ap0, _mm_adds_epi16(r, r)),
                mul15(ap1, _mm_adds_epi16(self.r, self.r)),
            );
            self.r = r;
            self.a0 = ap0;
            self.a1 = ap1;
            self.p1 = self.p0;
            self.p0 = p;

            self.sz = self.upzero(dx);
            self.s = _mm_adds_epi16(sp, self.sz);
        }

        /// UPZERO and FILTEZ as [`super::upzero`] for each band; the two sums saturated to
        /// 16 bits in lanes 0 and 1.
        #[inline(always)]
        unsafe fn upzero(&mut self, dx: __m128i) -> __m128i {
            let mut sums = [_mm_setzero_si128(); 2];
            for (k, sum) in sums.iter_mut().enumerate() {
                // This band's difference in every lane.
                let x = if k == 0 {
                    _mm_shuffle_epi32(_mm_shufflelo_epi16(dx, 0), 0)
                } else {
                    _mm_shuffle_epi32(_mm_shufflelo_epi16(dx, 0b01_01_01_01), 0)
                };
                let old = self.d[k];
                let step =
                    _mm_andnot_si128(_mm_cmpeq_epi16(x, _mm_setzero_si128()), _mm_set1_epi16(128));
                let differ = _mm_srai_epi16(_mm_xor_si128(old, x), 15);
                let b = _mm_adds_epi16(
                    negate_where(differ, step),
                    mul15(self.b[k], _mm_set1_epi16(32640)),
                );
                let d = _mm_or_si128(
                    _mm_and_si128(
                        _mm_slli_si128(old, 2),
                        _mm_set_epi16(0, 0, -1, -1, -1, -1, -1, 0),
                    ),
                    _mm_and_si128(x, _mm_set_epi16(0, 0, 0, 0, 0, 0, 0, -1)),
                );
                self.b[k] = b;
                self.d[k] = d;
                let d2 = _mm_adds_epi16(d, d);
                let (lo, hi) = (_mm_mullo_epi16(b, d2), _mm_mulhi_epi16(b, d2));
                *sum = _mm_add_epi32(
                    _mm_srai_epi32(_mm_unpacklo_epi16(lo, hi), 15),
                    _mm_srai_epi32(_mm_unpackhi_epi16(lo, hi), 15),
                );
            }
            let t = _mm_add_epi32(
                _mm_unpacklo_epi32(sums[0], sums[1]),
                _mm_unpackhi_epi32(sums[0], sums[1]),
            );
            let t = _mm_add_epi32(t, _mm_srli_si128(t, 8));
            _mm_packs_epi32(t, t)
        }
    }

    pub(super) fn decode(dec: &mut G722Decoder, payload: &[u8], out: &mut [i16]) -> usize {
        // SAFETY: SSE2 is part of x86-64; loads and stores are of whole arrays and fields.
        unsafe {
            let mut bands = Bands::load(&dec.low, &dec.high);
            let mut n = 0;
            for (&code, o) in payload.iter().zip(out.chunks_exact_mut(2)) {
                let recon = bands.step(usize::from(code));
                // (low + high, low - high) saturated, in lanes 0 and 1.
                let low = _mm_shufflelo_epi16(recon, 0);
                let high = _mm_mullo_epi16(
                    _mm_shufflelo_epi16(recon, 0b01_01_01_01),
                    _mm_set_epi16(1, 1, 1, 1, 1, 1, -1, 1),
                );
                let w = dec.qmf.push_pair(_mm_adds_epi16(low, high));
                // Wrapped, not saturated, as spandsp 0.0.6 does (only corrupt streams get there).
                o[0] = (dot24(w, &RX_FIRST) >> 11) as i16;
                o[1] = (dot24(w, &RX_SECOND) >> 11) as i16;
                n += 2;
            }
            bands.store(&mut dec.low, &mut dec.high);
            n
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: u32) -> impl FnMut() -> i16 {
        let mut x = seed;
        move || {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 16) as i16
        }
    }

    /// The SSE2 paths equal the portable ones: QUANTL for every magnitude at a spread of
    /// scales, and the QMF window and dot product and the zero predictor on random and
    /// extreme values.
    #[test]
    fn vector_paths_are_the_scalar_ones() {
        for det in (32..=32064).step_by(97).chain([32, 32064]) {
            for wd in (0..=32767).step_by(13).chain([0, 32767]) {
                assert_eq!(quantl(wd, det), quantl_scalar(wd, det), "wd {wd} det {det}");
            }
        }
        let mut r = lcg(1);
        for round in 0..20_000 {
            let pick = |r: &mut dyn FnMut() -> i16| match round % 3 {
                0 => r(),
                1 => [i16::MIN, i16::MAX, 0, -1][(r() & 3) as usize],
                _ => r() >> 4,
            };
            let w: [i16; 24] = std::array::from_fn(|_| pick(&mut r));
            assert_eq!(dot24(&w, &TX_HIGH), dot24_scalar(&w, &TX_HIGH));
            let (mut q1, mut q2) = (Qmf { w }, Qmf { w });
            let (a, b) = (pick(&mut r), pick(&mut r));
            assert_eq!(q1.push(a, b), q2.push_scalar(a, b));
            let mut b: [i16; 8] = std::array::from_fn(|_| pick(&mut r));
            let mut d: [i16; 8] = std::array::from_fn(|i| if i < 6 { pick(&mut r) } else { 0 });
            let (mut b2, mut d2) = (b, d);
            let dx = pick(&mut r);
            assert_eq!(
                upzero(&mut b, &mut d, dx),
                upzero_scalar(&mut b2, &mut d2, dx)
            );
            assert_eq!((b, d), (b2, d2));
        }
    }

    /// The decoder with both bands in vector lanes equals the band-by-band one on random code
    /// words (corrupt streams reach every saturation) and on a stream of the encoder's.
    #[test]
    fn decoder_lanes_are_the_bands() {
        let mut r = lcg(7);
        let junk: Vec<u8> = (0..200_000).map(|_| r() as u8).collect();
        let mut enc = G722Encoder::new();
        let pcm: Vec<i16> = (0..100_000)
            .map(|i| if i % 4000 < 2000 { r() } else { r() >> 6 })
            .collect();
        let mut coded = vec![0u8; pcm.len() / 2];
        enc.encode(&pcm, &mut coded);
        for bytes in [&junk, &coded] {
            let (mut a, mut b) = (G722Decoder::new(), G722Decoder::new());
            let (mut x, mut y) = ([0i16; 320], [0i16; 320]);
            for p in bytes.chunks(160) {
                assert_eq!(a.decode(p, &mut x), b.decode_scalar(p, &mut y));
                assert_eq!(x, y);
            }
        }
    }
}

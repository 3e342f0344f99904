//! ITU-T G.711 µ-law (PCMU) and A-law (PCMA).
//!
//! All four directions are lookups into tables computed at compile time:
//! encoding indexes a 16 KiB table by the top 14 bits of the sample, which is
//! exact because neither law looks at the two low bits (µ-law's bias of 132
//! is a multiple of 4; A-law only looks at 13 bits). The segment arithmetic
//! follows the well-known spandsp formulation, which is symmetric around
//! zero (so -1 encodes to µ-law 0x7F, "negative zero", rather than -8).

use crate::Codec;

/// A G.711 companding law; both are 8 kHz, one byte per sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum G711 {
    /// µ-law, RTP payload type 0.
    Pcmu,
    /// A-law, RTP payload type 8.
    Pcma,
}

impl G711 {
    /// Encodes one linear sample.
    #[inline]
    pub fn encode_sample(self, x: i16) -> u8 {
        let idx = ((x >> 2) as u16 & 0x3FFF) as usize;
        match self {
            G711::Pcmu => ULAW_ENCODE[idx],
            G711::Pcma => ALAW_ENCODE[idx],
        }
    }

    /// Decodes one code to a linear sample.
    #[inline]
    pub fn decode_sample(self, code: u8) -> i16 {
        self.decode_table()[code as usize]
    }

    /// Decodes `src` into the start of `dst` (the shorter of the two lengths): the table is
    /// chosen once, not per sample, and µ-law on a CPU with AVX2 is computed eight samples at
    /// a time instead.
    #[inline]
    pub fn decode_into(self, src: &[u8], dst: &mut [i16]) -> usize {
        let n = src.len().min(dst.len());
        let (src, dst) = (&src[..n], &mut dst[..n]);
        #[cfg(target_arch = "x86_64")]
        if self == G711::Pcmu && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { ulaw_decode_avx2(src, dst) };
            return n;
        }
        let table = self.decode_table();
        for (o, c) in dst.iter_mut().zip(src) {
            *o = table[*c as usize];
        }
        n
    }

    #[inline]
    fn decode_table(self) -> &'static [i16; 256] {
        match self {
            G711::Pcmu => &ULAW_DECODE,
            G711::Pcma => &ALAW_DECODE,
        }
    }

    /// The code for digital silence (linear 0), used to pad frames.
    pub fn silence(self) -> u8 {
        self.encode_sample(0)
    }

    /// Rewrites `src` (coded in `self`) into `dst` coded in `to`; copies when
    /// the laws match. Returns bytes written (the shorter of the two lengths).
    pub fn transcode(self, to: G711, src: &[u8], dst: &mut [u8]) -> usize {
        let n = src.len().min(dst.len());
        let table = match (self, to) {
            (G711::Pcmu, G711::Pcma) => &ULAW_TO_ALAW,
            (G711::Pcma, G711::Pcmu) => &ALAW_TO_ULAW,
            _ => {
                dst[..n].copy_from_slice(&src[..n]);
                return n;
            }
        };
        for (d, s) in dst[..n].iter_mut().zip(&src[..n]) {
            *d = table[*s as usize];
        }
        n
    }
}

impl Codec for G711 {
    fn name(&self) -> &'static str {
        match self {
            G711::Pcmu => "PCMU",
            G711::Pcma => "PCMA",
        }
    }

    fn clock_rate(&self) -> u32 {
        8000
    }

    fn frame_samples(&self) -> usize {
        1
    }

    fn static_payload_type(&self) -> Option<u8> {
        Some(match self {
            G711::Pcmu => 0,
            G711::Pcma => 8,
        })
    }

    fn encode(&self, pcm: &[i16], out: &mut [u8]) -> usize {
        let n = pcm.len().min(out.len());
        for (o, s) in out[..n].iter_mut().zip(&pcm[..n]) {
            *o = self.encode_sample(*s);
        }
        n
    }

    fn decode(&self, payload: &[u8], out: &mut [i16]) -> usize {
        self.decode_into(payload, out)
    }
}

/// Segment number (0..=8) of a non-negative value, 8 meaning "clip".
const fn segment(v: i32) -> i32 {
    // top_bit(v | 0xFF) - 7
    (31 - (v | 0xFF).leading_zeros() as i32) - 7
}

const fn ulaw_encode_ref(x: i32) -> u8 {
    let (linear, mask): (i32, i32) = if x < 0 {
        (0x84 - x - 1, 0x7F)
    } else {
        (0x84 + x, 0xFF)
    };
    let seg = segment(linear);
    if seg >= 8 {
        return (0x7F ^ mask) as u8;
    }
    (((seg << 4) | ((linear >> (seg + 3)) & 0x0F)) ^ mask) as u8
}

const fn alaw_encode_ref(x: i32) -> u8 {
    let (linear, mask): (i32, i32) = if x < 0 { (-x - 1, 0x55) } else { (x, 0xD5) };
    let seg = segment(linear);
    if seg >= 8 {
        return (0x7F ^ mask) as u8;
    }
    let shift = if seg == 0 { 4 } else { seg + 3 };
    (((seg << 4) | ((linear >> shift) & 0x0F)) ^ mask) as u8
}

const fn ulaw_decode_ref(code: u8) -> i16 {
    let u = !code as i32;
    let t = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4);
    (if u & 0x80 != 0 { 0x84 - t } else { t - 0x84 }) as i16
}

/// µ-law decoded by its formula: with AVX2's shift of each lane by its own count the compiler
/// turns the loop into eight samples at a time, half the instructions of table lookups (which
/// a recorded call spends on every sample it receives).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn ulaw_decode_avx2(src: &[u8], dst: &mut [i16]) {
    for (o, &c) in dst.iter_mut().zip(src) {
        *o = ulaw_decode_ref(c);
    }
}

const fn alaw_decode_ref(code: u8) -> i16 {
    let a = (code ^ 0x55) as i32;
    let mut i = (a & 0x0F) << 4;
    let seg = (a & 0x70) >> 4;
    if seg != 0 {
        i = (i + 0x108) << (seg - 1);
    } else {
        i += 8;
    }
    (if a & 0x80 != 0 { i } else { -i }) as i16
}

/// Builds an encode table indexed by the 14-bit two's complement `x >> 2`.
const fn encode_table(alaw: bool) -> [u8; 16384] {
    let mut t = [0u8; 16384];
    let mut i = 0;
    while i < 16384 {
        // Sign-extend the 14-bit index back to a representative sample.
        let x = ((i as i32) << 18) >> 16;
        t[i] = if alaw {
            alaw_encode_ref(x)
        } else {
            ulaw_encode_ref(x)
        };
        i += 1;
    }
    t
}

const fn decode_table(alaw: bool) -> [i16; 256] {
    let mut t = [0i16; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = if alaw {
            alaw_decode_ref(i as u8)
        } else {
            ulaw_decode_ref(i as u8)
        };
        i += 1;
    }
    t
}

/// Transcoding by decode-then-encode, precomputed for all 256 codes.
const fn transcode_table(from_alaw: bool) -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = if from_alaw {
            ulaw_encode_ref(alaw_decode_ref(i as u8) as i32)
        } else {
            alaw_encode_ref(ulaw_decode_ref(i as u8) as i32)
        };
        i += 1;
    }
    t
}

static ULAW_ENCODE: [u8; 16384] = encode_table(false);
static ALAW_ENCODE: [u8; 16384] = encode_table(true);
static ULAW_DECODE: [i16; 256] = decode_table(false);
static ALAW_DECODE: [i16; 256] = decode_table(true);
static ULAW_TO_ALAW: [u8; 256] = transcode_table(false);
static ALAW_TO_ULAW: [u8; 256] = transcode_table(true);

#[cfg(test)]
mod tests {
    use super::*;

    const LAWS: [G711; 2] = [G711::Pcmu, G711::Pcma];

    #[test]
    fn known_codes() {
        assert_eq!(G711::Pcmu.encode_sample(0), 0xFF);
        assert_eq!(G711::Pcmu.encode_sample(-1), 0x7F);
        assert_eq!(G711::Pcmu.decode_sample(0xFF), 0);
        assert_eq!(G711::Pcmu.decode_sample(0x7F), 0);
        assert_eq!(G711::Pcmu.encode_sample(i16::MAX), 0x80);
        assert_eq!(G711::Pcmu.encode_sample(i16::MIN), 0x00);
        assert_eq!(G711::Pcmu.decode_sample(0x80), 32124);
        assert_eq!(G711::Pcmu.decode_sample(0x00), -32124);
        assert_eq!(G711::Pcma.encode_sample(0), 0xD5);
        assert_eq!(G711::Pcma.encode_sample(-1), 0x55);
        assert_eq!(G711::Pcma.decode_sample(0xD5), 8);
        assert_eq!(G711::Pcma.decode_sample(0x55), -8);
        assert_eq!(G711::Pcma.encode_sample(i16::MAX), 0xAA);
        assert_eq!(G711::Pcma.decode_sample(0xAA), 32256);
        assert_eq!(G711::Pcma.decode_sample(0x2A), -32256);
    }

    /// `decode_into` (µ-law by its formula where the CPU has AVX2) gives every code's table
    /// value, at every length around the vector width and its tail.
    #[test]
    fn decode_into_matches_the_tables_at_every_length() {
        let codes: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
        for law in LAWS {
            for n in (0..40).chain([159, 160, 161, 320, 512]) {
                let mut out = vec![i16::MIN; n + 3];
                assert_eq!(law.decode_into(&codes[..n], &mut out), n);
                for (i, &c) in codes[..n].iter().enumerate() {
                    assert_eq!(out[i], law.decode_sample(c), "{law:?} {c:#x} at {i} of {n}");
                }
                assert!(out[n..].iter().all(|&s| s == i16::MIN), "nothing past {n}");
            }
        }
    }

    #[test]
    fn every_code_round_trips() {
        for c in 0..=255u8 {
            // µ-law 0x7F is negative zero: it decodes to 0, which encodes as 0xFF.
            let expect = if c == 0x7F { 0xFF } else { c };
            let u = G711::Pcmu;
            assert_eq!(u.encode_sample(u.decode_sample(c)), expect, "µ {c:#x}");
            let a = G711::Pcma;
            assert_eq!(a.encode_sample(a.decode_sample(c)), c, "A {c:#x}");
        }
    }

    #[test]
    fn symmetric_around_zero() {
        for law in LAWS {
            for c in 0..=255u8 {
                // Flipping the sign bit negates the decoded value.
                assert_eq!(
                    law.decode_sample(c),
                    -law.decode_sample(c ^ 0x80),
                    "{law:?} {c:#x}"
                );
            }
            for x in 0..=i16::MAX {
                let (p, n) = (law.encode_sample(x), law.encode_sample(-x - 1));
                assert_eq!(p ^ 0x80, n, "{law:?} {x}");
            }
        }
    }

    #[test]
    fn quantisation_error_is_within_one_step() {
        for law in LAWS {
            let mut levels: Vec<i16> = (0..=255u8).map(|c| law.decode_sample(c)).collect();
            levels.sort_unstable();
            levels.dedup();
            let mut prev = i16::MIN;
            for x in i16::MIN..=i16::MAX {
                let y = law.decode_sample(law.encode_sample(x));
                assert!(y >= prev, "{law:?} not monotonic at {x}");
                prev = y;
                let i = levels.binary_search(&y).unwrap();
                let gap_below = if i > 0 { y - levels[i - 1] } else { 0 };
                let gap_above = levels.get(i + 1).map_or(0, |n| n - y);
                let outside = x < levels[0] || x > levels[levels.len() - 1];
                let err = (x as i32 - y as i32).abs();
                assert!(
                    outside || err <= gap_below.max(gap_above) as i32,
                    "{law:?}: {x} -> {y}, error {err}"
                );
            }
        }
    }

    #[test]
    fn transcoding_matches_decode_then_encode() {
        let all: Vec<u8> = (0..=255).collect();
        let mut out = [0u8; 256];
        for (from, to) in [(G711::Pcmu, G711::Pcma), (G711::Pcma, G711::Pcmu)] {
            assert_eq!(from.transcode(to, &all, &mut out), 256);
            for c in 0..=255u8 {
                assert_eq!(out[c as usize], to.encode_sample(from.decode_sample(c)));
                // Re-encoding error is bounded by one step of the coarser law.
                let back = to.decode_sample(out[c as usize]) as i32;
                let orig = from.decode_sample(c) as i32;
                assert!((back - orig).abs() <= 1024, "{from:?} {c:#x}");
            }
        }
        assert_eq!(G711::Pcma.transcode(G711::Pcma, &all[..10], &mut out), 10);
        assert_eq!(&out[..10], &all[..10]);
    }

    /// A whole buffer decoded at once gives each code's own sample, for either law, and stops
    /// at the shorter of the two.
    #[test]
    fn decoding_a_buffer_decodes_every_code() {
        let all: Vec<u8> = (0..=255).collect();
        for law in LAWS {
            let mut out = [1i16; 300];
            assert_eq!(law.decode_into(&all, &mut out), 256);
            assert!((0..=255u8).all(|c| out[c as usize] == law.decode_sample(c)));
            assert_eq!(out[256], 1, "nothing past the codes");
            assert_eq!(law.decode_into(&all, &mut out[..10]), 10);
        }
    }

    #[test]
    fn frame_codec_respects_buffer_sizes() {
        let pcm = [0i16, 1000, -1000, 30000];
        let mut enc = [0u8; 3];
        assert_eq!(G711::Pcmu.encode(&pcm, &mut enc), 3);
        let mut dec = [0i16; 8];
        assert_eq!(G711::Pcmu.decode(&enc, &mut dec), 3);
        assert_eq!(dec[0], 0);
        assert!((dec[1] - 1000).abs() < 64 && (dec[2] + 1000).abs() < 64);
        assert_eq!(G711::Pcma.static_payload_type(), Some(8));
        assert_eq!(G711::Pcmu.name(), "PCMU");
    }
}

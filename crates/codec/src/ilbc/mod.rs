//! iLBC, the Internet Low Bitrate Codec of RFC 3951, written from the RFC:
//! 20 ms frames of 38 bytes (15.2 kbit/s) and 30 ms frames of 50 bytes
//! (13.33 kbit/s), with the RFC's decoder enhancer and packet-loss
//! concealment. No packaged library exists, so this is the implementation.
//!
//! - `lpc`: LPC analysis, LSF quantisation and interpolation;
//! - `state`: locating and coding the start state;
//! - `codebook`: the three-stage adaptive codebook;
//! - `walk`: the prediction order shared by encoder and decoder;
//! - `bits`: the bitstream layout;
//! - `enhancer`, `plc`: the decoder's post-processing and concealment;
//! - `filter`, `lanes`: the filters, and the correlations vectorised across windows.

mod bits;
mod codebook;
mod decoder;
mod encoder;
mod enhancer;
mod filter;
mod lanes;
mod lpc;
mod plc;
mod state;
mod tables;
mod walk;

pub use decoder::IlbcDecoder;
pub use encoder::IlbcEncoder;

/// Order of the LPC filters.
const ORDER: usize = 10;
/// Sub-frame length in samples.
const SUBL: usize = 40;
/// The longest frame (30 ms).
const BLOCKL_MAX: usize = 240;

/// Frame length: the `mode` of RFC 3952's `a=fmtp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Ms20,
    Ms30,
}

impl Mode {
    /// The mode whose frames are `len` bytes long.
    pub fn from_frame_len(len: usize) -> Option<Mode> {
        match len {
            38 => Some(Mode::Ms20),
            50 => Some(Mode::Ms30),
            _ => None,
        }
    }

    pub fn ms(self) -> u32 {
        match self {
            Mode::Ms20 => 20,
            Mode::Ms30 => 30,
        }
    }

    /// Samples per frame at 8 kHz.
    pub fn samples(self) -> usize {
        match self {
            Mode::Ms20 => 160,
            Mode::Ms30 => 240,
        }
    }

    /// Bytes per frame.
    pub fn bytes(self) -> usize {
        match self {
            Mode::Ms20 => 38,
            Mode::Ms30 => 50,
        }
    }

    fn nsub(self) -> usize {
        self.samples() / SUBL
    }

    /// LSF sets per frame.
    fn lpc_n(self) -> usize {
        match self {
            Mode::Ms20 => 1,
            Mode::Ms30 => 2,
        }
    }

    /// Samples of the start state coded by scalar quantisation.
    fn state_short_len(self) -> usize {
        match self {
            Mode::Ms20 => 57,
            Mode::Ms30 => 58,
        }
    }
}

#[cfg(test)]
mod tests;

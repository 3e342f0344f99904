//! spandsp's G.722 and G.726, which strowger linked for those formats before its own
//! ([`crate::g722`], [`crate::g726`]): kept as the reference the Rust codecs are tested
//! bit-exact against and benchmarked against (`cargo run --release -p codec --example codec_speed`).

use std::ffi::c_int;
use std::ptr;

use crate::ffi::{self, Opaque};

macro_rules! state {
    ($(#[$doc:meta])* $name:ident, $free:path) => {
        $(#[$doc])*
        pub struct $name(*mut Opaque);
        // SAFETY: spandsp states are plain heap structs owned by this value.
        unsafe impl Send for $name {}
        impl Drop for $name {
            fn drop(&mut self) {
                // SAFETY: allocated by the matching init(NULL, ...), freed once.
                unsafe {
                    $free(self.0);
                }
            }
        }
    };
}

state!(
    /// spandsp's G.722 encoder at 64 kbit/s, 16 kHz, one code word per byte.
    G722Encoder,
    ffi::g722_encode_free
);
state!(
    /// spandsp's G.722 decoder at 64 kbit/s, 16 kHz.
    G722Decoder,
    ffi::g722_decode_free
);
/// spandsp's G.726 (linear PCM, RFC 3551 packing) and its bits per code word; one per direction.
pub struct G726(*mut Opaque, usize);
// SAFETY: as for the G.722 states.
unsafe impl Send for G726 {}
impl Drop for G726 {
    fn drop(&mut self) {
        // SAFETY: allocated by g726_init(NULL, ...), freed once.
        unsafe {
            ffi::g726_free(self.0);
        }
    }
}

impl Default for G722Encoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Default for G722Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl G722Encoder {
    pub fn new() -> G722Encoder {
        // SAFETY: a NULL state asks spandsp to allocate one.
        let s = unsafe { ffi::g722_encode_init(ptr::null_mut(), 64000, 0) };
        assert!(!s.is_null());
        G722Encoder(s)
    }

    /// `out` must hold `pcm.len() / 2` bytes.
    pub fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> usize {
        assert!(out.len() >= pcm.len() / 2);
        // SAFETY: len samples in, len/2 bytes out (checked above).
        let n =
            unsafe { ffi::g722_encode(self.0, out.as_mut_ptr(), pcm.as_ptr(), pcm.len() as c_int) };
        n as usize
    }
}

impl G722Decoder {
    pub fn new() -> G722Decoder {
        // SAFETY: as above.
        let s = unsafe { ffi::g722_decode_init(ptr::null_mut(), 64000, 0) };
        assert!(!s.is_null());
        G722Decoder(s)
    }

    /// `out` must hold `2 * payload.len()` samples.
    pub fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        assert!(out.len() >= 2 * payload.len());
        // SAFETY: 2 samples out per byte in; `out` has room.
        let n = unsafe {
            ffi::g722_decode(
                self.0,
                out.as_mut_ptr(),
                payload.as_ptr(),
                payload.len() as c_int,
            )
        };
        n as usize
    }
}

impl G726 {
    /// `bit_rate`: 16000, 24000, 32000 or 40000.
    pub fn new(bit_rate: u32) -> G726 {
        // SAFETY: as above.
        let s = unsafe {
            ffi::g726_init(
                ptr::null_mut(),
                bit_rate as c_int,
                ffi::G726_ENCODING_LINEAR,
                ffi::G726_PACKING_RIGHT,
            )
        };
        assert!(!s.is_null(), "g726_init({bit_rate})");
        G726(s, bit_rate as usize / 8000)
    }

    /// `out` must hold the bytes of `pcm.len()` code words, rounded up.
    pub fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> usize {
        assert!(out.len() >= (pcm.len() * self.1).div_ceil(8));
        // SAFETY: at most that many bytes out (checked above).
        let n =
            unsafe { ffi::g726_encode(self.0, out.as_mut_ptr(), pcm.as_ptr(), pcm.len() as c_int) };
        n as usize
    }

    /// `out` must hold the code words in `payload` and one left over from before.
    pub fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> usize {
        assert!(out.len() > 8 * payload.len() / self.1);
        // SAFETY: at most that many samples out (checked above).
        let n = unsafe {
            ffi::g726_decode(
                self.0,
                out.as_mut_ptr(),
                payload.as_ptr(),
                payload.len() as c_int,
            )
        };
        n as usize
    }
}

//! libgsm's GSM 06.10, which strowger linked for GSM before its own ([`crate::gsm`]): kept as
//! the reference the Rust codec is tested bit-exact against and benchmarked against
//! (`cargo run --release -p codec --example codec_speed`).

use crate::ffi::{self, Opaque};
use crate::gsm::{BadSignature, FRAME_BYTES, FRAME_SAMPLES};

/// One libgsm state; as in strowger's use of it, one per direction.
pub struct Libgsm(*mut Opaque);
// SAFETY: the state is owned by this value alone and libgsm keeps no globals.
unsafe impl Send for Libgsm {}

impl Libgsm {
    pub fn new() -> Libgsm {
        // SAFETY: plain constructor; null only on allocation failure.
        let g = unsafe { ffi::gsm_create() };
        assert!(!g.is_null(), "gsm_create failed");
        Libgsm(g)
    }

    pub fn encode(&mut self, pcm: &[i16; FRAME_SAMPLES], out: &mut [u8; FRAME_BYTES]) {
        // SAFETY: 160 samples in, 33 bytes out, as gsm_encode requires.
        unsafe { ffi::gsm_encode(self.0, pcm.as_ptr(), out.as_mut_ptr()) }
    }

    pub fn decode(
        &mut self,
        frame: &[u8; FRAME_BYTES],
        out: &mut [i16; FRAME_SAMPLES],
    ) -> Result<(), BadSignature> {
        // SAFETY: 33 bytes in, 160 samples out.
        match unsafe { ffi::gsm_decode(self.0, frame.as_ptr(), out.as_mut_ptr()) } {
            0 => Ok(()),
            _ => Err(BadSignature),
        }
    }
}

impl Default for Libgsm {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Libgsm {
    fn drop(&mut self) {
        // SAFETY: created by gsm_create, destroyed once.
        unsafe { ffi::gsm_destroy(self.0) }
    }
}

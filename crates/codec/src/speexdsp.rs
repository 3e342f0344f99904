//! libspeexdsp's resampler, which strowger converted 8, 16 and 48 kHz audio with before its own
//! ([`crate::resample`]): kept as the reference that one is measured against, in its tests
//! (passband, stopband) and in `codec_speed` (CPU).

use std::ffi::c_int;

use crate::ffi::{self, Opaque};

/// Quality 0-10 of the speexdsp resampler; 3 is its VoIP setting, the one strowger used.
pub const QUALITY: c_int = 3;

/// A stateful mono resampler: feed it consecutive blocks of one stream.
pub struct Resampler {
    state: *mut Opaque,
}
// SAFETY: the state is owned by this value only.
unsafe impl Send for Resampler {}

impl Resampler {
    pub fn new(from: u32, to: u32) -> Resampler {
        let mut err = 0;
        // SAFETY: plain constructor; err receives the status.
        let state = unsafe { ffi::speex_resampler_init(1, from, to, QUALITY, &mut err) };
        assert!(
            !state.is_null() && err == 0,
            "resampler {from}->{to}: {err}"
        );
        Resampler { state }
    }

    /// Converts as much of `input` as `out` has room for; returns samples written to `out`.
    pub fn process(&mut self, input: &[i16], out: &mut [i16]) -> usize {
        let mut in_len = input.len() as u32;
        let mut out_len = out.len() as u32;
        // SAFETY: lengths describe the buffers; speexdsp updates them to what it used.
        unsafe {
            ffi::speex_resampler_process_int(
                self.state,
                0,
                input.as_ptr(),
                &mut in_len,
                out.as_mut_ptr(),
                &mut out_len,
            )
        };
        out_len as usize
    }
}

impl Drop for Resampler {
    fn drop(&mut self) {
        // SAFETY: created by speex_resampler_init.
        unsafe { ffi::speex_resampler_destroy(self.state) }
    }
}

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
    from: u32,
    to: u32,
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
        Resampler { state, from, to }
    }

    /// A resampler without the filter's leading delay (for whole files: the
    /// output lines up with the input but comes out shorter by that delay).
    pub fn new_aligned(from: u32, to: u32) -> Resampler {
        let r = Resampler::new(from, to);
        // SAFETY: valid state.
        unsafe { ffi::speex_resampler_skip_zeros(r.state) };
        r
    }

    pub fn rates(&self) -> (u32, u32) {
        (self.from, self.to)
    }

    /// Output samples produced for `n` input samples (at most).
    pub fn output_len(&self, n: usize) -> usize {
        (n as u64 * self.to as u64).div_ceil(self.from as u64) as usize
    }

    /// Converts all of `input`; returns samples written to `out`
    /// (which should hold [`Resampler::output_len`]).
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

    /// Convenience for whole buffers (files, prompts).
    pub fn process_vec(&mut self, input: &[i16]) -> Vec<i16> {
        let mut out = vec![0; self.output_len(input.len()) + 64];
        let mut done = 0;
        for chunk in input.chunks(4096) {
            done += self.process(chunk, &mut out[done..]);
        }
        out.truncate(done);
        out
    }
}

impl Drop for Resampler {
    fn drop(&mut self) {
        // SAFETY: created by speex_resampler_init.
        unsafe { ffi::speex_resampler_destroy(self.state) }
    }
}

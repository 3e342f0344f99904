//! Hand-written declarations of the few C functions used from libspeex, libspeexdsp, libopus
//! (and bcg729 with the `g729` feature), and from libgsm and spandsp, the references of the
//! Rust GSM, G.722 and G.726.
//! Every state pointer is owned by exactly one Rust value, which frees it on drop.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

#[repr(C)]
pub struct Opaque {
    _p: [u8; 0],
}

// libgsm
extern "C" {
    pub fn gsm_create() -> *mut Opaque;
    pub fn gsm_destroy(g: *mut Opaque);
    pub fn gsm_encode(g: *mut Opaque, src: *const i16, dst: *mut u8);
    pub fn gsm_decode(g: *mut Opaque, src: *const u8, dst: *mut i16) -> c_int;
}

// spandsp
pub const G726_ENCODING_LINEAR: c_int = 0;
/// RFC 3551 §4.5.4 bit order: the first code word in the least significant bits.
pub const G726_PACKING_RIGHT: c_int = 2;
extern "C" {
    pub fn g722_encode_init(s: *mut Opaque, rate: c_int, options: c_int) -> *mut Opaque;
    pub fn g722_encode_free(s: *mut Opaque) -> c_int;
    pub fn g722_encode(s: *mut Opaque, out: *mut u8, amp: *const i16, len: c_int) -> c_int;
    pub fn g722_decode_init(s: *mut Opaque, rate: c_int, options: c_int) -> *mut Opaque;
    pub fn g722_decode_free(s: *mut Opaque) -> c_int;
    pub fn g722_decode(s: *mut Opaque, amp: *mut i16, data: *const u8, len: c_int) -> c_int;
    pub fn g726_init(s: *mut Opaque, bit_rate: c_int, ext: c_int, packing: c_int) -> *mut Opaque;
    pub fn g726_free(s: *mut Opaque) -> c_int;
    pub fn g726_encode(s: *mut Opaque, out: *mut u8, amp: *const i16, len: c_int) -> c_int;
    pub fn g726_decode(s: *mut Opaque, amp: *mut i16, data: *const u8, len: c_int) -> c_int;
}

// libspeex
#[repr(C)]
pub struct SpeexBits {
    pub chars: *mut c_char,
    pub nb_bits: c_int,
    pub char_ptr: c_int,
    pub bit_ptr: c_int,
    pub owner: c_int,
    pub overflow: c_int,
    pub buf_size: c_int,
    pub reserved1: c_int,
    pub reserved2: *mut c_void,
}
pub const SPEEX_SET_ENH: c_int = 0;
pub const SPEEX_SET_QUALITY: c_int = 4;
pub const SPEEX_SET_COMPLEXITY: c_int = 16;
extern "C" {
    pub fn speex_lib_get_mode(mode: c_int) -> *const c_void;
    pub fn speex_encoder_init(mode: *const c_void) -> *mut Opaque;
    pub fn speex_encoder_destroy(s: *mut Opaque);
    pub fn speex_encoder_ctl(s: *mut Opaque, request: c_int, ptr: *mut c_void) -> c_int;
    pub fn speex_encode_int(s: *mut Opaque, pcm: *mut i16, bits: *mut SpeexBits) -> c_int;
    pub fn speex_decoder_init(mode: *const c_void) -> *mut Opaque;
    pub fn speex_decoder_destroy(s: *mut Opaque);
    pub fn speex_decoder_ctl(s: *mut Opaque, request: c_int, ptr: *mut c_void) -> c_int;
    pub fn speex_decode_int(s: *mut Opaque, bits: *mut SpeexBits, pcm: *mut i16) -> c_int;
    pub fn speex_bits_init(bits: *mut SpeexBits);
    pub fn speex_bits_destroy(bits: *mut SpeexBits);
    pub fn speex_bits_reset(bits: *mut SpeexBits);
    pub fn speex_bits_write(bits: *mut SpeexBits, out: *mut c_char, max: c_int) -> c_int;
    pub fn speex_bits_read_from(bits: *mut SpeexBits, data: *const c_char, len: c_int);
    pub fn speex_bits_remaining(bits: *mut SpeexBits) -> c_int;
    pub fn speex_bits_insert_terminator(bits: *mut SpeexBits);
}

// libspeexdsp
extern "C" {
    pub fn speex_resampler_init(
        channels: u32,
        in_rate: u32,
        out_rate: u32,
        quality: c_int,
        err: *mut c_int,
    ) -> *mut Opaque;
    pub fn speex_resampler_destroy(s: *mut Opaque);
    pub fn speex_resampler_process_int(
        s: *mut Opaque,
        channel: u32,
        input: *const i16,
        in_len: *mut u32,
        out: *mut i16,
        out_len: *mut u32,
    ) -> c_int;
}

// libopus
pub const OPUS_APPLICATION_VOIP: c_int = 2048;
pub const OPUS_SET_BITRATE_REQUEST: c_int = 4002;
pub const OPUS_SET_COMPLEXITY_REQUEST: c_int = 4010;
pub const OPUS_SET_INBAND_FEC_REQUEST: c_int = 4012;
pub const OPUS_SET_PACKET_LOSS_PERC_REQUEST: c_int = 4014;
pub const OPUS_SET_DTX_REQUEST: c_int = 4016;
#[cfg(test)]
pub const OPUS_GET_BITRATE_REQUEST: c_int = 4003;
pub const OPUS_SET_MAX_BANDWIDTH_REQUEST: c_int = 4004;
#[cfg(test)]
pub const OPUS_GET_MAX_BANDWIDTH_REQUEST: c_int = 4005;
#[cfg(test)]
pub const OPUS_GET_COMPLEXITY_REQUEST: c_int = 4011;
#[cfg(test)]
pub const OPUS_GET_INBAND_FEC_REQUEST: c_int = 4013;
#[cfg(test)]
pub const OPUS_GET_DTX_REQUEST: c_int = 4017;
pub const OPUS_BANDWIDTH_NARROWBAND: c_int = 1101;
extern "C" {
    pub fn opus_encoder_create(
        fs: i32,
        channels: c_int,
        app: c_int,
        err: *mut c_int,
    ) -> *mut Opaque;
    pub fn opus_encoder_destroy(s: *mut Opaque);
    pub fn opus_encoder_ctl(s: *mut Opaque, request: c_int, ...) -> c_int;
    pub fn opus_encode(
        s: *mut Opaque,
        pcm: *const i16,
        frame_size: c_int,
        data: *mut u8,
        max: i32,
    ) -> i32;
    pub fn opus_decoder_create(fs: i32, channels: c_int, err: *mut c_int) -> *mut Opaque;
    pub fn opus_decoder_destroy(s: *mut Opaque);
    pub fn opus_decode(
        s: *mut Opaque,
        data: *const u8,
        len: i32,
        pcm: *mut i16,
        frame_size: c_int,
        decode_fec: c_int,
    ) -> c_int;
}

// bcg729 (GPL): only with the `g729` feature.
#[cfg(feature = "g729")]
extern "C" {
    pub fn initBcg729EncoderChannel(vad: u8) -> *mut Opaque;
    pub fn closeBcg729EncoderChannel(s: *mut Opaque);
    pub fn bcg729Encoder(s: *mut Opaque, pcm: *const i16, out: *mut u8, out_len: *mut u8);
    pub fn initBcg729DecoderChannel() -> *mut Opaque;
    pub fn closeBcg729DecoderChannel(s: *mut Opaque);
    pub fn bcg729Decoder(
        s: *mut Opaque,
        data: *const u8,
        len: u8,
        erasure: u8,
        sid: u8,
        rfc3389: u8,
        pcm: *mut i16,
    );
}

// The thread's CPU clock, for the translation cost measurements.
#[repr(C)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: i64,
}
pub const CLOCK_THREAD_CPUTIME_ID: c_int = 3;
extern "C" {
    pub fn clock_gettime(clock: c_int, tp: *mut Timespec) -> c_int;
}

//! Stateful encoders and decoders for every [`Format`], in Rust or over the system libraries.

use std::ffi::{c_char, c_int, c_void};
use std::fmt;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::RwLock;

use crate::ffi::{self, Opaque};
use crate::g722::{G722Decoder, G722Encoder};
use crate::g726::{G726Decoder, G726Encoder, Rate};
use crate::gsm::{GsmDecoder, GsmEncoder, FRAME_BYTES, FRAME_SAMPLES};
use crate::ilbc::{IlbcDecoder, IlbcEncoder, Mode};
use crate::{Format, G711};

/// Why a frame could not be coded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// Input is not a whole number of frames, or a buffer is too small.
    BadLength { what: &'static str, len: usize },
    /// The payload does not decode (corrupt or truncated).
    Corrupt(&'static str),
    /// The library refused (code returned by it).
    Library(&'static str, i32),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::BadLength { what, len } => write!(f, "{what}: bad length {len}"),
            CodecError::Corrupt(c) => write!(f, "{c}: corrupt payload"),
            CodecError::Library(c, e) => write!(f, "{c}: library error {e}"),
        }
    }
}

impl std::error::Error for CodecError {}

/// Linear PCM to one RTP payload. Stateful: one per stream.
pub trait Encoder: Send {
    fn format(&self) -> Format;
    /// Encodes `pcm` (a multiple of [`Format::frame_samples`]; for Opus one
    /// 10/20/40/60 ms packet) into `out`; returns bytes written.
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError>;
}

/// One RTP payload to linear PCM. Stateful: one per stream.
pub trait Decoder: Send {
    fn format(&self) -> Format;
    /// Decodes a whole payload into `out`; returns samples written.
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError>;
    /// Fills `out` for a lost packet (the codec's concealment where it has one).
    fn conceal(&mut self, out: &mut [i16]) -> usize {
        out.fill(0);
        out.len()
    }
}

impl Format {
    /// A new encoder at the process's settings ([`set_speex_quality`], [`set_opus_options`]).
    pub fn encoder(self) -> Box<dyn Encoder> {
        match self {
            Format::Pcmu => Box::new(G711Codec(G711::Pcmu)),
            Format::Pcma => Box::new(G711Codec(G711::Pcma)),
            Format::L16 | Format::L16Wide => Box::new(L16(self)),
            Format::Gsm => Box::new(GsmEncoder::new()),
            Format::G722 => Box::new(G722Encoder::new()),
            Format::G726 => Box::new(G726Encoder::new(Rate::Kbps32)),
            Format::Speex | Format::Speex16 => {
                Box::new(SpeexEnc::new(self, SPEEX_QUALITY.load(Ordering::Relaxed)))
            }
            Format::Opus => Box::new(opus_encoder(48000, opus_options(), false)),
            Format::Ilbc20 | Format::Ilbc30 => Box::new(IlbcEnc(IlbcEncoder::new(ilbc_mode(self)))),
            #[cfg(feature = "g729")]
            Format::G729 => Box::new(g729::Enc::new()),
        }
    }

    /// Which implementation codes this format and at what settings, as encoders are made now
    /// (`strowger show translation` prints it next to the costs it measured with them).
    pub fn implementation(self) -> String {
        match self {
            Format::Speex | Format::Speex16 => format!(
                "libspeex, quality {}",
                SPEEX_QUALITY.load(Ordering::Relaxed)
            ),
            Format::Opus => {
                let o = opus_options();
                format!(
                    "libopus, {} kbit/s, complexity {}, fec {}, dtx {}",
                    f64::from(o.bitrate) / 1000.0,
                    o.complexity,
                    on_off(o.fec),
                    on_off(o.dtx)
                )
            }
            Format::G722 => "rust, 64 kbit/s".into(),
            Format::G726 => "rust, 32 kbit/s".into(),
            #[cfg(feature = "g729")]
            Format::G729 => "bcg729".into(),
            _ => "rust".into(),
        }
    }

    /// A new encoder of linear audio at `rate` (one of [`Format::pcm_rates`]) that comes from a
    /// `source_rate` Hz source. Opus codes at `rate`, and when that is above a narrowband (8 kHz)
    /// source's it is held to narrowband, so it spends neither bits nor CPU on upper bands that
    /// are empty (RFC 7587 §4.1: any internal rate and bandwidth under the 48 kHz RTP clock).
    pub fn encoder_at(self, rate: u32, source_rate: u32) -> Box<dyn Encoder> {
        debug_assert!(self.pcm_rates().contains(&rate), "{self} at {rate} Hz");
        match self {
            Format::Opus => Box::new(opus_encoder(rate, opus_options(), source_rate <= 8000)),
            _ => self.encoder(),
        }
    }

    /// A new decoder giving linear audio at `rate` (one of [`Format::pcm_rates`]).
    pub fn decoder_at(self, rate: u32) -> Box<dyn Decoder> {
        debug_assert!(self.pcm_rates().contains(&rate), "{self} at {rate} Hz");
        match self {
            Format::Opus => Box::new(OpusDec::with_rate(rate).expect("opus decoder")),
            _ => self.decoder(),
        }
    }

    /// A new decoder.
    pub fn decoder(self) -> Box<dyn Decoder> {
        match self {
            Format::Pcmu => Box::new(G711Codec(G711::Pcmu)),
            Format::Pcma => Box::new(G711Codec(G711::Pcma)),
            Format::L16 | Format::L16Wide => Box::new(L16(self)),
            Format::Gsm => Box::new(GsmDecoder::new()),
            Format::G722 => Box::new(G722Decoder::new()),
            Format::G726 => Box::new(G726Decoder::new(Rate::Kbps32)),
            Format::Speex | Format::Speex16 => Box::new(SpeexDec::new(self)),
            Format::Opus => Box::new(OpusDec::new().expect("opus decoder")),
            Format::Ilbc20 | Format::Ilbc30 => Box::new(IlbcDec(IlbcDecoder::new(ilbc_mode(self)))),
            #[cfg(feature = "g729")]
            Format::G729 => Box::new(g729::Dec::new()),
        }
    }
}

fn whole(pcm: &[i16], f: Format, out: &[u8]) -> Result<usize, CodecError> {
    let frames = pcm.len() / f.frame_samples();
    if !pcm.len().is_multiple_of(f.frame_samples()) || out.len() < f.max_encoded_len(pcm.len()) {
        return Err(CodecError::BadLength {
            what: f.name(),
            len: pcm.len(),
        });
    }
    Ok(frames)
}

fn short(f: Format, len: usize) -> CodecError {
    CodecError::BadLength {
        what: f.name(),
        len,
    }
}

struct G711Codec(G711);

impl Encoder for G711Codec {
    fn format(&self) -> Format {
        match self.0 {
            G711::Pcmu => Format::Pcmu,
            G711::Pcma => Format::Pcma,
        }
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        whole(pcm, Encoder::format(self), out)?;
        Ok(crate::Codec::encode(&self.0, pcm, out))
    }
}

impl Decoder for G711Codec {
    fn format(&self) -> Format {
        Encoder::format(self)
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        if out.len() < payload.len() {
            return Err(short(Decoder::format(self), out.len()));
        }
        Ok(crate::Codec::decode(&self.0, payload, out))
    }
}

/// L16: network byte order (RFC 3551 §4.5.11).
struct L16(Format);

impl Encoder for L16 {
    fn format(&self) -> Format {
        self.0
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        whole(pcm, self.0, out)?;
        for (o, s) in out.chunks_exact_mut(2).zip(pcm) {
            o.copy_from_slice(&s.to_be_bytes());
        }
        Ok(2 * pcm.len())
    }
}

impl Decoder for L16 {
    fn format(&self) -> Format {
        self.0
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        let n = payload.len() / 2;
        if !payload.len().is_multiple_of(2) || out.len() < n {
            return Err(short(self.0, payload.len()));
        }
        for (o, b) in out.iter_mut().zip(payload.chunks_exact(2)) {
            *o = i16::from_be_bytes([b[0], b[1]]);
        }
        Ok(n)
    }
}

impl Encoder for GsmEncoder {
    fn format(&self) -> Format {
        Format::Gsm
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        let frames = whole(pcm, Format::Gsm, out)?;
        for (i, o) in pcm
            .chunks_exact(FRAME_SAMPLES)
            .zip(out.chunks_exact_mut(FRAME_BYTES))
        {
            GsmEncoder::encode(self, i.try_into().unwrap(), o.try_into().unwrap());
        }
        Ok(FRAME_BYTES * frames)
    }
}

impl Decoder for GsmDecoder {
    fn format(&self) -> Format {
        Format::Gsm
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        let frames = payload.len() / FRAME_BYTES;
        if !payload.len().is_multiple_of(FRAME_BYTES) || out.len() < FRAME_SAMPLES * frames {
            return Err(short(Format::Gsm, payload.len()));
        }
        for (i, o) in payload
            .chunks_exact(FRAME_BYTES)
            .zip(out.chunks_exact_mut(FRAME_SAMPLES))
        {
            GsmDecoder::decode(self, i.try_into().unwrap(), o.try_into().unwrap())
                .map_err(|_| CodecError::Corrupt("gsm"))?;
        }
        Ok(FRAME_SAMPLES * frames)
    }
}

impl Encoder for G722Encoder {
    fn format(&self) -> Format {
        Format::G722
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        whole(pcm, Format::G722, out)?;
        Ok(G722Encoder::encode(self, pcm, out))
    }
}

impl Decoder for G722Decoder {
    fn format(&self) -> Format {
        Format::G722
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        if out.len() < 2 * payload.len() {
            return Err(short(Format::G722, payload.len()));
        }
        Ok(G722Decoder::decode(self, payload, out))
    }
}

impl Encoder for G726Encoder {
    fn format(&self) -> Format {
        Format::G726
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        whole(pcm, Format::G726, out)?;
        Ok(G726Encoder::encode(self, pcm, out))
    }
}

impl Decoder for G726Decoder {
    fn format(&self) -> Format {
        Format::G726
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        if out.len() < self.samples_in(payload.len()) {
            return Err(short(Format::G726, payload.len()));
        }
        Ok(G726Decoder::decode(self, payload, out))
    }
}

fn speex_mode(f: Format) -> *const c_void {
    // SAFETY: returns a pointer to a static mode table (0 narrowband, 1 wideband).
    unsafe { ffi::speex_lib_get_mode(if f == Format::Speex16 { 1 } else { 0 }) }
}

struct SpeexBits(Box<ffi::SpeexBits>);

impl SpeexBits {
    fn new() -> SpeexBits {
        let mut b = Box::new(ffi::SpeexBits {
            chars: ptr::null_mut(),
            nb_bits: 0,
            char_ptr: 0,
            bit_ptr: 0,
            owner: 0,
            overflow: 0,
            buf_size: 0,
            reserved1: 0,
            reserved2: ptr::null_mut(),
        });
        // SAFETY: initialises the struct in place (allocates its buffer).
        unsafe { ffi::speex_bits_init(&mut *b) };
        SpeexBits(b)
    }
}

impl Drop for SpeexBits {
    fn drop(&mut self) {
        // SAFETY: initialised by speex_bits_init.
        unsafe { ffi::speex_bits_destroy(&mut *self.0) }
    }
}

struct SpeexEnc {
    format: Format,
    state: *mut Opaque,
    bits: SpeexBits,
    scratch: Vec<i16>,
}
// SAFETY: state and bits are owned by this value only.
unsafe impl Send for SpeexEnc {}

/// Speex encoder quality for every encoder made from here on (0-10; 8 is 15 kbit/s narrowband).
static SPEEX_QUALITY: AtomicI32 = AtomicI32::new(8);

/// Sets the quality of Speex encoders made from now on (clamped to 0-10). Process-wide, like
/// Asterisk's codecs.conf: the server sets it from its configuration before its first call.
pub fn set_speex_quality(quality: u8) {
    SPEEX_QUALITY.store(quality.min(10) as i32, Ordering::Relaxed);
}

impl SpeexEnc {
    /// `quality` 0-10 (8 is 15 kbit/s narrowband, 23.8 kbit/s wideband).
    fn new(format: Format, quality: c_int) -> SpeexEnc {
        // SAFETY: a mode from speex_lib_get_mode; ctl arguments are ints.
        let state = unsafe { ffi::speex_encoder_init(speex_mode(format)) };
        assert!(!state.is_null());
        let mut q = quality;
        let mut complexity: c_int = 2;
        // SAFETY: SET_QUALITY and SET_COMPLEXITY take an int*.
        unsafe {
            ffi::speex_encoder_ctl(state, ffi::SPEEX_SET_QUALITY, &mut q as *mut _ as _);
            ffi::speex_encoder_ctl(
                state,
                ffi::SPEEX_SET_COMPLEXITY,
                &mut complexity as *mut _ as _,
            );
        }
        SpeexEnc {
            format,
            state,
            bits: SpeexBits::new(),
            scratch: vec![0; format.frame_samples()],
        }
    }
}

impl Drop for SpeexEnc {
    fn drop(&mut self) {
        // SAFETY: created by speex_encoder_init.
        unsafe { ffi::speex_encoder_destroy(self.state) }
    }
}

impl Encoder for SpeexEnc {
    fn format(&self) -> Format {
        self.format
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        whole(pcm, self.format, out)?;
        let bits = &mut *self.bits.0;
        // SAFETY: bits initialised; frames are exactly frame_size samples
        // (copied, as speex_encode_int may write to its input).
        unsafe {
            ffi::speex_bits_reset(bits);
            for frame in pcm.chunks_exact(self.format.frame_samples()) {
                self.scratch.copy_from_slice(frame);
                ffi::speex_encode_int(self.state, self.scratch.as_mut_ptr(), bits);
            }
            ffi::speex_bits_insert_terminator(bits);
            let n =
                ffi::speex_bits_write(bits, out.as_mut_ptr() as *mut c_char, out.len() as c_int);
            Ok(n as usize)
        }
    }
}

struct SpeexDec {
    format: Format,
    state: *mut Opaque,
    bits: SpeexBits,
}
// SAFETY: as for SpeexEnc.
unsafe impl Send for SpeexDec {}

impl SpeexDec {
    fn new(format: Format) -> SpeexDec {
        // SAFETY: as for the encoder; SET_ENH takes an int*.
        let state = unsafe { ffi::speex_decoder_init(speex_mode(format)) };
        assert!(!state.is_null());
        let mut enh: c_int = 1;
        unsafe { ffi::speex_decoder_ctl(state, ffi::SPEEX_SET_ENH, &mut enh as *mut _ as _) };
        SpeexDec {
            format,
            state,
            bits: SpeexBits::new(),
        }
    }
}

impl Drop for SpeexDec {
    fn drop(&mut self) {
        // SAFETY: created by speex_decoder_init.
        unsafe { ffi::speex_decoder_destroy(self.state) }
    }
}

impl Decoder for SpeexDec {
    fn format(&self) -> Format {
        self.format
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        let fs = self.format.frame_samples();
        let bits = &mut *self.bits.0;
        let mut n = 0;
        // SAFETY: bits initialised; each decode writes one frame into a slot of `out`.
        unsafe {
            ffi::speex_bits_read_from(
                bits,
                payload.as_ptr() as *const c_char,
                payload.len() as c_int,
            );
            while ffi::speex_bits_remaining(bits) >= 5 {
                if n + fs > out.len() {
                    return Err(short(self.format, payload.len()));
                }
                match ffi::speex_decode_int(self.state, bits, out[n..].as_mut_ptr()) {
                    0 => n += fs,
                    -1 => break,
                    _ => return Err(CodecError::Corrupt("speex")),
                }
            }
        }
        if n == 0 && !payload.is_empty() {
            return Err(CodecError::Corrupt("speex"));
        }
        Ok(n)
    }
    fn conceal(&mut self, out: &mut [i16]) -> usize {
        let fs = self.format.frame_samples();
        let mut n = 0;
        while n + fs <= out.len() {
            // SAFETY: NULL bits asks for packet-loss concealment of one frame.
            unsafe { ffi::speex_decode_int(self.state, ptr::null_mut(), out[n..].as_mut_ptr()) };
            n += fs;
        }
        out[n..].fill(0);
        out.len()
    }
}

/// Opus encoder settings (RFC 7587 §3.1: FEC and DTX are the sender's choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpusOptions {
    /// In-band forward error correction (LBRR).
    pub fec: bool,
    /// Discontinuous transmission: near-silent frames become 1-2 bytes.
    pub dtx: bool,
    /// Target bit rate in bit/s.
    pub bitrate: i32,
    /// 0-10.
    pub complexity: i32,
    /// Expected loss percentage (FEC strength).
    pub loss_percent: i32,
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// An RTP Opus encoder of `rate` Hz audio at `o`, held to narrowband when `narrow`.
fn opus_encoder(rate: u32, o: OpusOptions, narrow: bool) -> OpusEnc {
    let mut e = OpusEnc::with_layout(rate, 1, o).expect("opus encoder");
    if narrow {
        e.narrowband().expect("opus narrowband");
    }
    e
}

/// Opus settings of every RTP encoder made from here on (the configuration's `rtp.opus_*`).
static OPUS_OPTIONS: RwLock<OpusOptions> = RwLock::new(OpusOptions::DEFAULT);

/// Sets the Opus encoder settings of encoders made from now on. Process-wide, like
/// [`set_speex_quality`]: the server sets it from its configuration before its first call.
pub fn set_opus_options(o: OpusOptions) {
    *OPUS_OPTIONS.write().unwrap_or_else(|e| e.into_inner()) = o;
}

/// The settings [`Format::encoder`] gives Opus encoders now.
pub fn opus_options() -> OpusOptions {
    *OPUS_OPTIONS.read().unwrap_or_else(|e| e.into_inner())
}

impl OpusOptions {
    const DEFAULT: OpusOptions = OpusOptions {
        fec: true,
        dtx: false,
        bitrate: 24000,
        complexity: 5,
        loss_percent: 5,
    };
}

impl Default for OpusOptions {
    fn default() -> Self {
        OpusOptions::DEFAULT
    }
}

/// Opus, VoIP application: 48 kHz mono for RTP, any Opus rate and one or two channels for
/// files (call recordings). Also holds the channels and the input rate, to check frame sizes.
pub struct OpusEnc(*mut Opaque, usize, usize);
// SAFETY: owned state.
unsafe impl Send for OpusEnc {}

impl OpusEnc {
    pub fn new(o: OpusOptions) -> Result<OpusEnc, CodecError> {
        Self::with_layout(48000, 1, o)
    }

    /// An encoder of `channels` interleaved channels at `rate` (8, 12, 16, 24 or 48 kHz).
    pub fn with_layout(rate: u32, channels: u8, o: OpusOptions) -> Result<OpusEnc, CodecError> {
        let mut err = 0;
        // SAFETY: plain constructor; err receives the status.
        let s = unsafe {
            ffi::opus_encoder_create(
                rate as i32,
                c_int::from(channels),
                ffi::OPUS_APPLICATION_VOIP,
                &mut err,
            )
        };
        if s.is_null() || err != 0 {
            return Err(CodecError::Library("opus", err));
        }
        let enc = OpusEnc(s, usize::from(channels), rate as usize);
        for (req, v) in [
            (ffi::OPUS_SET_BITRATE_REQUEST, o.bitrate),
            (ffi::OPUS_SET_COMPLEXITY_REQUEST, o.complexity),
            (ffi::OPUS_SET_INBAND_FEC_REQUEST, o.fec as i32),
            (ffi::OPUS_SET_DTX_REQUEST, o.dtx as i32),
            (ffi::OPUS_SET_PACKET_LOSS_PERC_REQUEST, o.loss_percent),
        ] {
            // SAFETY: these SET requests take one opus_int32 argument.
            let r = unsafe { ffi::opus_encoder_ctl(enc.0, req, v) };
            if r != 0 {
                return Err(CodecError::Library("opus ctl", r));
            }
        }
        Ok(enc)
    }

    /// Holds the encoder to narrowband (4 kHz audio), for input that has nothing above it.
    pub fn narrowband(&mut self) -> Result<(), CodecError> {
        let b = ffi::OPUS_BANDWIDTH_NARROWBAND;
        // SAFETY: SET_MAX_BANDWIDTH takes one opus_int32 argument.
        match unsafe { ffi::opus_encoder_ctl(self.0, ffi::OPUS_SET_MAX_BANDWIDTH_REQUEST, b) } {
            0 => Ok(()),
            r => Err(CodecError::Library("opus ctl", r)),
        }
    }

    /// The value of an `OPUS_GET_*` request: what the library holds.
    #[cfg(test)]
    fn get(&self, request: i32) -> Result<i32, CodecError> {
        let mut v: i32 = 0;
        // SAFETY: GET requests take one opus_int32* argument.
        match unsafe { ffi::opus_encoder_ctl(self.0, request, &mut v as *mut i32) } {
            0 => Ok(v),
            r => Err(CodecError::Library("opus ctl", r)),
        }
    }
}

impl Drop for OpusEnc {
    fn drop(&mut self) {
        // SAFETY: created by opus_encoder_create.
        unsafe { ffi::opus_encoder_destroy(self.0) }
    }
}

impl Encoder for OpusEnc {
    fn format(&self) -> Format {
        Format::Opus
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        // 10, 20, 40 or 60 ms of every channel.
        let frame = pcm.len() / self.1;
        let ms10 = self.2 / 100;
        if !pcm.len().is_multiple_of(self.1) || ![1, 2, 4, 6].map(|k| k * ms10).contains(&frame) {
            return Err(short(Format::Opus, pcm.len()));
        }
        // SAFETY: a valid frame size per channel; out.len() bounds the write.
        let n = unsafe {
            ffi::opus_encode(
                self.0,
                pcm.as_ptr(),
                frame as c_int,
                out.as_mut_ptr(),
                out.len() as i32,
            )
        };
        if n < 0 {
            return Err(CodecError::Library("opus", n));
        }
        Ok(n as usize)
    }
}

/// Opus to mono linear audio, at 48 kHz or any other Opus rate.
pub struct OpusDec(*mut Opaque);
// SAFETY: owned state.
unsafe impl Send for OpusDec {}

impl OpusDec {
    pub fn new() -> Result<OpusDec, CodecError> {
        Self::with_rate(48000)
    }

    /// A decoder giving `rate` Hz audio (8, 12, 16, 24 or 48 kHz), whatever rate the packets
    /// were coded at.
    pub fn with_rate(rate: u32) -> Result<OpusDec, CodecError> {
        let mut err = 0;
        // SAFETY: plain constructor.
        let s = unsafe { ffi::opus_decoder_create(rate as i32, 1, &mut err) };
        if s.is_null() || err != 0 {
            return Err(CodecError::Library("opus", err));
        }
        Ok(OpusDec(s))
    }

    /// Recovers a lost packet from the FEC data carried in the next one (`out`: the lost duration).
    pub fn decode_fec(&mut self, next: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        // SAFETY: out.len() samples of room; decode_fec = 1.
        let n = unsafe {
            ffi::opus_decode(
                self.0,
                next.as_ptr(),
                next.len() as i32,
                out.as_mut_ptr(),
                out.len() as c_int,
                1,
            )
        };
        if n < 0 {
            return Err(CodecError::Library("opus", n));
        }
        Ok(n as usize)
    }
}

impl Drop for OpusDec {
    fn drop(&mut self) {
        // SAFETY: created by opus_decoder_create.
        unsafe { ffi::opus_decoder_destroy(self.0) }
    }
}

impl Decoder for OpusDec {
    fn format(&self) -> Format {
        Format::Opus
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        // A packet has at least its TOC byte (RFC 6716 §3.4); libopus takes an empty one for a
        // lost packet and would conceal the whole of `out` (120 ms in the engine's buffer).
        if payload.is_empty() {
            return Err(CodecError::Corrupt("opus"));
        }
        // SAFETY: out.len() samples of room (opus never writes more than frame_size).
        let n = unsafe {
            ffi::opus_decode(
                self.0,
                payload.as_ptr(),
                payload.len() as i32,
                out.as_mut_ptr(),
                out.len() as c_int,
                0,
            )
        };
        if n < 0 {
            return Err(CodecError::Corrupt("opus"));
        }
        Ok(n as usize)
    }
    fn conceal(&mut self, out: &mut [i16]) -> usize {
        // SAFETY: NULL data asks for concealment of out.len() samples.
        let n = unsafe {
            ffi::opus_decode(
                self.0,
                ptr::null(),
                0,
                out.as_mut_ptr(),
                out.len() as c_int,
                0,
            )
        };
        if n < 0 {
            out.fill(0);
            return out.len();
        }
        n as usize
    }
}

#[cfg(feature = "g729")]
mod g729 {
    use super::*;

    pub(super) struct Enc(*mut Opaque);
    // SAFETY: owned state.
    unsafe impl Send for Enc {}
    impl Enc {
        pub(super) fn new() -> Enc {
            // SAFETY: constructor without VAD (annexb=no).
            Enc(unsafe { ffi::initBcg729EncoderChannel(0) })
        }
    }
    impl Drop for Enc {
        fn drop(&mut self) {
            // SAFETY: created by initBcg729EncoderChannel.
            unsafe { ffi::closeBcg729EncoderChannel(self.0) }
        }
    }
    impl Encoder for Enc {
        fn format(&self) -> Format {
            Format::G729
        }
        fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
            whole(pcm, Format::G729, out)?;
            let mut n = 0;
            for f in pcm.chunks_exact(80) {
                let mut len = 0u8;
                // SAFETY: 80 samples in, at most 10 bytes out.
                unsafe { ffi::bcg729Encoder(self.0, f.as_ptr(), out[n..].as_mut_ptr(), &mut len) };
                n += len as usize;
            }
            Ok(n)
        }
    }

    pub(super) struct Dec(*mut Opaque);
    // SAFETY: owned state.
    unsafe impl Send for Dec {}
    impl Dec {
        pub(super) fn new() -> Dec {
            // SAFETY: constructor.
            Dec(unsafe { ffi::initBcg729DecoderChannel() })
        }
    }
    impl Drop for Dec {
        fn drop(&mut self) {
            // SAFETY: created by initBcg729DecoderChannel.
            unsafe { ffi::closeBcg729DecoderChannel(self.0) }
        }
    }
    impl Decoder for Dec {
        fn format(&self) -> Format {
            Format::G729
        }
        fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
            let frames = payload.len() / 10;
            if out.len() < 80 * frames {
                return Err(short(Format::G729, payload.len()));
            }
            for (i, f) in payload.chunks_exact(10).enumerate() {
                // SAFETY: 10 bytes in, 80 samples out.
                unsafe {
                    ffi::bcg729Decoder(self.0, f.as_ptr(), 10, 0, 0, 0, out[80 * i..].as_mut_ptr())
                };
            }
            Ok(80 * frames)
        }
        fn conceal(&mut self, out: &mut [i16]) -> usize {
            let mut n = 0;
            while n + 80 <= out.len() {
                // SAFETY: erasure flag set: bitstream is ignored.
                unsafe {
                    ffi::bcg729Decoder(self.0, ptr::null(), 0, 1, 0, 0, out[n..].as_mut_ptr())
                };
                n += 80;
            }
            out[n..].fill(0);
            out.len()
        }
    }
}

fn ilbc_mode(f: Format) -> Mode {
    match f {
        Format::Ilbc20 => Mode::Ms20,
        _ => Mode::Ms30,
    }
}

fn ilbc_format(m: Mode) -> Format {
    match m {
        Mode::Ms20 => Format::Ilbc20,
        Mode::Ms30 => Format::Ilbc30,
    }
}

/// iLBC encoder: one or more whole frames per packet (RFC 3952 §3.2).
struct IlbcEnc(IlbcEncoder);

impl Encoder for IlbcEnc {
    fn format(&self) -> Format {
        ilbc_format(self.0.mode())
    }
    fn encode(&mut self, pcm: &[i16], out: &mut [u8]) -> Result<usize, CodecError> {
        let f = Encoder::format(self);
        let frames = whole(pcm, f, out)?;
        let m = self.0.mode();
        for (i, o) in pcm
            .chunks_exact(m.samples())
            .zip(out.chunks_exact_mut(m.bytes()))
        {
            self.0.encode(i, o);
        }
        Ok(frames * m.bytes())
    }
}

/// iLBC decoder. A payload of the other mode's frames (a peer that ignored
/// the negotiated `mode`) switches the decoder to that mode.
struct IlbcDec(IlbcDecoder);

impl Decoder for IlbcDec {
    fn format(&self) -> Format {
        ilbc_format(self.0.mode())
    }
    fn decode(&mut self, payload: &[u8], out: &mut [i16]) -> Result<usize, CodecError> {
        let own = self.0.mode();
        let m = if payload.len().is_multiple_of(own.bytes()) {
            own
        } else {
            let other = match own {
                Mode::Ms20 => Mode::Ms30,
                Mode::Ms30 => Mode::Ms20,
            };
            if !payload.len().is_multiple_of(other.bytes()) {
                return Err(CodecError::Corrupt("ilbc"));
            }
            self.0 = IlbcDecoder::new(other);
            other
        };
        let frames = payload.len() / m.bytes();
        if out.len() < frames * m.samples() {
            return Err(short(ilbc_format(m), out.len()));
        }
        for (i, o) in payload
            .chunks_exact(m.bytes())
            .zip(out.chunks_exact_mut(m.samples()))
        {
            self.0.decode(Some(i), o);
        }
        Ok(frames * m.samples())
    }
    fn conceal(&mut self, out: &mut [i16]) -> usize {
        let n = self.0.mode().samples();
        let frames = out.len() / n;
        for o in out.chunks_exact_mut(n) {
            self.0.decode(None, o);
        }
        out[frames * n..].fill(0);
        out.len()
    }
}

#[cfg(test)]
mod opus_settings {
    use super::*;

    /// The encoder holds the settings it was made with, and a narrowband source caps it.
    #[test]
    fn encoder_has_the_configured_settings() {
        let o = OpusOptions {
            fec: false,
            dtx: true,
            bitrate: 12000,
            complexity: 2,
            loss_percent: 0,
        };
        for narrow in [false, true] {
            let e = opus_encoder(48000, o, narrow);
            assert_eq!(e.get(ffi::OPUS_GET_BITRATE_REQUEST), Ok(12000));
            assert_eq!(e.get(ffi::OPUS_GET_COMPLEXITY_REQUEST), Ok(2));
            assert_eq!(e.get(ffi::OPUS_GET_INBAND_FEC_REQUEST), Ok(0));
            assert_eq!(e.get(ffi::OPUS_GET_DTX_REQUEST), Ok(1));
            let max = e.get(ffi::OPUS_GET_MAX_BANDWIDTH_REQUEST).unwrap();
            assert_eq!(max == ffi::OPUS_BANDWIDTH_NARROWBAND, narrow, "{max}");
        }
    }

    /// Speech from an 8 kHz source comes back as well from the narrowband encoder as from
    /// the fullband one: the best normalised correlation with the input over Opus's delay.
    #[test]
    fn narrowband_keeps_narrowband_speech() {
        let src = crate::translate::test_signal(8000, 400);
        let pcm = crate::resample::resample(&src, 8000, 48000);
        let likeness = |source_rate| {
            let mut enc = Format::Opus.encoder_at(48000, source_rate);
            let mut dec = OpusDec::new().unwrap();
            let (mut buf, mut out) = ([0u8; 1275], vec![0i16; pcm.len()]);
            for (p, o) in pcm.chunks_exact(960).zip(out.chunks_exact_mut(960)) {
                let n = enc.encode(p, &mut buf).unwrap();
                assert_eq!(dec.decode(&buf[..n], o).unwrap(), 960);
            }
            (0..600)
                .map(|lag| {
                    let (a, b) = (&pcm[..pcm.len() - lag], &out[lag..]);
                    let dot = |x: &[i16], y: &[i16]| -> f64 {
                        x.iter()
                            .zip(y)
                            .map(|(&p, &q)| f64::from(p) * f64::from(q))
                            .sum()
                    };
                    dot(a, b) / (dot(a, a) * dot(b, b)).sqrt()
                })
                .fold(0.0, f64::max)
        };
        let (narrow, full) = (likeness(8000), likeness(48000));
        assert!(narrow > 0.9, "narrowband {narrow}, fullband {full}");
        // 0.95 against 0.97 here; PESQ, which weighs what a listener hears, scores narrowband
        // speech higher (bench/RESULTS.md).
        assert!(narrow > full - 0.05, "narrowband {narrow}, fullband {full}");
    }
}

#[cfg(test)]
mod speex_quality {
    use super::*;

    /// The quality sets the bit rate: 20 ms narrowband frames of 20 bytes at quality 3
    /// (8 kbit/s, Asterisk's default) and 38 bytes at quality 8 (15 kbit/s).
    #[test]
    fn quality_sets_the_frame_size() {
        let pcm = crate::translate::test_signal(8000, 20);
        let mut out = [0u8; 200];
        for (q, bytes) in [(3, 20), (8, 38)] {
            let n = SpeexEnc::new(Format::Speex, q)
                .encode(&pcm, &mut out)
                .unwrap();
            assert_eq!(n, bytes, "quality {q}");
        }
    }
}

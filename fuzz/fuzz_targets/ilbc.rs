//! Any bytes as iLBC frames: the first byte picks the mode and which frames are
//! lost, the rest is cut into frames. Decoding must never panic, always fill a
//! whole frame, and the same bytes through the format's decoder (any length)
//! must be an error or a whole number of frames.
#![no_main]

use codec::ilbc::{IlbcDecoder, Mode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let mode = if ctl & 1 == 0 { Mode::Ms20 } else { Mode::Ms30 };
    let mut dec = IlbcDecoder::new(mode);
    let mut out = [i16::MIN; 240];
    for (i, frame) in rest.chunks(mode.bytes()).enumerate() {
        let lost = (ctl >> (1 + i % 7)) & 1 == 1;
        dec.decode((!lost).then_some(frame), &mut out[..mode.samples()]);
    }
    let format = match mode {
        Mode::Ms20 => codec::Format::Ilbc20,
        Mode::Ms30 => codec::Format::Ilbc30,
    };
    let mut pcm = vec![0i16; rest.len() / 38 * 240 + 240];
    if let Ok(n) = format.decoder().decode(rest, &mut pcm) {
        assert!(n % 160 == 0 && n <= pcm.len());
    }
});

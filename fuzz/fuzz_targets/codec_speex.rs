//! Any bytes as a Speex stream through libspeex (framing: packets/mod.rs), narrowband when the
//! control byte's low bit is clear, wideband when set: whatever the bits say, the decoder writes
//! whole frames into the output or refuses.
#![no_main]

mod packets;

use codec::{CodecError, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((ctl, packets)) = packets::split(data) else {
        return;
    };
    let format = if ctl & 1 == 0 {
        Format::Speex
    } else {
        Format::Speex16
    };
    let mut dec = format.decoder();
    let check = |_, _: &[u8], _: usize, r: Result<usize, CodecError>| {
        if let Ok(n) = r {
            assert_eq!(n % format.frame_samples(), 0, "{n} samples");
        }
    };
    packets::run(&mut *dec, ctl, packets, check, packets::conceal);
});

//! Any bytes as an Opus stream through libopus (framing: packets/mod.rs): a payload decodes to
//! whole 2.5 ms steps that fit the output, or is refused; a lost packet is recovered from the
//! next one's in-band FEC when the control byte's low bit is set, concealed otherwise.
#![no_main]

mod packets;

use codec::{CodecError, Decoder, OpusDec};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((ctl, packets)) = packets::split(data) else {
        return;
    };
    let mut dec = OpusDec::new().expect("opus decoder");
    let check = |_, _: &[u8], _: usize, r: Result<usize, CodecError>| {
        if let Ok(n) = r {
            assert_eq!(n % 120, 0, "{n} samples");
        }
    };
    let lost = |d: &mut OpusDec, next: Option<&[u8]>, out: &mut [i16]| match next {
        Some(next) if ctl & 1 == 1 => d.decode_fec(next, out).unwrap_or(0),
        _ => d.conceal(out),
    };
    packets::run(&mut dec, ctl, packets, check, lost);
});

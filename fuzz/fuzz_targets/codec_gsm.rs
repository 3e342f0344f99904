//! Any bytes as a GSM 06.10 stream (framing: packets/mod.rs): only whole 33-byte frames reach
//! strowger's Rust decoder, each gives 160 samples, and a payload that does not fit the output
//! is refused.
#![no_main]

mod packets;

use codec::{CodecError, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((ctl, packets)) = packets::split(data) else {
        return;
    };
    let mut dec = Format::Gsm.decoder();
    let check = |_, p: &[u8], out: usize, r: Result<usize, CodecError>| {
        let fits = p.len().is_multiple_of(33) && p.len() / 33 * 160 <= out;
        match r {
            Ok(n) => assert!(fits && n == p.len() / 33 * 160, "{n} from {}", p.len()),
            Err(CodecError::BadLength { .. }) => assert!(!fits),
            // A frame without the 0xD signature is refused, as libgsm refuses it.
            Err(e) => assert!(fits, "{e}"),
        }
    };
    packets::run(&mut *dec, ctl, packets, check, packets::conceal);
});

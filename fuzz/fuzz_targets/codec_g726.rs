//! Any bytes as a G.726-32 stream (the only rate strowger negotiates; RFC 3551 bit order)
//! through strowger's Rust decoder (framing: packets/mod.rs): every byte gives two samples,
//! and a payload whose samples do not fit the output is refused before any is written.
#![no_main]

mod packets;

use codec::{CodecError, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((ctl, packets)) = packets::split(data) else {
        return;
    };
    let mut dec = Format::G726.decoder();
    let check = |_, p: &[u8], out: usize, r: Result<usize, CodecError>| match r {
        Ok(n) => assert_eq!(n, 2 * p.len()),
        Err(e) => assert!(2 * p.len() > out, "{e}"),
    };
    packets::run(&mut *dec, ctl, packets, check, packets::conceal);
});

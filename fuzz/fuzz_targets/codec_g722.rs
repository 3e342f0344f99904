//! Any bytes as a G.722 (64 kbit/s, the only rate strowger negotiates) stream through
//! strowger's Rust decoder (framing: packets/mod.rs): every byte gives two samples, and a
//! payload whose samples do not fit the output is refused before any is written. The whole input
//! as one stream decodes to exactly what spandsp's decoder gives (the Rust decoder runs its two
//! bands in vector lanes: any code word sequence must keep them equal).
#![no_main]

mod packets;

use codec::g722::G722Decoder;
use codec::{spandsp, CodecError, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (mut ours, mut theirs) = (G722Decoder::new(), spandsp::G722Decoder::new());
    let (mut x, mut y) = ([0i16; 320], [0i16; 320]);
    for p in data.chunks(160) {
        let n = ours.decode(p, &mut x);
        assert_eq!(n, theirs.decode(p, &mut y));
        assert_eq!(x[..n], y[..n]);
    }
    let Some((ctl, packets)) = packets::split(data) else {
        return;
    };
    let mut dec = Format::G722.decoder();
    let check = |_, p: &[u8], out: usize, r: Result<usize, CodecError>| match r {
        Ok(n) => assert_eq!(n, 2 * p.len()),
        Err(e) => assert!(2 * p.len() > out, "{e}"),
    };
    packets::run(&mut *dec, ctl, packets, check, packets::conceal);
});

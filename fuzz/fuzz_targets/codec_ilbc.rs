//! Any bytes as an iLBC stream (framing: packets/mod.rs), 20 ms frames when the control byte's
//! low bit is clear, 30 ms when set, through the decoder the engine makes: a payload of whole
//! frames of either mode decodes (switching the decoder to the other mode when only that one
//! fits) to whole frames, anything else is refused; frames the RFC's checks reject and lost
//! packets are concealed.
#![no_main]

mod packets;

use codec::{CodecError, Format};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((ctl, packets)) = packets::split(data) else {
        return;
    };
    let format = if ctl & 1 == 0 {
        Format::Ilbc20
    } else {
        Format::Ilbc30
    };
    let mut dec = format.decoder();
    let check = |mode: Format, p: &[u8], out: usize, r: Result<usize, CodecError>| {
        let whole = |bytes: usize, samples: usize| {
            p.len()
                .is_multiple_of(bytes)
                .then_some(p.len() / bytes * samples)
        };
        let (b20, b30) = (whole(38, 160), whole(50, 240));
        match r {
            Ok(n) => {
                let want = if mode == Format::Ilbc20 { b20 } else { b30 };
                assert_eq!(Some(n), want, "{mode} from {} bytes", p.len());
            }
            Err(CodecError::Corrupt(_)) => assert!(b20.is_none() && b30.is_none()),
            Err(e) => assert!([b20, b30].into_iter().flatten().any(|n| n > out), "{e}"),
        }
    };
    packets::run(&mut *dec, ctl, packets, check, packets::conceal);
});

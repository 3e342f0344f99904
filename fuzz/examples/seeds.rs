//! Writes the codec targets' seeds into fuzz/corpus/codec_*/: real encodes of the project's test
//! signal in the targets' framing (fuzz_targets/packets/mod.rs), so each fuzzer starts from
//! streams its decoder accepts: one packet after another, two packets' audio in one payload, and
//! a lost packet between two received ones. `fuzz/run.sh` runs it before the targets.

#[path = "../fuzz_targets/packets/mod.rs"]
mod packets;

use std::path::Path;

use codec::translate::{encode_packets, test_signal};
use codec::Format;
use packets::Packet;

fn main() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    // (target, control byte, format encoded): the control byte picks the decoder's mode, so
    // iLBC's crossed pairs start a decoder in one mode on frames of the other.
    let seeds = [
        ("codec_gsm", 0, Format::Gsm),
        ("codec_g722", 0, Format::G722),
        ("codec_g726", 0, Format::G726),
        ("codec_speex", 0, Format::Speex),
        ("codec_speex", 1, Format::Speex16),
        ("codec_opus", 0, Format::Opus),
        ("codec_opus", 1, Format::Opus),
        ("codec_ilbc", 0, Format::Ilbc20),
        ("codec_ilbc", 1, Format::Ilbc30),
        ("codec_ilbc", 1, Format::Ilbc20),
        ("codec_ilbc", 0, Format::Ilbc30),
    ];
    for (target, ctl, f) in seeds {
        let dir = corpus.join(target);
        std::fs::create_dir_all(&dir).expect("corpus directory");
        let packet = f.samples_in(f.packet_ms());
        let pcm = test_signal(f.pcm_rate(), 5 * f.packet_ms());
        let single = encode_packets(f, &pcm);
        let mut enc = f.encoder();
        let mut buf = vec![0u8; f.max_encoded_len(2 * packet)];
        let double: Vec<Vec<u8>> = pcm
            .chunks_exact(2 * packet)
            .map(|p| {
                let n = enc.encode(p, &mut buf).expect("encode two packets");
                buf[..n].to_vec()
            })
            .collect();
        let mut lost = received(&single);
        lost[1] = Packet::Lost(packet);
        for (name, stream) in [
            ("stream", received(&single)),
            ("double", received(&double)),
            ("lost", lost),
        ] {
            let path = dir.join(format!("{name}-{f}-{ctl}"));
            std::fs::write(&path, packets::join(ctl, &stream)).expect("write seed");
        }
    }
}

fn received(payloads: &[Vec<u8>]) -> Vec<Packet<'_>> {
    payloads.iter().map(|p| Packet::Payload(p)).collect()
}

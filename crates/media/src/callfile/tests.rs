use super::*;
use codec::{Decoder, OpusDec};
use std::io::Cursor;

fn tone(channels: usize, samples: usize) -> Vec<i16> {
    (0..samples)
        .flat_map(|i| {
            let s =
                ((i as f64 * 2.0 * std::f64::consts::PI * 440.0 / 8000.0).sin() * 8000.0) as i16;
            std::iter::repeat_n(s, channels)
        })
        .collect()
}

#[test]
fn wav_holds_the_samples_with_the_channels_of_the_mix() {
    let mut out = Cursor::new(Vec::new());
    let mut file = CallFile::new(&mut out, FileFormat::Wav, Mix::Stereo).unwrap();
    let pcm = tone(2, 800);
    file.write(&pcm).unwrap();
    file.write(&pcm).unwrap();
    file.finish().unwrap();
    out.set_position(0);
    let wav = hound::WavReader::new(out).unwrap();
    assert_eq!(wav.spec().channels, 2);
    assert_eq!(wav.spec().sample_rate, 8000);
    assert_eq!(wav.spec().bits_per_sample, 16);
    assert_eq!(wav.duration(), 1600);
    let samples: Vec<i16> = wav.into_samples().map(Result::unwrap).collect();
    assert_eq!(samples, [&pcm[..], &pcm[..]].concat());
}

/// The packets of an Ogg stream with each one's granule position.
fn packets(data: Vec<u8>) -> Vec<(Vec<u8>, u64, bool)> {
    let mut r = ogg::PacketReader::new(Cursor::new(data));
    let mut out = Vec::new();
    while let Some(p) = r.read_packet().unwrap() {
        out.push((p.data.clone(), p.absgp_page(), p.last_in_stream()));
    }
    out
}

#[test]
fn ogg_opus_has_valid_headers_and_a_stream_as_long_as_the_audio() {
    let mut out = Cursor::new(Vec::new());
    let mut file = CallFile::new(&mut out, FileFormat::Opus, Mix::Stereo).unwrap();
    // 1.01 s: the last packet is partly padding.
    let pcm = tone(2, 8080);
    for block in pcm.chunks(2 * 700) {
        file.write(block).unwrap();
    }
    file.finish().unwrap();
    let p = packets(out.into_inner());

    let head = &p[0].0;
    assert_eq!(&head[..8], b"OpusHead");
    assert_eq!(head.len(), 19);
    assert_eq!(head[8], 1, "version");
    assert_eq!(head[9], 2, "channels");
    assert_eq!(u16::from_le_bytes([head[10], head[11]]), PRE_SKIP);
    assert_eq!(u32::from_le_bytes(head[12..16].try_into().unwrap()), 8000);
    assert_eq!(head[18], 0, "mapping family");
    assert_eq!(p[0].1, 0);
    let tags = &p[1].0;
    assert_eq!(&tags[..8], b"OpusTags");
    let vendor = u32::from_le_bytes(tags[8..12].try_into().unwrap()) as usize;
    assert_eq!(tags.len(), 12 + vendor + 4);

    let audio = &p[2..];
    let (_, last_granule, last) = audio.last().unwrap();
    assert!(*last, "the stream ends with the last packet");
    // Played length = last granule - pre-skip = the samples written, at 48 kHz.
    assert_eq!(last_granule - u64::from(PRE_SKIP), 8080 * 6);
    let mut dec = OpusDec::new().unwrap();
    let mut decoded = 0;
    let mut buf = vec![0i16; 5760];
    for (packet, ..) in audio {
        decoded += dec.decode(packet, &mut buf).unwrap();
    }
    assert_eq!(decoded as u64, audio.len() as u64 * 960);
    assert!(
        decoded as u64 >= *last_granule,
        "packets cover the stream's end"
    );
}

/// A file that notes the size of every write it takes.
struct Noted {
    file: Cursor<Vec<u8>>,
    writes: Vec<usize>,
}

impl Write for Noted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writes.push(buf.len());
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for Noted {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.file.seek(to)
    }
}

/// Mono blocks of 500 ms (8 KB) reach the file two at a time, in one write each, and the rest
/// when the file is completed; the file holds every sample.
#[test]
fn a_mono_wav_goes_to_its_file_two_blocks_a_write() {
    let mut out = Noted {
        file: Cursor::new(Vec::new()),
        writes: Vec::new(),
    };
    let mut file = CallFile::new(&mut out, FileFormat::Wav, Mix::Mono).unwrap();
    let pcm = tone(1, 5 * 4000);
    for block in pcm.chunks(4000) {
        file.write(block).unwrap();
    }
    file.finish().unwrap();
    // The header, two pairs of blocks, the last block, then the header's two sizes.
    assert_eq!(out.writes, [44, 16_000, 16_000, 8000, 4, 4]);
    out.file.set_position(0);
    let wav = hound::WavReader::new(out.file).unwrap();
    assert_eq!(wav.spec().channels, 1);
    let samples: Vec<i16> = wav.into_samples().map(Result::unwrap).collect();
    assert_eq!(samples, pcm);
}

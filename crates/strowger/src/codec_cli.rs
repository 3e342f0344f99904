//! `strowger codec encode|decode|roundtrip|transcode` and `strowger show translation`.
//!
//! Files: WAV in and out (16-bit mono PCM at any of 8/16/48 kHz, resampled to
//! the codec's rate); coded files are the codec's raw frames back to back
//! (`.gsm` as sox reads it, `.g722`, `.g726`, `.ulaw`, …) except Opus and
//! Speex, which are written as Ogg Opus (RFC 7845) and Ogg Speex (the Speex
//! manual's header) so opusdec, speexdec and ffmpeg read them (and read
//! either way: raw frames or Ogg), and iLBC, whose frames follow RFC 3952's
//! storage header (`#!iLBC20\n` or `#!iLBC30\n`, optional when reading).

use std::path::Path;
use std::time::Instant;

use codec::translate::{cpu_now, Graph, Node};
use codec::{resample, Format, Translator};

type Res<T> = Result<T, String>;

/// Measures every step with encoders at the configured settings (`rtp.speex_quality`,
/// `rtp.opus_*`) and prints the matrix, then which implementation codes each format, at what
/// settings, and what encoding and decoding one second of it costs.
pub fn show_translation(paths: bool, rtp: &switch::config::Rtp) -> Res<()> {
    let t0 = Instant::now();
    configure(rtp);
    let g = Graph::measure(1000, 3);
    print!("{}", g.render_matrix());
    println!();
    println!(
        "{:<9} {:>9} {:>9}  implementation",
        "format", "encode", "decode"
    );
    for &f in Format::all() {
        // A format coding several rates gets a row for each ("opus/8k").
        for &rate in f.pcm_rates() {
            let (node, slin) = (Node::Codec(f), Node::Slin(rate));
            let cost = |a, b| g.path(a, b).map_or(f64::NAN, |p| p.cost_us);
            let name = match f.pcm_rates().len() {
                1 => f.name().to_string(),
                _ => format!("{}/{}k", f.name(), rate / 1000),
            };
            println!(
                "{name:<9} {:>9.0} {:>9.0}  {}",
                cost(slin, node),
                cost(node, slin),
                f.implementation()
            );
        }
    }
    if paths {
        println!();
        print!("{}", g.render_paths());
    }
    eprintln!(
        "(measured in {:.0} ms)",
        t0.elapsed().as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Encoders made from here on use the configured settings, as the server's do.
fn configure(rtp: &switch::config::Rtp) {
    codec::set_speex_quality(rtp.speex_quality);
    codec::set_opus_options(rtp.opus);
}

fn format(name: &str) -> Res<Format> {
    Format::from_name(name).ok_or_else(|| {
        let all: Vec<_> = Format::all().iter().map(|f| f.name()).collect();
        format!("unknown codec {name:?}: supported: {}", all.join(", "))
    })
}

pub fn run(
    op: &str,
    name: &str,
    to: Option<&str>,
    input: &Path,
    output: &Path,
    rtp: &switch::config::Rtp,
) -> Res<()> {
    configure(rtp);
    let f = format(name)?;
    match op {
        "transcode" => {
            let to = format(to.ok_or("transcode needs --to CODEC")?)?;
            let packets = read_coded(f, input)?;
            let (out, us) = transcode(f, to, &packets)?;
            write_coded(to, output, &out, to.pcm_rate())?;
            let frames = packets.len() as f64 * f64::from(f.packet_ms()) / 20.0;
            eprintln!(
                "{f} -> {to}: {} packets in, {} out; {us:.0} µs of CPU, {:.2} µs per 20 ms of audio",
                packets.len(),
                out.len(),
                us / frames.max(1.0)
            );
        }
        "encode" => {
            let (rate, pcm) = read_wav(input)?;
            let packets = encode(f, rate, &pcm)?;
            write_coded(f, output, &packets, rate)?;
            let bytes: usize = packets.iter().map(Vec::len).sum();
            eprintln!(
                "{}: {} packets of {} ms, {} bytes, {:.1} kbit/s",
                f,
                packets.len(),
                f.packet_ms(),
                bytes,
                bytes as f64 * 8.0 / (packets.len() as f64 * f64::from(f.packet_ms()))
            );
        }
        "decode" => {
            let packets = read_coded(f, input)?;
            let pcm = decode(f, f.pcm_rate(), &packets)?;
            write_wav(output, f.pcm_rate(), &pcm)?;
            eprintln!(
                "{}: {} packets -> {} samples at {} Hz",
                f,
                packets.len(),
                pcm.len(),
                f.pcm_rate()
            );
        }
        "roundtrip" => {
            let (rate, pcm) = read_wav(input)?;
            let t0 = Instant::now();
            let packets = encode(f, rate, &pcm)?;
            let at = coding_rate(f, rate);
            let back = resample::resample(&decode(f, at, &packets)?, at, rate);
            write_wav(output, rate, &back)?;
            let bytes: usize = packets.iter().map(Vec::len).sum();
            eprintln!(
                "{}: {:.1} kbit/s, {:.2} s of audio in {:.1} ms",
                f,
                bytes as f64 * 8.0 / (packets.len().max(1) as f64 * f64::from(f.packet_ms())),
                pcm.len() as f64 / rate as f64,
                t0.elapsed().as_secs_f64() * 1000.0
            );
        }
        _ => return Err(format!("unknown operation {op}")),
    }
    Ok(())
}

/// Runs `packets` of `from` through a [`Translator`] to `to`, as a bridge does (one push per
/// packet, pulling every whole packet of `to`); returns them and the thread CPU µs it took.
fn transcode(from: Format, to: Format, packets: &[Vec<u8>]) -> Res<(Vec<Vec<u8>>, f64)> {
    let graph = Graph::global();
    let mut tr = Translator::new(graph, from, to)
        .ok_or_else(|| format!("no translation path from {from} to {to}"))?;
    let mut buf = vec![0u8; to.max_encoded_len(to.samples_in(to.packet_ms()))];
    let mut out = Vec::with_capacity(packets.len() * 2);
    let t0 = cpu_now();
    for p in packets {
        tr.push(Some(p), 0).map_err(|e| e.to_string())?;
        while let Some(r) = tr.pull(to.packet_ms(), &mut buf) {
            let n = r.map_err(|e| e.to_string())?;
            out.push(buf[..n].to_vec());
        }
    }
    Ok((out, cpu_now() - t0))
}

/// The rate `f` codes `rate` Hz audio at, as a call's translator does: the lowest it takes
/// that keeps all of it (Opus codes an 8 kHz file at 8 kHz), else its highest.
fn coding_rate(f: Format, rate: u32) -> u32 {
    let rates = f.pcm_rates();
    rates
        .iter()
        .copied()
        .find(|&r| r >= rate)
        .unwrap_or(f.pcm_rate())
}

/// `pcm`, `rate` Hz audio, in packets of `f` coded at [`coding_rate`].
fn encode(f: Format, rate: u32, pcm: &[i16]) -> Res<Vec<Vec<u8>>> {
    let at = coding_rate(f, rate);
    let n = codec::samples_at(at, f.packet_ms());
    let mut padded = resample::resample(pcm, rate, at);
    padded.resize(padded.len().div_ceil(n) * n, 0);
    let mut enc = f.encoder_at(at, rate);
    let mut buf = vec![0u8; f.max_encoded_len(n)];
    padded
        .chunks_exact(n)
        .map(|p| {
            let len = enc.encode(p, &mut buf).map_err(|e| e.to_string())?;
            Ok(buf[..len].to_vec())
        })
        .collect()
}

/// `packets` of `f` decoded to `rate` Hz audio.
fn decode(f: Format, rate: u32, packets: &[Vec<u8>]) -> Res<Vec<i16>> {
    let mut dec = f.decoder_at(rate);
    let mut buf = vec![0i16; 5760];
    let mut out = Vec::new();
    for p in packets {
        let n = dec.decode(p, &mut buf).map_err(|e| e.to_string())?;
        out.extend_from_slice(&buf[..n]);
    }
    Ok(out)
}

/// Bytes of one packet of a constant-rate format.
fn packet_bytes(f: Format) -> usize {
    let n = f.samples_in(f.packet_ms());
    let mut buf = vec![0u8; f.max_encoded_len(n)];
    f.encoder().encode(&vec![0; n], &mut buf).unwrap_or(0)
}

fn write_coded(f: Format, path: &Path, packets: &[Vec<u8>], input_rate: u32) -> Res<()> {
    let data = match f {
        Format::Opus => ogg_opus(packets, input_rate),
        Format::Speex | Format::Speex16 => ogg_speex(f, packets),
        Format::Ilbc20 | Format::Ilbc30 => [ilbc_header(f).as_bytes(), &packets.concat()].concat(),
        _ => packets.concat(),
    };
    std::fs::write(path, data).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_coded(f: Format, path: &Path) -> Res<Vec<Vec<u8>>> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if f == Format::Opus || data.starts_with(b"OggS") {
        // The first two packets are the stream and comment headers.
        let packets = ogg_packets(&data)?;
        return Ok(packets.into_iter().skip(2).collect());
    }
    let data = data
        .strip_prefix(ilbc_header(f).as_bytes())
        .unwrap_or(&data);
    let n = packet_bytes(f);
    Ok(data.chunks(n).map(<[u8]>::to_vec).collect())
}

/// The RFC 3952 §4.1 storage-mode magic of an iLBC file (empty for other formats).
fn ilbc_header(f: Format) -> &'static str {
    match f {
        Format::Ilbc20 => "#!iLBC20\n",
        Format::Ilbc30 => "#!iLBC30\n",
        _ => "",
    }
}

// --- WAV (16-bit mono PCM) ---

fn read_wav(path: &Path) -> Res<(u32, Vec<i16>)> {
    let b = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bad = |m: &str| format!("{}: {m}", path.display());
    if b.len() < 12 || &b[..4] != b"RIFF" || &b[8..12] != b"WAVE" {
        return Err(bad("not a WAV file"));
    }
    let (mut rate, mut fmt_ok, mut i) = (0, false, 12);
    while i + 8 <= b.len() {
        let id = &b[i..i + 4];
        let len = u32::from_le_bytes(b[i + 4..i + 8].try_into().unwrap()) as usize;
        let body = &b[i + 8..(i + 8 + len).min(b.len())];
        if id == b"fmt " && body.len() >= 16 {
            let u16_at = |o: usize| u16::from_le_bytes([body[o], body[o + 1]]);
            rate = u32::from_le_bytes(body[4..8].try_into().unwrap());
            fmt_ok = u16_at(0) == 1 && u16_at(2) == 1 && u16_at(14) == 16;
        } else if id == b"data" {
            if !fmt_ok || ![8000, 16000, 48000].contains(&rate) {
                return Err(bad(
                    "need 16-bit mono PCM at 8, 16 or 48 kHz (sox in.wav -b16 -c1 -r8000 out.wav)",
                ));
            }
            let pcm = body
                .chunks_exact(2)
                .map(|c| i16::from_le_bytes([c[0], c[1]]))
                .collect();
            return Ok((rate, pcm));
        }
        i += 8 + len + (len & 1);
    }
    Err(bad("no data chunk"))
}

fn write_wav(path: &Path, rate: u32, pcm: &[i16]) -> Res<()> {
    let data_len = 2 * pcm.len() as u32;
    let mut b = Vec::with_capacity(44 + data_len as usize);
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + data_len).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&rate.to_le_bytes());
    b.extend_from_slice(&(2 * rate).to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(b"data");
    b.extend_from_slice(&data_len.to_le_bytes());
    for s in pcm {
        b.extend_from_slice(&s.to_le_bytes());
    }
    std::fs::write(path, b).map_err(|e| format!("{}: {e}", path.display()))
}

// --- Ogg Opus (RFC 3533 pages, RFC 7845 headers), one packet per page ---

fn ogg_crc(data: &[u8]) -> u32 {
    let mut crc = 0u32;
    for &b in data {
        crc ^= (b as u32) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
        }
    }
    crc
}

fn ogg_page(out: &mut Vec<u8>, flags: u8, granule: u64, seq: u32, packet: &[u8]) {
    let start = out.len();
    out.extend_from_slice(b"OggS\0");
    out.push(flags);
    out.extend_from_slice(&granule.to_le_bytes());
    out.extend_from_slice(&0x5354_5257u32.to_le_bytes()); // stream serial "STRW"
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    let mut lacing = vec![255u8; packet.len() / 255];
    lacing.push((packet.len() % 255) as u8);
    out.push(lacing.len() as u8);
    out.extend_from_slice(&lacing);
    out.extend_from_slice(packet);
    let crc = ogg_crc(&out[start..]);
    out[start + 22..start + 26].copy_from_slice(&crc.to_le_bytes());
}

/// Header pages and one page per packet, granule positions counting `samples_per_packet`.
fn ogg_stream(head: &[u8], tags: &[u8], packets: &[Vec<u8>], samples_per_packet: u64) -> Vec<u8> {
    let mut out = Vec::new();
    ogg_page(&mut out, 0x02, 0, 0, head);
    ogg_page(&mut out, 0, 0, 1, tags);
    for (i, p) in packets.iter().enumerate() {
        let last = i + 1 == packets.len();
        ogg_page(
            &mut out,
            if last { 0x04 } else { 0 },
            samples_per_packet * (i as u64 + 1),
            i as u32 + 2,
            p,
        );
    }
    out
}

/// Ogg Speex: the 80-byte Speex header (little-endian fields), a Vorbis-style comment
/// packet, then one frame per packet.
fn ogg_speex(f: Format, packets: &[Vec<u8>]) -> Vec<u8> {
    let mut head = b"Speex   ".to_vec();
    let mut version = b"strowger".to_vec();
    version.resize(20, 0);
    head.extend_from_slice(&version);
    let frame = f.frame_samples() as i32;
    let wide = i32::from(f == Format::Speex16);
    // version id, header size, rate, mode, bitstream version, channels, bitrate (unknown),
    // frame size, vbr, frames per packet, extra headers, two reserved.
    for v in [
        1,
        80,
        f.pcm_rate() as i32,
        wide,
        4,
        1,
        -1,
        frame,
        0,
        1,
        0,
        0,
        0,
    ] {
        head.extend_from_slice(&v.to_le_bytes());
    }
    let mut tags = 8u32.to_le_bytes().to_vec();
    tags.extend_from_slice(b"strowger");
    tags.extend_from_slice(&0u32.to_le_bytes());
    ogg_stream(&head, &tags, packets, frame as u64)
}

fn ogg_opus(packets: &[Vec<u8>], input_rate: u32) -> Vec<u8> {
    let mut head = b"OpusHead".to_vec();
    head.push(1); // version
    head.push(1); // channels
    head.extend_from_slice(&0u16.to_le_bytes()); // pre-skip
    head.extend_from_slice(&input_rate.to_le_bytes());
    head.extend_from_slice(&0i16.to_le_bytes()); // gain
    head.push(0); // mapping family
    let mut tags = b"OpusTags".to_vec();
    tags.extend_from_slice(&8u32.to_le_bytes());
    tags.extend_from_slice(b"strowger");
    tags.extend_from_slice(&0u32.to_le_bytes());
    ogg_stream(&head, &tags, packets, 960)
}

fn ogg_packets(data: &[u8]) -> Res<Vec<Vec<u8>>> {
    let mut packets = Vec::new();
    let mut cur = Vec::new();
    let mut i = 0;
    while i + 27 <= data.len() {
        if &data[i..i + 4] != b"OggS" {
            return Err("not an Ogg stream".into());
        }
        let nseg = data[i + 26] as usize;
        let lacing = data
            .get(i + 27..i + 27 + nseg)
            .ok_or("truncated Ogg page")?;
        let mut pos = i + 27 + nseg;
        for &l in lacing {
            let seg = data
                .get(pos..pos + l as usize)
                .ok_or("truncated Ogg page")?;
            cur.extend_from_slice(seg);
            pos += l as usize;
            if l < 255 {
                packets.push(std::mem::take(&mut cur));
            }
        }
        i = pos;
    }
    Ok(packets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ogg_round_trips_packets() {
        let packets = vec![vec![1u8; 10], vec![2u8; 300], vec![3u8; 255]];
        let ogg = ogg_opus(&packets, 8000);
        let back = ogg_packets(&ogg).unwrap();
        assert_eq!(&back[2..], &packets[..]);
        assert!(back[0].starts_with(b"OpusHead"));
    }

    #[test]
    fn ogg_crc_matches_the_reference_polynomial() {
        // CRC-32/MPEG-2 without final xor and init 0 (Ogg's) of "123456789".
        assert_eq!(ogg_crc(b"123456789"), 0x89A1_897F);
    }
}

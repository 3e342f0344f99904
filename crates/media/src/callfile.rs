//! The file of a whole-call recording, for the writer thread that drains a
//! [`CallRecording`](crate::CallRecording): 8 kHz 16-bit WAV, or Opus in Ogg (RFC 7845).
//!
//! Ogg pages come from the `ogg` crate; the two Opus header packets are written here. The WAV
//! file is written here too, 16 KB at a time: `hound` writes sample by sample, which cost a
//! recorder more than its disk writes did.

use std::io::{self, Seek, SeekFrom, Write};

use codec::{Encoder, OpusEnc, OpusOptions};
use ogg::writing::{PacketWriteEndInfo, PacketWriter};

use crate::Mix;

/// Rate of every recording.
const RATE: u32 = 8000;
/// Samples per channel in one Opus packet (20 ms).
const OPUS_FRAME: usize = 160;
/// Opus granule positions count 48 kHz samples whatever the input rate (RFC 7845 §4).
const GRANULE_PER_SAMPLE: u64 = 48_000 / RATE as u64;
/// The encoder's look-ahead at 48 kHz (libopus, VoIP application: 2.5 ms + 4 ms), which a
/// player skips at the start (RFC 7845 §4.2).
const PRE_SKIP: u16 = 312;
/// Bit rate per channel: speech at 8 kHz needs no more.
const OPUS_BITRATE: i32 = 16_000;
/// The one logical stream of a file.
const SERIAL: u32 = 0x5354_5257;
/// A WAV file's samples go to it once this many bytes wait: one write(2) a second for mono
/// (two of the tap's 8 KB blocks), one a block for stereo (16 KB). A write costs about 5 µs
/// of its own on ext4 besides 0.4 µs a KB, so this takes a mono recording's writer about a
/// third less time. A full disk shows in the CDR of the call that filled it unless it filled
/// in the call's last second or so (the last blocks are written after the call ends).
const WRITE_AT: usize = 16_000;

/// A recording's file format (`record-call format=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Wav,
    Opus,
}

impl FileFormat {
    /// The file name extension that goes with the format.
    pub fn extension(self) -> &'static str {
        match self {
            FileFormat::Wav => "wav",
            FileFormat::Opus => "opus",
        }
    }
}

/// An open recording file. Dropping it without [`CallFile::finish`] leaves a truncated file.
pub enum CallFile<W: Write + Seek> {
    Wav(Wav<W>),
    Opus(Box<OggOpus<W>>),
}

impl<W: Write + Seek> CallFile<W> {
    /// Writes the headers of a `mix` recording in `format` to `out`.
    pub fn new(out: W, format: FileFormat, mix: Mix) -> io::Result<CallFile<W>> {
        Ok(match format {
            FileFormat::Wav => CallFile::Wav(Wav::new(out, mix.channels())?),
            FileFormat::Opus => CallFile::Opus(Box::new(OggOpus::new(out, mix.channels())?)),
        })
    }

    /// Appends a block of samples (interleaved when stereo).
    pub fn write(&mut self, pcm: &[i16]) -> io::Result<()> {
        match self {
            CallFile::Wav(w) => w.write(pcm),
            CallFile::Opus(o) => o.write(pcm),
        }
    }

    /// Completes the file (WAV sizes, the last Ogg page) and flushes it.
    pub fn finish(self) -> io::Result<()> {
        match self {
            CallFile::Wav(w) => w.finish(),
            CallFile::Opus(o) => o.finish(),
        }
    }
}

/// A 16-bit PCM WAV file at [`RATE`]: a 44-byte header whose sizes are filled in at the end.
pub struct Wav<W: Write + Seek> {
    out: W,
    /// Bytes of samples taken in.
    data: u32,
    /// Samples as little-endian bytes: the first `waiting` wait for [`WRITE_AT`].
    bytes: Vec<u8>,
    waiting: usize,
}

impl<W: Write + Seek> Wav<W> {
    fn new(mut out: W, channels: u16) -> io::Result<Wav<W>> {
        let align = channels * 2;
        let mut h = Vec::with_capacity(44);
        h.extend_from_slice(b"RIFF\0\0\0\0WAVEfmt ");
        h.extend_from_slice(&16u32.to_le_bytes());
        h.extend_from_slice(&1u16.to_le_bytes()); // PCM
        h.extend_from_slice(&channels.to_le_bytes());
        h.extend_from_slice(&RATE.to_le_bytes());
        h.extend_from_slice(&(RATE * u32::from(align)).to_le_bytes());
        h.extend_from_slice(&align.to_le_bytes());
        h.extend_from_slice(&16u16.to_le_bytes());
        h.extend_from_slice(b"data\0\0\0\0");
        out.write_all(&h)?;
        Ok(Wav {
            out,
            data: 0,
            bytes: Vec::new(),
            waiting: 0,
        })
    }

    fn write(&mut self, pcm: &[i16]) -> io::Result<()> {
        let len = pcm.len() * 2;
        // The RIFF sizes are 32 bits: 4 GiB, 74 hours of stereo.
        let Some(data) = u32::try_from(len)
            .ok()
            .and_then(|n| self.data.checked_add(n))
            .filter(|&d| d <= u32::MAX - 36)
        else {
            return Err(io::Error::other("the WAV file reached its 4 GiB limit"));
        };
        let (at, end) = (self.waiting, self.waiting + len);
        if self.bytes.len() < end {
            self.bytes.resize(end, 0);
        }
        for (b, s) in self.bytes[at..end].chunks_exact_mut(2).zip(pcm) {
            b.copy_from_slice(&s.to_le_bytes());
        }
        self.waiting = end;
        self.data = data;
        if end >= WRITE_AT {
            self.waiting = 0;
            self.out.write_all(&self.bytes[..end])?;
        }
        Ok(())
    }

    fn finish(mut self) -> io::Result<()> {
        self.out.write_all(&self.bytes[..self.waiting])?;
        self.out.seek(SeekFrom::Start(4))?;
        self.out.write_all(&(36 + self.data).to_le_bytes())?;
        self.out.seek(SeekFrom::Start(40))?;
        self.out.write_all(&self.data.to_le_bytes())?;
        self.out.flush()
    }
}

/// Opus packets of 20 ms in an Ogg stream.
pub struct OggOpus<W: Write> {
    ogg: PacketWriter<'static, W>,
    enc: OpusEnc,
    channels: usize,
    /// Samples (interleaved) short of a whole packet.
    pending: Vec<i16>,
    /// Samples per channel taken in, and packets written.
    samples: u64,
    packets: u64,
    packet: Vec<u8>,
}

impl<W: Write> OggOpus<W> {
    fn new(out: W, channels: u16) -> io::Result<OggOpus<W>> {
        let opts = OpusOptions {
            fec: false,
            dtx: false,
            bitrate: OPUS_BITRATE * i32::from(channels),
            complexity: 5,
            loss_percent: 0,
        };
        let enc = OpusEnc::with_layout(RATE, channels as u8, opts).map_err(io::Error::other)?;
        let mut ogg = PacketWriter::new(out);
        ogg.write_packet(opus_head(channels), SERIAL, PacketWriteEndInfo::EndPage, 0)?;
        ogg.write_packet(opus_tags(), SERIAL, PacketWriteEndInfo::EndPage, 0)?;
        let channels = usize::from(channels);
        Ok(OggOpus {
            ogg,
            enc,
            channels,
            pending: Vec::with_capacity(OPUS_FRAME * channels),
            samples: 0,
            packets: 0,
            packet: vec![0; 1500],
        })
    }

    fn write(&mut self, mut pcm: &[i16]) -> io::Result<()> {
        let whole = OPUS_FRAME * self.channels;
        self.samples += (pcm.len() / self.channels) as u64;
        while !pcm.is_empty() {
            let n = (whole - self.pending.len()).min(pcm.len());
            self.pending.extend_from_slice(&pcm[..n]);
            pcm = &pcm[n..];
            if self.pending.len() == whole {
                self.packet(false)?;
            }
        }
        Ok(())
    }

    /// Encodes the pending frame (padded with silence) as the next packet.
    fn packet(&mut self, last: bool) -> io::Result<()> {
        self.pending.resize(OPUS_FRAME * self.channels, 0);
        let n = self
            .enc
            .encode(&self.pending, &mut self.packet)
            .map_err(io::Error::other)?;
        self.pending.clear();
        self.packets += 1;
        let decoded = self.packets * OPUS_FRAME as u64 * GRANULE_PER_SAMPLE;
        // The last page's position ends the stream at the samples taken in (RFC 7845 §4.4).
        let (end, granule) = match last {
            true => (
                PacketWriteEndInfo::EndStream,
                u64::from(PRE_SKIP) + self.samples * GRANULE_PER_SAMPLE,
            ),
            false => (PacketWriteEndInfo::NormalPacket, decoded),
        };
        self.ogg
            .write_packet(self.packet[..n].to_vec(), SERIAL, end, granule)
    }

    fn finish(mut self) -> io::Result<()> {
        // Packets until they cover the pre-skip as well as every sample taken in.
        let needed = u64::from(PRE_SKIP) + self.samples * GRANULE_PER_SAMPLE;
        let per_packet = OPUS_FRAME as u64 * GRANULE_PER_SAMPLE;
        while (self.packets + 1) * per_packet < needed {
            self.packet(false)?;
        }
        self.packet(true)?;
        self.ogg.inner_mut().flush()
    }
}

/// The identification header (RFC 7845 §5.1): channel mapping family 0 (mono or stereo).
fn opus_head(channels: u16) -> Vec<u8> {
    let mut h = b"OpusHead".to_vec();
    h.push(1);
    h.push(channels as u8);
    h.extend_from_slice(&PRE_SKIP.to_le_bytes());
    h.extend_from_slice(&RATE.to_le_bytes());
    h.extend_from_slice(&0i16.to_le_bytes());
    h.push(0);
    h
}

/// The comment header (RFC 7845 §5.2): a vendor string and no comments.
fn opus_tags() -> Vec<u8> {
    let vendor = b"strowger";
    let mut h = b"OpusTags".to_vec();
    h.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
    h.extend_from_slice(vendor);
    h.extend_from_slice(&0u32.to_le_bytes());
    h
}

#[cfg(test)]
mod tests;

//! What the codec targets share: the input's framing (a control byte, then a stream's packets)
//! and the driver that feeds them to one decoder the way the media engine does.
//!
//! Payloads and output are handed to the decoder in buffers that end at an unmapped page: the C
//! libraries are Debian's, not built with the sanitizer, so ASan does not see their accesses, but
//! a read past a payload or a write past the output faults at once.

// Each target and the seed writer use a part.
#![allow(dead_code)]

use std::cell::RefCell;
use std::ptr;

use codec::{CodecError, Decoder, Format};

/// Samples of the buffer the media engine decodes a payload into (the `Translator`'s scratch
/// and the recorder's buffer).
pub const OUT: usize = 5760;

/// The longest payload a packet can carry here (15 bits of length).
const MAX_PAYLOAD: usize = 0x7fff;

/// One packet of the stream.
#[derive(Debug, Clone, Copy)]
pub enum Packet<'a> {
    /// A received payload.
    Payload(&'a [u8]),
    /// A lost packet, concealed over this many samples (at most [`OUT`]).
    Lost(usize),
}

/// The packets after the control byte. Each follows a 2-byte big-endian header whose top bit
/// marks a lost packet and whose other bits give the payload's length (cut to what is left) or,
/// for a lost packet, the samples to conceal.
#[derive(Clone)]
pub struct Packets<'a>(&'a [u8]);

impl<'a> Iterator for Packets<'a> {
    type Item = Packet<'a>;

    fn next(&mut self) -> Option<Packet<'a>> {
        let (h, rest) = self.0.split_first_chunk::<2>()?;
        let h = u16::from_be_bytes(*h);
        let len = usize::from(h & 0x7fff);
        if h & 0x8000 != 0 {
            self.0 = rest;
            return Some(Packet::Lost(len.min(OUT)));
        }
        let (p, rest) = rest.split_at(len.min(rest.len()));
        self.0 = rest;
        Some(Packet::Payload(p))
    }
}

/// The control byte and the packets of a fuzz input.
pub fn split(data: &[u8]) -> Option<(u8, Packets<'_>)> {
    let (&ctl, rest) = data.split_first()?;
    Some((ctl, Packets(rest)))
}

/// The fuzz input [`split`] reads as `ctl` and `packets` (for seeds).
pub fn join(ctl: u8, packets: &[Packet<'_>]) -> Vec<u8> {
    let mut v = vec![ctl];
    for p in packets {
        let (h, body) = match *p {
            Packet::Payload(b) => (b.len().min(MAX_PAYLOAD) as u16, b),
            Packet::Lost(n) => (0x8000 | n.min(OUT) as u16, &[][..]),
        };
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&body[..usize::from(h & 0x7fff).min(body.len())]);
    }
    v
}

/// The output length the control byte picks: the engine's [`OUT`] when its top bit is clear,
/// otherwise a shorter buffer (0 to 5715 samples), which a decoder must refuse rather than
/// write past.
pub fn out_len(ctl: u8) -> usize {
    if ctl & 0x80 == 0 {
        OUT
    } else {
        usize::from(ctl & 0x7f) * 45
    }
}

/// Runs the packets through `dec` in order, as the engine runs a stream's through its one
/// decoder: a payload is decoded (into [`out_len`] samples), a lost packet is handed to `lost`
/// with the next payload, if any (the codec's concealment or recovery). After every decode
/// `check(format, payload, out_len, result)` judges the result (`format`: the decoder's after
/// the decode); the driver checks what holds for every decoder: no more samples than the output
/// holds, no audio from an empty payload.
pub fn run<D: Decoder + ?Sized>(
    dec: &mut D,
    ctl: u8,
    packets: Packets<'_>,
    check: impl Fn(Format, &[u8], usize, Result<usize, CodecError>),
    mut lost: impl FnMut(&mut D, Option<&[u8]>, &mut [i16]) -> usize,
) {
    BUFFERS.with_borrow_mut(|(input, output)| {
        stream(dec, out_len(ctl), packets, input, output, check, &mut lost)
    });
}

thread_local! {
    /// The payload's and the output's guarded buffers, mapped once.
    static BUFFERS: RefCell<(Guarded, Guarded)> =
        RefCell::new((Guarded::new(MAX_PAYLOAD), Guarded::new(2 * OUT)));
}

fn stream<D: Decoder + ?Sized>(
    dec: &mut D,
    out_len: usize,
    packets: Packets<'_>,
    input: &mut Guarded,
    output: &mut Guarded,
    check: impl Fn(Format, &[u8], usize, Result<usize, CodecError>),
    lost: &mut impl FnMut(&mut D, Option<&[u8]>, &mut [i16]) -> usize,
) {
    let mut rest = packets;
    while let Some(p) = rest.next() {
        match p {
            Packet::Payload(p) => {
                let payload = input.bytes(p);
                let out = output.samples(out_len);
                let r = dec.decode(payload, out);
                if let Ok(n) = r {
                    assert!(n <= out_len, "{n} samples into {out_len}");
                    assert!(n == 0 || !p.is_empty(), "{n} samples from an empty payload");
                }
                check(dec.format(), p, out_len, r);
            }
            Packet::Lost(n) => {
                let next = rest.clone().find_map(|p| match p {
                    Packet::Payload(p) => Some(p),
                    Packet::Lost(_) => None,
                });
                let next = next.map(|p| input.bytes(p));
                let out = output.samples(n);
                let m = lost(dec, next, out);
                assert!(m <= n, "{m} samples concealed into {n}");
            }
        }
    }
}

/// The `lost` of a codec without recovery from the next packet: its concealment.
pub fn conceal<D: Decoder + ?Sized>(dec: &mut D, _next: Option<&[u8]>, out: &mut [i16]) -> usize {
    dec.conceal(out)
}

/// Memory whose end is followed by an unmapped page: a slice handed out ends at that page.
struct Guarded {
    base: *mut u8,
    /// Accessible bytes before the guard page.
    len: usize,
}

impl Guarded {
    fn new(bytes: usize) -> Guarded {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let len = bytes.div_ceil(page) * page;
        // SAFETY: a fresh anonymous mapping; its last page is then made inaccessible.
        unsafe {
            let base = libc::mmap(
                ptr::null_mut(),
                len + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(base != libc::MAP_FAILED, "mmap");
            let base = base.cast::<u8>();
            assert_eq!(
                libc::mprotect(base.add(len).cast(), page, libc::PROT_NONE),
                0
            );
            Guarded { base, len }
        }
    }

    /// `data`, copied to end at the guard page.
    fn bytes(&mut self, data: &[u8]) -> &[u8] {
        assert!(data.len() <= self.len);
        // SAFETY: the last data.len() accessible bytes, borrowed with self.
        unsafe {
            let start = self.base.add(self.len - data.len());
            ptr::copy_nonoverlapping(data.as_ptr(), start, data.len());
            std::slice::from_raw_parts(start, data.len())
        }
    }

    /// `n` samples ending at the guard page, filled with a pattern no decoder relies on.
    fn samples(&mut self, n: usize) -> &mut [i16] {
        assert!(2 * n <= self.len);
        // SAFETY: the last 2n accessible bytes (their end is page-aligned, so they are
        // i16-aligned), borrowed with self.
        let s = unsafe {
            std::slice::from_raw_parts_mut(self.base.add(self.len - 2 * n).cast::<i16>(), n)
        };
        s.fill(0x5a5a);
        s
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: the whole mapping made in new, unmapped once.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE) as usize;
            libc::munmap(self.base.cast(), self.len + page);
        }
    }
}

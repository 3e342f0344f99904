//! SRTP and SRTCP (RFC 3711, RFC 7714). One [`Context`] protects what a leg sends or unprotects
//! what it receives, in place. The protocol layer is written here (key derivation, packet IVs,
//! rollover counting, replay window, trailers); the ciphers are RustCrypto's (`aes` with AES-NI
//! detected at run time, `ctr`, `hmac`, `sha1`, `aes-gcm`), keyed once per master key, so a
//! packet costs its cipher work and no allocation. Keys come from SDES today and from DTLS-SRTP
//! later. libsrtp2 is the reference the tests interoperate with.

use aes::cipher::{InnerIvInit, KeyInit, StreamCipher};
use aes_gcm::aead::AeadInPlace;
use hmac::Mac;
use std::ffi::c_int;
use std::fmt;

mod kdf;
#[cfg(test)]
mod reference;
mod replay;

use kdf::{derive, Label};
use replay::Window;

/// The suites a leg can use; the names are RFC 4568's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Suite {
    AesCm128HmacSha1_80,
    AesCm128HmacSha1_32,
    AeadAes128Gcm,
}

impl Suite {
    /// Master key plus master salt, in bytes.
    pub fn key_len(self) -> usize {
        match self {
            Suite::AesCm128HmacSha1_80 | Suite::AesCm128HmacSha1_32 => 30,
            Suite::AeadAes128Gcm => 28,
        }
    }

    /// Bytes of an SRTP packet's authentication tag.
    fn rtp_tag(self) -> usize {
        match self {
            Suite::AesCm128HmacSha1_80 => 10,
            Suite::AesCm128HmacSha1_32 => 4,
            Suite::AeadAes128Gcm => 16,
        }
    }
}

/// Bytes a protected packet may grow by: the longest tag plus SRTCP's index (no MKI is used).
pub const MAX_TRAILER: usize = 16 + 4;

/// Longest master key plus salt of any [`Suite`].
pub const MAX_KEY_LEN: usize = 30;

/// A fresh master key and salt from the operating system's CSPRNG, long enough for any suite
/// (a shorter suite takes its prefix).
pub fn master_key() -> [u8; MAX_KEY_LEN] {
    let mut key = [0; MAX_KEY_LEN];
    getrandom::fill(&mut key).expect("the operating system's random source failed");
    key
}

/// Why a packet or a context was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The packet failed its authentication tag (a wrong key, or forged).
    Auth,
    /// The packet's index was seen before or is behind the replay window.
    Replay,
    /// A key of the wrong length, a packet too short or without room for the tag
    /// ([`BAD_PARAM`]), or a key used for 2^48 RTP or 2^31 RTCP packets ([`KEY_EXPIRED`]).
    Other(c_int),
}

/// [`Error::Other`]'s code for a malformed key, packet or buffer (libsrtp2's numbering).
pub const BAD_PARAM: c_int = 2;
/// [`Error::Other`]'s code for an exhausted index: the master key must change (RFC 3711 §9.2).
pub const KEY_EXPIRED: c_int = 15;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Auth => f.write_str("SRTP authentication failed"),
            Error::Replay => f.write_str("SRTP packet replayed"),
            Error::Other(code) => write!(f, "SRTP error {code}"),
        }
    }
}

impl std::error::Error for Error {}

/// Which way a context works: it protects what is sent or unprotects what arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Outbound,
    Inbound,
}

type HmacSha1 = hmac::Hmac<sha1::Sha1>;

/// The session keys of SRTP or of SRTCP, with their key schedules done.
enum Keys {
    /// AES_CM_128 with HMAC-SHA1 (RFC 3711 §4.1.1, §4.2.1).
    Cm {
        cipher: aes::Aes128Enc,
        salt: [u8; 14],
        auth: HmacSha1,
    },
    /// AEAD_AES_128_GCM (RFC 7714).
    Gcm {
        aead: aes_gcm::Aes128Gcm,
        salt: [u8; 12],
    },
}

impl Keys {
    fn new(suite: Suite, master: &[u8], rtcp: bool) -> Keys {
        let key: &[u8; 16] = master[..16].try_into().expect("length checked");
        let salt = &master[16..];
        let (cipher_label, auth_label, salt_label) = if rtcp {
            (Label::RtcpCipher, Label::RtcpAuth, Label::RtcpSalt)
        } else {
            (Label::RtpCipher, Label::RtpAuth, Label::RtpSalt)
        };
        let mut session_key = [0u8; 16];
        derive(key, salt, cipher_label, &mut session_key);
        match suite {
            Suite::AeadAes128Gcm => {
                let mut session_salt = [0; 12];
                derive(key, salt, salt_label, &mut session_salt);
                Keys::Gcm {
                    aead: aes_gcm::Aes128Gcm::new(&session_key.into()),
                    salt: session_salt,
                }
            }
            _ => {
                let (mut session_salt, mut auth) = ([0; 14], [0; 20]);
                derive(key, salt, salt_label, &mut session_salt);
                derive(key, salt, auth_label, &mut auth);
                Keys::Cm {
                    cipher: aes::Aes128Enc::new(&session_key.into()),
                    salt: session_salt,
                    auth: <HmacSha1 as hmac::KeyInit>::new_from_slice(&auth)
                        .expect("HMAC takes any key length"),
                }
            }
        }
    }
}

/// The AES-CM counter block (RFC 3711 §4.1.1): salt ⊕ SSRC·2^64 ⊕ index·2^16.
fn cm_iv(salt: &[u8; 14], ssrc: &[u8], index: u64) -> [u8; 16] {
    let mut iv = [0; 16];
    iv[..14].copy_from_slice(salt);
    xor(&mut iv[4..8], ssrc);
    xor(&mut iv[8..14], &index.to_be_bytes()[2..]);
    iv
}

/// The GCM nonce (RFC 7714 §8.1, §9.1): salt ⊕ (0 ‖ SSRC ‖ ROC ‖ SEQ), or for SRTCP
/// salt ⊕ (0 ‖ SSRC ‖ 0 ‖ index); both are the 48-bit index in the low bytes.
fn gcm_iv(
    salt: &[u8; 12],
    ssrc: &[u8],
    index: u64,
) -> aes_gcm::Nonce<aes_gcm::aes::cipher::consts::U12> {
    let mut iv = *salt;
    xor(&mut iv[2..6], ssrc);
    xor(&mut iv[6..12], &index.to_be_bytes()[2..]);
    iv.into()
}

/// XORs AES-CM's keystream from `iv` into `data`; the key schedule is copied, not redone.
fn cm_apply(cipher: &aes::Aes128Enc, iv: [u8; 16], data: &mut [u8]) {
    let core = ctr::CtrCore::<aes::Aes128Enc, ctr::flavors::Ctr128BE>::inner_iv_init(
        cipher.clone(),
        &iv.into(),
    );
    ctr::Ctr128BE::from_core(core).apply_keystream(data);
}

fn xor(into: &mut [u8], with: &[u8]) {
    into.iter_mut().zip(with).for_each(|(a, b)| *a ^= b);
}

/// Length of the RTP header of `p` (fixed part, CSRCs and extension): what stays in clear.
fn rtp_header_len(p: &[u8]) -> Option<usize> {
    let mut n = 12 + 4 * usize::from(p[0] & 0x0f);
    if p[0] & 0x10 != 0 {
        let words = p.get(n + 2..n + 4)?;
        n += 4 + 4 * usize::from(u16::from_be_bytes([words[0], words[1]]));
    }
    (n <= p.len()).then_some(n)
}

/// The E flag of an SRTCP index word: the packet is encrypted.
const E_FLAG: u32 = 1 << 31;
/// SRTCP's header in clear: first word and sender SSRC (RFC 3711 §3.4).
const RTCP_HEADER: usize = 8;
/// SRTCP's tag with AES-CM: always 80 bits (RFC 4568 §6.2.2).
const RTCP_CM_TAG: usize = 10;

/// One direction of one leg's SRTP and SRTCP. The SSRC is part of each packet's IV, so one
/// context serves every SSRC the far end uses and nothing in it grows with forged packets.
pub struct Context {
    suite: Suite,
    rtp: Keys,
    rtcp: Keys,
    rtp_window: Window,
    rtcp_window: Window,
}

impl Context {
    /// A context for `suite` with `key` (master key then salt, `suite.key_len()` bytes).
    /// Either direction holds the same state: a sender also refuses to reuse an index, as a
    /// repeated index with another payload would reuse the key stream.
    pub fn new(suite: Suite, key: &[u8], _direction: Direction) -> Result<Context, Error> {
        if key.len() != suite.key_len() {
            return Err(Error::Other(BAD_PARAM));
        }
        Ok(Context {
            suite,
            rtp: Keys::new(suite, key, false),
            rtcp: Keys::new(suite, key, true),
            rtp_window: Window::default(),
            rtcp_window: Window::default(),
        })
    }

    /// The packet index of the RTP packet `p` if it is new.
    fn rtp_index(&self, p: &[u8]) -> Result<u64, Error> {
        let index = self
            .rtp_window
            .rtp_index(u16::from_be_bytes([p[2], p[3]]))
            .ok_or(Error::Other(KEY_EXPIRED))?;
        if self.rtp_window.check(index) {
            Ok(index)
        } else {
            Err(Error::Replay)
        }
    }

    /// Encrypts and authenticates the RTP packet in `buf[..len]` in place; returns its new
    /// length. `buf` must have [`MAX_TRAILER`] bytes of room after the packet.
    pub fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        if len < 12 || len + MAX_TRAILER > buf.len() {
            return Err(Error::Other(BAD_PARAM));
        }
        let header = rtp_header_len(&buf[..len]).ok_or(Error::Other(BAD_PARAM))?;
        let index = self.rtp_index(buf)?;
        self.rtp_window.accept(index);
        let tag = self.suite.rtp_tag();
        let (packet, trailer) = buf.split_at_mut(len);
        let ssrc = [packet[8], packet[9], packet[10], packet[11]];
        match &self.rtp {
            Keys::Cm { cipher, salt, auth } => {
                cm_apply(cipher, cm_iv(salt, &ssrc, index), &mut packet[header..]);
                let mut mac = auth.clone();
                mac.update(packet);
                mac.update(&((index >> 16) as u32).to_be_bytes());
                trailer[..tag].copy_from_slice(&mac.finalize().into_bytes()[..tag]);
            }
            Keys::Gcm { aead, salt } => {
                let (aad, body) = packet.split_at_mut(header);
                let sealed = aead
                    .encrypt_in_place_detached(&gcm_iv(salt, &ssrc, index), aad, body)
                    .map_err(|_| Error::Other(BAD_PARAM))?;
                trailer[..tag].copy_from_slice(&sealed);
            }
        }
        Ok(len + tag)
    }

    /// Checks and decrypts the SRTP packet `buf` in place; returns the RTP packet's length.
    pub fn unprotect(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        let tag = self.suite.rtp_tag();
        if buf.len() < 12 + tag {
            return Err(Error::Other(BAD_PARAM));
        }
        let len = buf.len() - tag;
        let header = rtp_header_len(&buf[..len]).ok_or(Error::Other(BAD_PARAM))?;
        let index = self.rtp_index(buf)?;
        let (packet, trailer) = buf.split_at_mut(len);
        let ssrc = [packet[8], packet[9], packet[10], packet[11]];
        match &self.rtp {
            Keys::Cm { cipher, salt, auth } => {
                let mut mac = auth.clone();
                mac.update(packet);
                mac.update(&((index >> 16) as u32).to_be_bytes());
                mac.verify_truncated_left(trailer)
                    .map_err(|_| Error::Auth)?;
                cm_apply(cipher, cm_iv(salt, &ssrc, index), &mut packet[header..]);
            }
            Keys::Gcm { aead, salt } => {
                let (aad, body) = packet.split_at_mut(header);
                aead.decrypt_in_place_detached(
                    &gcm_iv(salt, &ssrc, index),
                    aad,
                    body,
                    (&*trailer).into(),
                )
                .map_err(|_| Error::Auth)?;
            }
        }
        self.rtp_window.accept(index);
        Ok(len)
    }

    /// [`Context::protect`] for a compound RTCP packet: encrypted, with the E flag and the
    /// 31-bit SRTCP index appended (RFC 3711 §3.4).
    pub fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        if len < 12 || len + MAX_TRAILER > buf.len() {
            return Err(Error::Other(BAD_PARAM));
        }
        let index = self
            .rtcp_window
            .next_rtcp_index()
            .ok_or(Error::Other(KEY_EXPIRED))?;
        self.rtcp_window.accept(index);
        let word = (E_FLAG | index as u32).to_be_bytes();
        let (packet, trailer) = buf.split_at_mut(len);
        let ssrc = [packet[4], packet[5], packet[6], packet[7]];
        match &self.rtcp {
            Keys::Cm { cipher, salt, auth } => {
                cm_apply(
                    cipher,
                    cm_iv(salt, &ssrc, index),
                    &mut packet[RTCP_HEADER..],
                );
                trailer[..4].copy_from_slice(&word);
                let mut mac = auth.clone();
                mac.update(packet);
                mac.update(&word);
                let tag = mac.finalize().into_bytes();
                trailer[4..4 + RTCP_CM_TAG].copy_from_slice(&tag[..RTCP_CM_TAG]);
                Ok(len + 4 + RTCP_CM_TAG)
            }
            Keys::Gcm { aead, salt } => {
                let (head, body) = packet.split_at_mut(RTCP_HEADER);
                let aad = rtcp_gcm_aad(head, word);
                let sealed = aead
                    .encrypt_in_place_detached(&gcm_iv(salt, &ssrc, index), &aad, body)
                    .map_err(|_| Error::Other(BAD_PARAM))?;
                trailer[..16].copy_from_slice(&sealed);
                trailer[16..20].copy_from_slice(&word);
                Ok(len + 20)
            }
        }
    }

    /// [`Context::unprotect`] for an SRTCP packet.
    pub fn unprotect_rtcp(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        let (tag, gcm) = match self.rtcp {
            Keys::Cm { .. } => (RTCP_CM_TAG, false),
            Keys::Gcm { .. } => (16, true),
        };
        if buf.len() < RTCP_HEADER + 4 + tag {
            return Err(Error::Other(BAD_PARAM));
        }
        let len = buf.len() - 4 - tag;
        // AES-CM: index word then tag; GCM: tag then index word (RFC 7714 §9.3).
        let at = if gcm { buf.len() - 4 } else { len };
        let word = u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let index = u64::from(word & !E_FLAG);
        if !self.rtcp_window.check(index) {
            return Err(Error::Replay);
        }
        let (packet, trailer) = buf.split_at_mut(len);
        let ssrc = [packet[4], packet[5], packet[6], packet[7]];
        match &self.rtcp {
            Keys::Cm { cipher, salt, auth } => {
                let mut mac = auth.clone();
                mac.update(packet);
                mac.update(&trailer[..4]);
                mac.verify_truncated_left(&trailer[4..])
                    .map_err(|_| Error::Auth)?;
                if word & E_FLAG != 0 {
                    cm_apply(
                        cipher,
                        cm_iv(salt, &ssrc, index),
                        &mut packet[RTCP_HEADER..],
                    );
                }
            }
            Keys::Gcm { aead, salt } => {
                // Unencrypted SRTCP under GCM (the whole packet as AAD) is never sent by a
                // context of this crate, and refused rather than assembled per packet.
                if word & E_FLAG == 0 {
                    return Err(Error::Auth);
                }
                let (head, body) = packet.split_at_mut(RTCP_HEADER);
                let aad = rtcp_gcm_aad(head, word.to_be_bytes());
                aead.decrypt_in_place_detached(
                    &gcm_iv(salt, &ssrc, index),
                    &aad,
                    body,
                    (&trailer[..16]).into(),
                )
                .map_err(|_| Error::Auth)?;
            }
        }
        self.rtcp_window.accept(index);
        Ok(len)
    }
}

/// SRTCP's GCM associated data: the clear header, then the E flag and index (RFC 7714 §9.1).
fn rtcp_gcm_aad(head: &[u8], word: [u8; 4]) -> [u8; 12] {
    let mut aad = [0; 12];
    aad[..8].copy_from_slice(head);
    aad[8..].copy_from_slice(&word);
    aad
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Context({:?}, <keyed>)", self.suite)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITES: [Suite; 3] = [
        Suite::AesCm128HmacSha1_80,
        Suite::AesCm128HmacSha1_32,
        Suite::AeadAes128Gcm,
    ];

    fn rtp(seq: u16, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x80, 0, 0, 0, 0, 0, 0, 160, 0x12, 0x34, 0x56, 0x78];
        p[2..4].copy_from_slice(&seq.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    fn pair(suite: Suite, key: &[u8]) -> (Context, Context) {
        let key = &key[..suite.key_len()];
        (
            Context::new(suite, key, Direction::Outbound).unwrap(),
            Context::new(suite, key, Direction::Inbound).unwrap(),
        )
    }

    /// Protects `packet` into a buffer with room for the trailer.
    fn seal(tx: &mut Context, packet: &[u8]) -> Vec<u8> {
        let mut buf = packet.to_vec();
        buf.resize(packet.len() + MAX_TRAILER, 0);
        let n = tx.protect(&mut buf, packet.len()).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn every_suite_round_trips_and_hides_the_payload() {
        let key = master_key();
        let voice = [0xd5u8; 160];
        for suite in SUITES {
            let (mut tx, mut rx) = pair(suite, &key);
            let plain = rtp(1, &voice);
            let mut wire = seal(&mut tx, &plain);
            let tag = match suite {
                Suite::AesCm128HmacSha1_80 => 10,
                Suite::AesCm128HmacSha1_32 => 4,
                Suite::AeadAes128Gcm => 16,
            };
            assert_eq!(wire.len(), plain.len() + tag, "{suite:?}");
            assert_eq!(wire[..12], plain[..12], "the header stays readable");
            assert_ne!(wire[12..172], voice, "{suite:?} left the payload in clear");
            let n = rx.unprotect(&mut wire).unwrap();
            assert_eq!(wire[..n], plain[..], "{suite:?}");
        }
    }

    #[test]
    fn a_wrong_key_or_a_flipped_bit_fails_authentication() {
        let (mut tx, _) = pair(Suite::AesCm128HmacSha1_80, &master_key());
        let (_, mut other) = pair(Suite::AesCm128HmacSha1_80, &master_key());
        let wire = seal(&mut tx, &rtp(7, &[1; 20]));
        assert_eq!(other.unprotect(&mut wire.clone()), Err(Error::Auth));
        let (mut tx, mut rx) = pair(Suite::AesCm128HmacSha1_80, &master_key());
        let mut wire = seal(&mut tx, &rtp(7, &[1; 20]));
        wire[20] ^= 1;
        assert_eq!(rx.unprotect(&mut wire), Err(Error::Auth));
    }

    #[test]
    fn a_replayed_packet_is_refused_and_the_stream_goes_on() {
        let (mut tx, mut rx) = pair(Suite::AesCm128HmacSha1_32, &master_key());
        let first = seal(&mut tx, &rtp(100, &[2; 40]));
        assert!(rx.unprotect(&mut first.clone()).is_ok());
        assert_eq!(rx.unprotect(&mut first.clone()), Err(Error::Replay));
        let next = seal(&mut tx, &rtp(101, &[3; 40]));
        assert!(rx.unprotect(&mut next.clone()).is_ok());
    }

    #[test]
    fn sequence_rollover_keeps_the_stream_readable() {
        // Across 65535 → 0 the rollover counter goes up on both sides (RFC 3711 §3.3.1).
        let (mut tx, mut rx) = pair(Suite::AesCm128HmacSha1_80, &master_key());
        for seq in [65533u16, 65534, 65535, 0, 1, 2] {
            let plain = rtp(seq, &[seq as u8; 30]);
            let mut wire = seal(&mut tx, &plain);
            let n = rx.unprotect(&mut wire).unwrap();
            assert_eq!(wire[..n], plain[..], "seq {seq}");
        }
    }

    #[test]
    fn rtcp_round_trips() {
        for suite in SUITES {
            let (mut tx, mut rx) = pair(suite, &master_key());
            // An empty receiver report with a CNAME-less SDES is enough for the library.
            let rr = [0x80, 201, 0, 1, 0x12, 0x34, 0x56, 0x78];
            let mut buf = rr.to_vec();
            buf.extend_from_slice(&[0; 4]); // pad to 12 bytes of input
            buf[3] = 2;
            let plain = buf.clone();
            buf.resize(plain.len() + MAX_TRAILER, 0);
            let n = tx.protect_rtcp(&mut buf, plain.len()).unwrap();
            buf.truncate(n);
            assert!(n > plain.len() + 4, "{suite:?}: index and tag appended");
            let m = rx.unprotect_rtcp(&mut buf).unwrap();
            assert_eq!(buf[..m], plain[..], "{suite:?}");
        }
    }

    #[test]
    fn keys_of_the_wrong_length_and_short_buffers_are_refused() {
        let key = master_key();
        assert!(Context::new(Suite::AeadAes128Gcm, &key, Direction::Outbound).is_err());
        let (mut tx, _) = pair(Suite::AesCm128HmacSha1_80, &key);
        let mut tight = rtp(1, &[0; 10]);
        let len = tight.len();
        assert!(tx.protect(&mut tight, len).is_err(), "no room for the tag");
        assert_ne!(master_key(), master_key());
    }

    /// Seals with `seal` and opens with `open` across a sequence-number rollover, RTP and RTCP,
    /// checking every packet came back as sent. Callers pass one side ours, one libsrtp2's.
    fn interoperate<S, O>(suite: Suite, mut seal: S, mut open: O)
    where
        S: FnMut(&mut [u8], usize, bool) -> Result<usize, Error>,
        O: FnMut(&mut [u8], bool) -> Result<usize, Error>,
    {
        for n in 0..600u32 {
            let seq = (65_200 + n) as u16;
            let mut plain = rtp(seq, &[(n % 251) as u8; 160]);
            if n % 3 == 0 {
                // A CSRC and a header extension, which stay in clear.
                plain[0] |= 0x11;
                plain.splice(12..12, [0, 0, 0, 9, 0xbe, 0xde, 0, 1, 1, 2, 3, 4]);
            }
            let rtcp = n % 50 == 0;
            if rtcp {
                plain = vec![0x80, 201, 0, 2, 0x12, 0x34, 0x56, 0x78, 0, 0, 0, n as u8];
            }
            let mut buf = plain.clone();
            buf.resize(plain.len() + MAX_TRAILER, 0);
            let len = seal(&mut buf, plain.len(), rtcp).unwrap();
            buf.truncate(len);
            assert_ne!(buf[plain.len() - 4..plain.len()], plain[plain.len() - 4..]);
            let m = open(&mut buf, rtcp).unwrap_or_else(|e| panic!("{suite:?} #{n}: {e}"));
            assert_eq!(buf[..m], plain[..], "{suite:?} #{n}");
        }
    }

    #[test]
    fn libsrtp2_opens_what_we_seal_and_we_open_what_it_seals() {
        use crate::reference::Reference;
        for suite in SUITES {
            let key = &master_key()[..suite.key_len()];
            let mut ours = Context::new(suite, key, Direction::Outbound).unwrap();
            let mut theirs = Reference::new(suite, key, Direction::Inbound).unwrap();
            interoperate(
                suite,
                |b, l, rtcp| {
                    if rtcp {
                        ours.protect_rtcp(b, l)
                    } else {
                        ours.protect(b, l)
                    }
                },
                |b, rtcp| {
                    if rtcp {
                        theirs.unprotect_rtcp(b)
                    } else {
                        theirs.unprotect(b)
                    }
                },
            );
            let mut theirs = Reference::new(suite, key, Direction::Outbound).unwrap();
            let mut ours = Context::new(suite, key, Direction::Inbound).unwrap();
            interoperate(
                suite,
                |b, l, rtcp| {
                    if rtcp {
                        theirs.protect_rtcp(b, l)
                    } else {
                        theirs.protect(b, l)
                    }
                },
                |b, rtcp| {
                    if rtcp {
                        ours.unprotect_rtcp(b)
                    } else {
                        ours.unprotect(b)
                    }
                },
            );
        }
    }

    #[test]
    fn forged_packets_move_neither_the_window_nor_the_rollover_counter() {
        let (mut tx, mut rx) = pair(Suite::AesCm128HmacSha1_80, &master_key());
        let genuine = seal(&mut tx, &rtp(10, &[5; 20]));
        // The same packet moved far ahead: its tag no longer matches.
        let mut forged = genuine.clone();
        forged[2..4].copy_from_slice(&40_000u16.to_be_bytes());
        assert_eq!(rx.unprotect(&mut forged), Err(Error::Auth));
        assert_eq!(rx.unprotect(&mut genuine.clone()), Ok(32));
        let next = seal(&mut tx, &rtp(11, &[7; 20]));
        assert_eq!(rx.unprotect(&mut next.clone()), Ok(32));
    }
}

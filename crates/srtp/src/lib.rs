//! SRTP and SRTCP (RFC 3711, RFC 7714) through Debian's libsrtp2, the reference implementation
//! most softswitches and browsers use: this crate is the small binding, no cipher is written
//! here. One [`Context`] protects what a leg sends or unprotects what it receives, in place,
//! with the library's replay window and rollover counting; keys come from SDES today and from
//! DTLS-SRTP later.

use std::ffi::{c_int, c_uint, c_ulong, c_void};
use std::fmt;
use std::sync::Once;

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
    /// A key of the wrong length, a packet too short or without room for the tag, or another
    /// failure the library reported (its status code).
    Other(c_int),
}

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

#[repr(C)]
#[derive(Default)]
struct CryptoPolicy {
    cipher_type: u32,
    cipher_key_len: c_int,
    auth_type: u32,
    auth_key_len: c_int,
    auth_tag_len: c_int,
    sec_serv: c_int,
}

#[repr(C)]
struct Ssrc {
    kind: c_int,
    value: c_uint,
}

/// `srtp_policy_t` of libsrtp 2.x (srtp2/srtp.h).
#[repr(C)]
struct Policy {
    ssrc: Ssrc,
    rtp: CryptoPolicy,
    rtcp: CryptoPolicy,
    key: *const u8,
    keys: *mut c_void,
    num_master_keys: c_ulong,
    deprecated_ekt: *mut c_void,
    window_size: c_ulong,
    allow_repeat_tx: c_int,
    enc_xtn_hdr: *mut c_int,
    enc_xtn_hdr_count: c_int,
    next: *mut Policy,
}

const SSRC_ANY_INBOUND: c_int = 2;
const SSRC_ANY_OUTBOUND: c_int = 3;
const STATUS_AUTH_FAIL: c_int = 7;
const STATUS_REPLAY_FAIL: c_int = 9;
const STATUS_REPLAY_OLD: c_int = 10;
const STATUS_BAD_PARAM: c_int = 2;
/// Replay window in packets (RFC 3711 §3.3.2 asks for at least 64).
const REPLAY_WINDOW: c_ulong = 1024;

extern "C" {
    fn srtp_init() -> c_int;
    fn srtp_create(session: *mut *mut c_void, policy: *const Policy) -> c_int;
    fn srtp_dealloc(session: *mut c_void) -> c_int;
    fn srtp_protect(ctx: *mut c_void, hdr: *mut c_void, len: *mut c_int) -> c_int;
    fn srtp_unprotect(ctx: *mut c_void, hdr: *mut c_void, len: *mut c_int) -> c_int;
    fn srtp_protect_rtcp(ctx: *mut c_void, hdr: *mut c_void, len: *mut c_int) -> c_int;
    fn srtp_unprotect_rtcp(ctx: *mut c_void, hdr: *mut c_void, len: *mut c_int) -> c_int;
    fn srtp_crypto_policy_set_rtp_default(p: *mut CryptoPolicy);
    fn srtp_crypto_policy_set_rtcp_default(p: *mut CryptoPolicy);
    fn srtp_crypto_policy_set_aes_cm_128_hmac_sha1_32(p: *mut CryptoPolicy);
    fn srtp_crypto_policy_set_aes_gcm_128_16_auth(p: *mut CryptoPolicy);
}

/// Which way a context works: it protects what is sent or unprotects what arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Outbound,
    Inbound,
}

/// One direction of one leg's SRTP and SRTCP, for every SSRC the far end uses.
pub struct Context {
    raw: *mut c_void,
}

// The session is only ever used by the thread that owns the leg.
unsafe impl Send for Context {}

impl Context {
    /// A context for `suite` with `key` (master key then salt, `suite.key_len()` bytes).
    pub fn new(suite: Suite, key: &[u8], direction: Direction) -> Result<Context, Error> {
        static INIT: Once = Once::new();
        INIT.call_once(|| {
            // SAFETY: called once, before any other libsrtp call of the process.
            let status = unsafe { srtp_init() };
            assert_eq!(status, 0, "libsrtp2 failed to start");
        });
        if key.len() != suite.key_len() {
            return Err(Error::Other(STATUS_BAD_PARAM));
        }
        let mut rtp = CryptoPolicy::default();
        let mut rtcp = CryptoPolicy::default();
        // SAFETY: each setter fills the struct it is given.
        unsafe {
            match suite {
                Suite::AesCm128HmacSha1_80 => srtp_crypto_policy_set_rtp_default(&mut rtp),
                // RFC 4568 §6.2.2: the 32-bit tag is for SRTP; SRTCP keeps 80 bits.
                Suite::AesCm128HmacSha1_32 => {
                    srtp_crypto_policy_set_aes_cm_128_hmac_sha1_32(&mut rtp)
                }
                Suite::AeadAes128Gcm => srtp_crypto_policy_set_aes_gcm_128_16_auth(&mut rtp),
            }
            match suite {
                Suite::AeadAes128Gcm => srtp_crypto_policy_set_aes_gcm_128_16_auth(&mut rtcp),
                _ => srtp_crypto_policy_set_rtcp_default(&mut rtcp),
            }
        }
        let policy = Policy {
            ssrc: Ssrc {
                kind: match direction {
                    Direction::Outbound => SSRC_ANY_OUTBOUND,
                    Direction::Inbound => SSRC_ANY_INBOUND,
                },
                value: 0,
            },
            rtp,
            rtcp,
            key: key.as_ptr(),
            keys: std::ptr::null_mut(),
            num_master_keys: 0,
            deprecated_ekt: std::ptr::null_mut(),
            window_size: REPLAY_WINDOW,
            // Never: a repeated index with another payload would reuse the key stream.
            allow_repeat_tx: 0,
            enc_xtn_hdr: std::ptr::null_mut(),
            enc_xtn_hdr_count: 0,
            next: std::ptr::null_mut(),
        };
        let mut raw = std::ptr::null_mut();
        // SAFETY: the policy and key outlive the call; libsrtp copies what it keeps.
        let status = unsafe { srtp_create(&mut raw, &policy) };
        if status != 0 {
            return Err(Error::Other(status));
        }
        Ok(Context { raw })
    }

    /// Encrypts and authenticates the RTP packet in `buf[..len]` in place; returns its new
    /// length. `buf` must have [`MAX_TRAILER`] bytes of room after the packet.
    pub fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        self.call(srtp_protect, buf, len, true)
    }

    /// Checks and decrypts the SRTP packet `buf` in place; returns the RTP packet's length.
    pub fn unprotect(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        self.call(srtp_unprotect, buf, buf.len(), false)
    }

    /// [`Context::protect`] for a compound RTCP packet.
    pub fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        self.call(srtp_protect_rtcp, buf, len, true)
    }

    /// [`Context::unprotect`] for an SRTCP packet.
    pub fn unprotect_rtcp(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        self.call(srtp_unprotect_rtcp, buf, buf.len(), false)
    }

    fn call(
        &mut self,
        f: unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_int) -> c_int,
        buf: &mut [u8],
        len: usize,
        grows: bool,
    ) -> Result<usize, Error> {
        // libsrtp reads a whole header before checking lengths; 12 bytes is RTP's fixed header
        // and covers RTCP's 8 plus the SSRC.
        let room = if grows { MAX_TRAILER } else { 0 };
        if len < 12 || len + room > buf.len() || len > c_int::MAX as usize {
            return Err(Error::Other(STATUS_BAD_PARAM));
        }
        let mut n = len as c_int;
        // SAFETY: `buf` holds `len` bytes and, when protecting, room for the trailer.
        let status = unsafe { f(self.raw, buf.as_mut_ptr().cast(), &mut n) };
        match status {
            0 => Ok(n as usize),
            STATUS_AUTH_FAIL => Err(Error::Auth),
            STATUS_REPLAY_FAIL | STATUS_REPLAY_OLD => Err(Error::Replay),
            other => Err(Error::Other(other)),
        }
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `raw` came from srtp_create and is freed once.
        unsafe { srtp_dealloc(self.raw) };
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Context(<keyed>)")
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
}

//! Debian's libsrtp2 (libsrtp2-dev; scripts/setup.sh installs it), the reference
//! implementation most softswitches and browsers use, bound for the tests alone: what
//! [`crate::Context`] seals it must open, and the reverse.

use crate::{Direction, Error, Suite, BAD_PARAM, MAX_TRAILER};
use std::ffi::{c_int, c_uint, c_ulong, c_void};
use std::sync::Once;

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
/// Replay window in packets (RFC 3711 §3.3.2 asks for at least 64).
const REPLAY_WINDOW: c_ulong = 1024;

#[link(name = "srtp2")]
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

/// A libsrtp2 session for one direction, every SSRC.
pub(crate) struct Reference {
    raw: *mut c_void,
}

impl Reference {
    /// A context for `suite` with `key` (master key then salt, `suite.key_len()` bytes).
    pub(crate) fn new(suite: Suite, key: &[u8], direction: Direction) -> Result<Reference, Error> {
        static INIT: Once = Once::new();
        INIT.call_once(|| {
            // SAFETY: called once, before any other libsrtp call of the process.
            let status = unsafe { srtp_init() };
            assert_eq!(status, 0, "libsrtp2 failed to start");
        });
        if key.len() != suite.key_len() {
            return Err(Error::Other(BAD_PARAM));
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
        Ok(Reference { raw })
    }

    /// Encrypts and authenticates the RTP packet in `buf[..len]` in place; returns its new
    /// length. `buf` must have [`MAX_TRAILER`] bytes of room after the packet.
    pub(crate) fn protect(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        self.call(srtp_protect, buf, len, true)
    }

    /// Checks and decrypts the SRTP packet `buf` in place; returns the RTP packet's length.
    pub(crate) fn unprotect(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
        self.call(srtp_unprotect, buf, buf.len(), false)
    }

    /// [`Reference::protect`] for a compound RTCP packet.
    pub(crate) fn protect_rtcp(&mut self, buf: &mut [u8], len: usize) -> Result<usize, Error> {
        self.call(srtp_protect_rtcp, buf, len, true)
    }

    /// [`Reference::unprotect`] for an SRTCP packet.
    pub(crate) fn unprotect_rtcp(&mut self, buf: &mut [u8]) -> Result<usize, Error> {
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
            return Err(Error::Other(BAD_PARAM));
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

impl Drop for Reference {
    fn drop(&mut self) {
        // SAFETY: `raw` came from srtp_create and is freed once.
        unsafe { srtp_dealloc(self.raw) };
    }
}

//! MD5 (RFC 1321) for IAX2's MD5 challenge/response and HMAC-MD5 (RFC 2104) for call tokens,
//! over the RustCrypto `md-5` and `hmac` crates. IAX2 fixes MD5 on the wire; HMAC-MD5 is used
//! only as a keyed PRF for the stateless call tokens, where MD5's collision weakness does not
//! apply.

use hmac::{Hmac, KeyInit, Mac};
use md5::{Digest, Md5};

/// HMAC-MD5 (RFC 2104) of `msg`'s parts concatenated.
pub fn hmac_md5(key: &[u8], msg: &[&[u8]]) -> [u8; 16] {
    let mut mac = <Hmac<Md5> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    for part in msg {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Lower-case hex, as IAX2 carries the MD5 result.
pub fn hex(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(D[(b >> 4) as usize] as char);
        s.push(D[(b & 15) as usize] as char);
    }
    s
}

/// The IAX2 MD5 authentication result: hex(md5(challenge + secret)) (RFC 5456 §6.2.3).
pub fn md5_result(challenge: &str, secret: &str) -> String {
    let mut h = Md5::new();
    h.update(challenge.as_bytes());
    h.update(secret.as_bytes());
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc1321_vectors() {
        let cases: [(&str, &str); 7] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(md5_result(input, ""), want, "md5({input:?})");
        }
        // The challenge and the secret hash as one string.
        assert_eq!(
            md5_result("mess", "age digest"),
            "f96b697d7cb7938d525a2f31aaf161d0"
        );
    }

    #[test]
    fn rfc2104_hmac_vectors() {
        // RFC 2104 appendix, then RFC 2202 §2 test case 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_md5(&[0x0b; 16], &[b"Hi There"])),
            "9294727a3638bb1c13f48ef8158bfc9d"
        );
        assert_eq!(
            hex(&hmac_md5(b"Jefe", &[b"what do ya want for nothing?"])),
            "750c783e6ab0b503eaa86e310a5db738"
        );
        assert_eq!(
            hex(&hmac_md5(&[0xaa; 16], &[&[0xdd; 50]])),
            "56be34521d144c88dbb8c733f0e8b3f6"
        );
        assert_eq!(
            hex(&hmac_md5(
                &[0xaa; 80],
                &[b"Test Using Larger Than Block-Size Key - Hash Key First"]
            )),
            "6b1ab7fe4bd7bf8f0b62e6ce61b9d0cd"
        );
        // The message's parts are MACed as one.
        assert_eq!(
            hmac_md5(b"Jefe", &[b"what do ya ", b"want for nothing?"]),
            hmac_md5(b"Jefe", &[b"what do ya want for nothing?"])
        );
    }
}

//! Session keys from the master key and salt (RFC 3711 §4.3): the AES-CM PRF keyed with the
//! master key, key derivation rate 0, so each key is derived once per master key.

use aes::cipher::{KeyIvInit, StreamCipher};

/// What a derived key is for (§4.3.2's labels).
#[derive(Clone, Copy)]
pub(crate) enum Label {
    RtpCipher = 0,
    RtpAuth = 1,
    RtpSalt = 2,
    RtcpCipher = 3,
    RtcpAuth = 4,
    RtcpSalt = 5,
}

/// Fills `out` with the key `label` names. `salt` is the 112-bit master salt, or GCM's 96-bit
/// one (RFC 7714 §11 pads it with zeros, as libsrtp2 does).
pub(crate) fn derive(master_key: &[u8; 16], salt: &[u8], label: Label, out: &mut [u8]) {
    let mut iv = [0u8; 16];
    iv[..salt.len()].copy_from_slice(salt);
    // key_id = label || r (48 bits, zero at rate 0), XORed into the salt's low 56 bits.
    iv[7] ^= label as u8;
    out.fill(0);
    ctr::Ctr128BE::<aes::Aes128>::new(master_key.into(), &iv.into()).apply_keystream(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 3711 Appendix B.3.
    #[test]
    fn appendix_b3_key_derivation() {
        let key: [u8; 16] = hex("E1F97A0D3E018BE0D64FA32C06DE4139").try_into().unwrap();
        let salt = hex("0EC675AD498AFEEBB6960B3AABE6");
        let mut cipher = [0; 16];
        derive(&key, &salt, Label::RtpCipher, &mut cipher);
        assert_eq!(cipher[..], hex("C61E7A93744F39EE10734AFE3FF7A087"));
        let mut s = [0; 14];
        derive(&key, &salt, Label::RtpSalt, &mut s);
        assert_eq!(s[..], hex("30CBBC08863D8C85D49DB34A9AE1"));
        let mut auth = [0; 94];
        derive(&key, &salt, Label::RtpAuth, &mut auth);
        assert_eq!(
            auth[..],
            hex(concat!(
                "CEBE321F6FF7716B6FD4AB49AF256A156D38BAA48F0A0ACF3C34E2359E6CDBCE",
                "E049646C43D9327AD175578EF7227098",
                "6371C10C9A369AC2F94A8C5FBCDDDC256D6E919A48B610EF17C2041E47403576",
                "6B68642C59BBFC2F34DB60DBDFB2"
            ))
        );
    }

    /// RFC 3711 Appendix B.2: the keystream is AES in counter mode from the packet IV.
    #[test]
    fn appendix_b2_aes_cm_keystream() {
        let key = hex("2B7E151628AED2A6ABF7158809CF4F3C");
        let iv = hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD0000");
        let mut ks = [0u8; 48];
        ctr::Ctr128BE::<aes::Aes128>::new(key[..].into(), iv[..].into()).apply_keystream(&mut ks);
        assert_eq!(
            ks[..],
            hex(concat!(
                "E03EAD0935C95E80E166B16DD92B4EB4",
                "D23513162B02D0F72A43A2FE4A5F97AB",
                "41E95B3BB0A2E8DD477901E4FCA894C0"
            ))
        );
    }
}

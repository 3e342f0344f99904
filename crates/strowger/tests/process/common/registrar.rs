//! The registrar's test steps shared by the registrar and location-store tests: a config per
//! store backend, SIPp phones that REGISTER with digest authentication and answer calls, and
//! calls placed to registered users.

use super::net::free_port;
use super::sip::{sdp, uri_of, Rtp, Uac, PCMU};
use super::sipp::{Scenario, Sipp, SippResult};
use super::switch::{config_path, Opts};
use super::Strowger;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// tests/configs/registrar.toml with `registrar.store` set to `store`, written into `dir`.
pub fn write_config(dir: &Path, store: &str) -> PathBuf {
    let template = std::fs::read_to_string(config_path("registrar.toml")).unwrap();
    let text: String = template
        .lines()
        .map(|l| {
            if l.starts_with("store = ") {
                format!("store = \"{store}\"\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = dir.join(format!("registrar-{}.toml", free_port()));
    std::fs::write(&path, text).unwrap();
    path
}

pub fn start(label: &str, config: &Path) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config.to_path_buf()),
            ..Opts::default()
        },
    )
}

/// REGISTERs `user` from 127.0.0.1:`port` with `password` (tests/sipp/register.xml: 401, then
/// credentials, then 200 or 403).
pub fn register(s: &Strowger, user: &str, password: &str, port: u16) -> SippResult {
    Sipp::new(Scenario::File("register.xml"))
        .service(user)
        .port(port)
        .arg("-au")
        .arg(user)
        .arg("-ap")
        .arg(password)
        .run(s.sip, s.dir.path())
}

/// The final responses SIPp received for its authenticated REGISTER (CSeq 2).
pub fn finals(r: &SippResult) -> Vec<super::sip::Msg> {
    r.received()
        .into_iter()
        .filter(|m| m.status().is_some_and(|s| s >= 200))
        .filter(|m| m.header("cseq").is_some_and(|c| c.starts_with('2')))
        .collect()
}

/// The contacts listed in the (single) 200 of a REGISTER run.
pub fn contacts_in_200(r: &SippResult) -> Vec<String> {
    let f = finals(r);
    assert!(
        f.len() == 1 && f[0].status() == Some(200),
        "want one 200 to the authenticated REGISTER, got {f:#?}\n{}",
        r.evidence()
    );
    f[0].headers("contact")
        .iter()
        .flat_map(|v| v.split(','))
        .map(uri_of)
        .collect()
}

pub fn registered(s: &Strowger, user: &str, password: &str, port: u16) {
    let r = register(s, user, password, port);
    r.assert_ok(1);
    let contacts = contacts_in_200(&r);
    assert_eq!(
        contacts,
        [format!("sip:{user}@127.0.0.1:{port}")],
        "the 200 lists the new binding\n{}",
        r.evidence()
    );
}

/// The phone registered from `port` as a SIPp uas (it answers one call).
pub fn phone(s: &Strowger, port: u16) -> super::sipp::SippProcess {
    let p = Sipp::new(Scenario::Builtin("uas"))
        .port(port)
        .spawn(None, s.dir.path());
    std::thread::sleep(Duration::from_millis(300)); // let it bind
    p
}

/// A SIPp uac calls `user`; the phone at `port` answers, and the call's CDR (the `n`th of this
/// strowger) shows it bridged to the registered contact.
pub fn call_answered_by(
    s: &Strowger,
    user: &str,
    uas: super::sipp::SippProcess,
    port: u16,
    n: usize,
) {
    Sipp::new(Scenario::Builtin("uac"))
        .service(user)
        .duration_ms(500)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    uas.finish().assert_ok(1);
    let cdrs = s.wait_cdrs(n);
    assert_eq!(cdrs.len(), n, "{cdrs:#?}");
    let c = &cdrs[n - 1];
    c.assert_answered(user);
    assert_eq!(
        c.str("bridged_to"),
        format!("sip:{user}@127.0.0.1:{port}"),
        "{c:?}"
    );
}

pub fn call_phone(s: &Strowger, user: &str, port: u16, n: usize) {
    let uas = phone(s, port);
    call_answered_by(s, user, uas, port, n);
}

/// The final status of an INVITE to `exten` from the hand client.
pub fn invite_status(s: &Strowger, exten: &str) -> Option<u16> {
    let rtp = Rtp::bind();
    let mut uac = Uac::new(s.sip, exten);
    uac.invite(&sdp(rtp.port, &[PCMU], "sendrecv")).status()
}

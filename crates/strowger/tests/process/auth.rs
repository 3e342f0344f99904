//! Calls are authenticated, against the strowger process with the default configuration (nobody
//! trusted by address): a real SIPp answers the 401 to its INVITE with a user's credentials and
//! is bridged with the user's caller ID; strangers get the same 401 for every extension outside
//! the public context and the same 403 for a wrong password or an unknown user, which the
//! security log records; no response names strowger's version.

use crate::common;

use common::sip::{Msg, Uac};
use common::sipp::{Scenario, Sipp, SippResult};
use common::switch::Opts;
use common::{Strowger, TempDir};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The embedded configuration with user 1001 (password "pw-1001", caller ID "Front Desk"
/// 5550100), written to `dir`.
fn config(dir: &Path) -> PathBuf {
    let text = include_str!("../../../switch/src/default.toml").to_string()
        + "\n[[users]]\nuser = \"1001\"\npassword = \"pw-1001\"\n\
           caller_id = \"\\\"Front Desk\\\" <5550100>\"\n";
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(label: &str, dir: &TempDir, vars: Vec<(String, String)>) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config(dir.path())),
            vars,
            ..Opts::default()
        },
    )
}

/// SIPp (tests/sipp/uac_auth.xml) calls `exten` as `user` with `password`.
fn sipp_call(s: &Strowger, exten: &str, user: &str, password: &str) -> SippResult {
    Sipp::new(Scenario::File("uac_auth.xml"))
        .service(exten)
        .args(&["-au", user, "-ap", password])
        .duration_ms(300)
        .run(s.sip, s.dir.path())
}

/// A response as a caller could tell it from another: status line, header names in order, and
/// the values of the headers not copied from the request, the nonce blanked.
fn shape(m: &Msg) -> Vec<String> {
    let mut out = vec![m.start.clone()];
    for (name, value) in &m.headers {
        let value = match name.as_str() {
            "via" | "from" | "to" | "call-id" | "cseq" => String::new(),
            "www-authenticate" => {
                let nonce = value
                    .split("nonce=\"")
                    .nth(1)
                    .and_then(|v| v.split('"').next());
                value.replace(nonce.unwrap_or("-"), "NONCE")
            }
            _ => value.clone(),
        };
        out.push(format!("{name}: {value}"));
    }
    out
}

#[test]
fn sipp_answers_the_401_as_a_user_and_is_bridged_with_the_users_caller_id() {
    let dir = TempDir::new("auth-sipp");
    let uas = Sipp::new(Scenario::Builtin("uas")).spawn(None, dir.path());
    let target = uas.addr.to_string();
    let s = start("auth-sipp", &dir, vec![("bridge_target".into(), target)]);
    let caller = sipp_call(&s, "2001", "1001", "pw-1001");
    caller.assert_ok(1);
    let challenge = caller
        .received()
        .into_iter()
        .find(|m| m.status() == Some(401))
        .expect("a 401");
    let www = challenge.header("www-authenticate").unwrap_or_default();
    assert!(www.contains("realm=\"strowger\""), "{challenge:?}");
    assert_eq!(challenge.header("server"), Some("strowger"), "no version");

    let phone = uas.finish();
    phone.assert_ok(1);
    let invite = phone
        .received()
        .into_iter()
        .find(|m| m.method() == Some("INVITE"))
        .expect("the bridged INVITE");
    let from = invite.header("from").unwrap_or_default();
    assert!(
        from.starts_with("\"Front Desk\" <sip:5550100@"),
        "the user's caller ID, not the phone's From: {from}"
    );
    assert_eq!(invite.header("user-agent"), Some("strowger"));
    let cdrs = s.wait_cdrs(1);
    assert_eq!(cdrs[0].str("user"), "1001", "{cdrs:?}");
    assert_eq!(cdrs[0].str("context"), "default", "{cdrs:?}");
    assert_eq!(cdrs[0].str("exten"), "2001", "{cdrs:?}");
}

#[test]
fn strangers_cannot_tell_users_extensions_or_passwords_apart() {
    let dir = TempDir::new("auth-same");
    let mut s = start("auth-same", &dir, Vec::new());
    // 1001 is a user (it used to get 480), 1999 is not (404), 2000 is the bridge target's.
    let mut challenges = Vec::new();
    for exten in ["1001", "1999", "2000"] {
        let mut uac = Uac::new(s.sip, exten);
        let r = uac.invite(&common::sip::sdp(4000, &[(0, "PCMU/8000")], "sendrecv"));
        assert_eq!(r.status(), Some(401), "{exten}: {r:?}");
        challenges.push((exten, shape(&r)));
    }
    for (exten, shape) in &challenges[1..] {
        assert_eq!(shape, &challenges[0].1, "{exten} answered as 1001");
    }

    let wrong = sipp_call(&s, "2001", "1001", "not-the-password");
    let unknown = sipp_call(&s, "2001", "1999", "whatever");
    let refusal = |r: &SippResult| {
        r.received()
            .into_iter()
            .find(|m| m.status().is_some_and(|st| st >= 402))
            .unwrap_or_else(|| panic!("no refusal:\n{}", r.evidence()))
    };
    let (wrong, unknown) = (refusal(&wrong), refusal(&unknown));
    assert_eq!(wrong.status(), Some(403), "{wrong:?}");
    assert_eq!(
        shape(&wrong),
        shape(&unknown),
        "a wrong password and an unknown user"
    );
    // The security log has both, for fail2ban and the ban logic.
    let logged = common::wait_for(Duration::from_secs(5), || {
        let log = s.stderr();
        (log.contains("auth_failed source=127.0.0.1 user=\"1001\" reason=\"wrong password\"")
            && log.contains("auth_failed source=127.0.0.1 user=\"1999\" reason=\"wrong password\""))
        .then_some(())
    });
    assert!(logged.is_some(), "security log:\n{}", s.stderr());
    assert!(s.cdrs().is_empty(), "no call started");
    s.assert_alive();
}

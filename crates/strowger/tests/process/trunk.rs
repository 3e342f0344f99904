//! A SIP trunk to a real provider: Kamailio (tests/kamailio/provider.cfg) is the provider — a
//! registrar with digest authentication and a proxy in front of the "PSTN", a SIPp UAS — and a
//! local dnsmasq serves its domain provider.test: a NAPTR record for SIP over UDP, two SRV
//! targets, sip1 (priority 10, 127.0.0.2, where nothing listens) and sip2 (priority 20,
//! 127.0.0.3, Kamailio). strowger resolves the domain (general.dns_server), fails over from
//! the dead first target to the second, registers there answering the 401, places a call out
//! through it answering its 407, and takes a call in to its DID.
//!
//! Everything runs inside a fresh network namespace with only loopback (the addresses and port
//! 5060 are then free): the outer test re-runs this binary's `provider_inside_netns` under
//! `unshare -n`, and that test refuses to run anywhere else.

use crate::common;

use common::group::Proc;
use common::net::free_port;
use common::netns::{assert_isolated, in_private_netns};
use common::sipp::{Scenario, Sipp};
use common::switch::Opts;
use common::{tail, wait_for, Strowger, TempDir};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const INNER: &str = "provider_inside_netns";
const ACCOUNT: &str = "4930100";
const PASSWORD: &str = "trunk-secret-7";
const DID: &str = "4930555";

#[test]
fn trunk_to_kamailio_in_private_netns() {
    in_private_netns(INNER);
}

/// dnsmasq on 127.0.0.1:`port` answering for provider.test and nothing else.
fn dnsmasq(port: u16, dir: &Path) -> Proc {
    let mut cmd = Command::new("dnsmasq");
    cmd.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--user=root",
        "--pid-file",
        "--bind-interfaces",
        "--listen-address=127.0.0.1",
        "--no-resolv",
        "--no-hosts",
        "--local-ttl=60",
        "--log-queries",
        "--log-facility=-",
    ])
    .arg(format!("--port={port}"))
    .args([
        "--naptr-record=provider.test,10,10,s,SIP+D2U,,_sip._udp.provider.test",
        "--srv-host=_sip._udp.provider.test,sip1.provider.test,5060,10,10",
        "--srv-host=_sip._udp.provider.test,sip2.provider.test,5060,20,10",
        "--host-record=sip1.provider.test,127.0.0.2",
        "--host-record=sip2.provider.test,127.0.0.3",
        // Without NAPTR: SRV for TCP only; without NAPTR or SRV: an A record alone.
        "--srv-host=_sip._tcp.tcp-only.test,sip2.provider.test,5080,0,0",
        "--host-record=plain.test,127.0.0.9",
    ]);
    let mut p = Proc::spawn("dnsmasq", &mut cmd, dir);
    let up = wait_for(Duration::from_secs(5), || {
        p.log().contains("started").then_some(())
    });
    p.assert_alive();
    assert!(up.is_some(), "dnsmasq did not start:\n{}", p.log());
    p
}

/// Kamailio as the provider on 127.0.0.3:5060, for strowger at 127.0.0.1:`strowger`, its
/// PSTN at 127.0.0.1:`pstn`.
fn kamailio(strowger: u16, pstn: u16, dir: &Path) -> Proc {
    let cfg = common::tests_dir().join("kamailio/provider.cfg");
    let mut cmd = Command::new("kamailio");
    cmd.arg("-f")
        .arg(cfg)
        .args(["-l", "udp:127.0.0.3:5060", "-DD", "-E"])
        .arg("-A")
        .arg(format!("ACCOUNT=\"{ACCOUNT}\""))
        .arg("-A")
        .arg(format!("ACCOUNT_PW=\"{PASSWORD}\""))
        .arg("-A")
        .arg(format!("DID=\"{DID}\""))
        .arg("-A")
        .arg(format!("STROWGER_PORT={strowger}"))
        .arg("-A")
        .arg(format!("PSTN_UAS=\"sip:127.0.0.1:{pstn}\""));
    let mut p = Proc::spawn("kamailio", &mut cmd, dir);
    std::thread::sleep(Duration::from_millis(500));
    p.assert_alive();
    p
}

fn config(dir: &Path, dns: u16) -> std::path::PathBuf {
    let text = format!(
        r#"
[general]
dns_server = "127.0.0.1:{dns}"
[sip]
# Timer F (64 × T1) decides how soon the dead first server is given up: 6.4 s.
t1_ms = 100
[rtp]
media_timeout_s = 0
# The office's phone (SIPp on 127.0.0.1) is a trusted peer: it dials out without a password.
[security]
trusted = ["127.0.0.1"]

[[trunks]]
name = "provider"
host = "provider.test"
username = "{ACCOUNT}"
password = "{PASSWORD}"
register = true
expires = 120
caller_id = "{ACCOUNT}"
did_context = "from-provider"
strip = 1
prefix = "+49"

[dialplan]
default_context = "phones"
[dialplan.contexts.phones]
trunks = ["provider"]
[[dialplan.contexts.phones.rules]]
regex = "^0\\d+$"
steps = ["bridge trunk/provider/${{EXTEN}} timeout=20"]
[[dialplan.contexts.from-provider.rules]]
exten = "{DID}"
steps = ["answer", "echo"]
"#
    );
    let path = dir.join("trunk.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
#[ignore = "runs only inside the private network namespace set up by trunk_to_kamailio_in_private_netns"]
fn provider_inside_netns() {
    assert_isolated();

    let dir = TempDir::new("trunk");
    let dns_port = free_port();
    let dns = dnsmasq(dns_port, dir.path());
    // The PSTN: a SIPp UAS behind the provider (it keeps the provider's Record-Route), answering
    // one call.
    let pstn_port = free_port();
    let pstn = Sipp::new(Scenario::File("uas_proxied.xml"))
        .port(pstn_port)
        .spawn(None, dir.path());
    let mut s = Strowger::with(
        "trunk",
        Opts {
            config_file: Some(config(dir.path(), dns_port)),
            // The registration runs on one worker; the calls may land on the other, which
            // must learn that the first server is dead (Event::TrunkServer).
            workers: Some(2),
            log_level: Some("debug"),
            ..Opts::default()
        },
    );
    let mut kam = kamailio(s.sip.port(), pstn_port, dir.path());

    // Registration: the first SRV target does not answer; the second takes it, with digest.
    let registered = wait_for(Duration::from_secs(25), || {
        s.stderr()
            .contains("trunk provider: registered at 127.0.0.3:5060")
            .then_some(())
    });
    let log = s.stderr();
    assert!(
        registered.is_some(),
        "not registered:\n{}\n--- kamailio ---\n{}\n--- dnsmasq ---\n{}",
        tail(&log, 80),
        tail(&kam.log(), 30),
        tail(&dns.log(), 20)
    );
    assert!(
        log.contains(
            "registration at 127.0.0.2:5060 failed: no answer; trying the provider's next server"
        ),
        "{}",
        tail(&log, 60)
    );
    assert!(
        dns.log().contains("query[NAPTR] provider.test"),
        "{}",
        dns.log()
    );
    assert!(dns.log().contains("query[SRV] _sip._udp.provider.test"));
    // `show peers` reads where the trunk is registered from the state the switch writes.
    let cfg = dir.path().join("trunk.toml");
    let data = s.data_dir();
    let out = common::switch::run_cli(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--data-dir",
            data.to_str().unwrap(),
            "show",
            "peers",
        ],
        s.dir.path(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.contains("provider")
            && l.contains("provider.test")
            && l.contains("registered at 127.0.0.3:5060, expires in")),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let contact = format!("<sip:{ACCOUNT}@127.0.0.1:{}>", s.sip.port());
    assert!(
        kam.log().contains(&format!("provider: saved {contact}")),
        "Kamailio's registrar has no {contact}:\n{}",
        tail(&kam.log(), 30)
    );

    // A call out: a phone dials 0301234; strowger sends +49301234 to the provider, answers
    // its 407, and the PSTN side answers.
    let phone = Sipp::new(Scenario::Builtin("uac"))
        .service("0301234")
        .duration_ms(500)
        .run(s.sip, s.dir.path());
    phone.assert_ok(1);
    let pstn = pstn.finish();
    pstn.assert_ok(1);
    let got = pstn.received();
    let invite = got
        .iter()
        .find(|m| m.method() == Some("INVITE"))
        .unwrap_or_else(|| panic!("no INVITE at the PSTN: {got:#?}"));
    assert!(
        invite
            .start
            .starts_with("INVITE sip:+49301234@provider.test"),
        "{invite:?}"
    );
    assert!(
        invite
            .header("from")
            .unwrap_or_default()
            .contains(&format!("sip:{ACCOUNT}@provider.test")),
        "{invite:?}"
    );
    let log = s.stderr();
    assert!(
        log.contains("SIP/2.0 407 Proxy Authentication Required"),
        "no 407 from the provider:\n{}",
        tail(&log, 80)
    );
    assert!(
        log.contains(&format!(
            "Proxy-Authorization: Digest username=\"{ACCOUNT}\""
        )),
        "{}",
        tail(&log, 80)
    );
    assert!(kam
        .log()
        .contains("provider: authenticated call out to +49301234"));
    // Nothing but REGISTERs went to the dead server: the call went straight to the second.
    assert!(
        log.contains("to udp:127.0.0.2:5060\nREGISTER"),
        "{}",
        tail(&log, 80)
    );
    assert!(
        !log.contains("to udp:127.0.0.2:5060\nINVITE"),
        "{}",
        tail(&log, 80)
    );

    // A call in: the PSTN dials the DID at the provider, which sends it where strowger
    // registered; it enters from-provider by the DID.
    let caller = Sipp::new(Scenario::File("proxy_uac.xml"))
        .service(DID)
        .args(&["-key", "domain", "provider.test"])
        .duration_ms(500)
        .run("127.0.0.3:5060".parse().unwrap(), s.dir.path());
    caller.assert_ok(1);
    kam.assert_alive();
    let cdrs = s.wait_cdrs(2);
    let out = &cdrs[0];
    assert_eq!(out.str("context"), "phones");
    assert_eq!(out.str("trunk"), "provider");
    assert_eq!(out.num("sip_status"), 200.0);
    let inbound = &cdrs[1];
    assert_eq!(inbound.str("context"), "from-provider");
    assert_eq!(inbound.str("exten"), DID);
    assert_eq!(inbound.str("trunk"), "provider");
    assert!(!inbound.is_null("answer"));
    s.assert_alive();
    s.stop();
    resolver_fallbacks(dns_port);
}

/// The RFC 3263 steps strowger's resolver takes without NAPTR, and without SRV records.
fn resolver_fallbacks(dns_port: u16) {
    use sip::transaction::{Peer, Transport};
    use strowger::dns::lookup_once;
    use switch::trunks::DnsQuery;
    let server = Some(format!("127.0.0.1:{dns_port}").parse().unwrap());
    let q = |name: &str, port, transport| DnsQuery {
        name: name.into(),
        port,
        transport,
    };
    let peer = |t, a: &str| Peer {
        transport: t,
        addr: a.parse().unwrap(),
    };
    // NAPTR then SRV by priority: the dead server first, the live one next.
    let r = lookup_once(server, &q("provider.test", None, None)).unwrap();
    assert_eq!(
        r.targets,
        [
            peer(Transport::Udp, "127.0.0.2:5060"),
            peer(Transport::Udp, "127.0.0.3:5060")
        ]
    );
    assert!(r.valid_until > std::time::Instant::now() + Duration::from_secs(30));
    // No NAPTR: _sip._udp (none), then _sip._tcp.
    let r = lookup_once(server, &q("tcp-only.test", None, None)).unwrap();
    assert_eq!(r.targets, [peer(Transport::Tcp, "127.0.0.3:5080")]);
    // No NAPTR, no SRV: the host's A record on 5060; with a port, A only.
    let r = lookup_once(server, &q("plain.test", None, None)).unwrap();
    assert_eq!(r.targets, [peer(Transport::Udp, "127.0.0.9:5060")]);
    let r = lookup_once(server, &q("plain.test", Some(5070), Some(Transport::Tcp))).unwrap();
    assert_eq!(r.targets, [peer(Transport::Tcp, "127.0.0.9:5070")]);
    let e = lookup_once(server, &q("nowhere.test", None, None)).unwrap_err();
    assert!(e.contains("nowhere.test"), "{e}");
}

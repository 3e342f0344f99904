use super::*;

/// Loads `text` expecting failure; returns the messages as displayed.
fn errors(text: &str) -> Vec<String> {
    match Config::from_str(text, "strowger.toml") {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

/// The smallest useful file: one context with one rule.
const MINIMAL: &str = "[[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"echo\"]\n";

#[test]
fn embedded_default_loads_without_warnings() {
    let config = Config::embedded();
    assert!(config.warnings.is_empty(), "{:?}", config.warnings);
    assert_eq!(config.general.data_dir, PathBuf::from("strowger-data"));
    assert_eq!(config.sip.listen.len(), 6);
    assert_eq!(config.sip.listen[2].to_string(), "udp:[::1]:5060");
    assert_eq!(config.sip.listen[4].to_string(), "tls:127.0.0.1:5061");
    assert_eq!(config.sip.listen[5].to_string(), "wss:127.0.0.1:8089");
    assert_eq!(config.sip.tls.cert_key, None);
    assert_eq!(config.sip.tls.handshake, Duration::from_secs(10));
    assert_eq!(
        config.rtp.ports,
        PortRange {
            lo: 10000,
            hi: 19999
        }
    );
    assert_eq!(config.rtp.ports.pairs(), 5000);
    assert_eq!(config.rtp.caps(), Caps::default());
    assert_eq!(config.rtp.media_timeout, Some(Duration::from_secs(60)));
    assert_eq!(config.rtp.hold_timeout, Some(Duration::from_secs(3600)));
}

/// The values written in default.toml and the built-in defaults must agree.
#[test]
fn defaults_match_default_toml() {
    let default = Config::embedded();
    let minimal = Config::from_str(MINIMAL, "m.toml").unwrap();
    assert_eq!(minimal.general, default.general);
    assert_eq!(minimal.sip, default.sip);
    assert_eq!(minimal.rtp, default.rtp);
    assert_eq!(minimal.registrar, default.registrar);
    assert_eq!(minimal.proxy, default.proxy);
    assert_eq!(minimal.api, default.api);
    // The minimal dialplan has no `public` context, so strangers get none.
    let public_off = Security {
        public_context: None,
        ..default.security.clone()
    };
    assert_eq!(minimal.security, public_off);
    assert_eq!(
        default.security.scanner_user_agents,
        crate::guard::SCANNERS,
        "default.toml lists the scanners guard.rs names"
    );
    assert_eq!(
        default.general.security_log,
        Some(PathBuf::from("security.log"))
    );
}

#[test]
fn security_limits_are_checked() {
    let c = Config::from_str(
        &format!(
            "[general]\nsecurity_log = \"\"\n[security]\nwhitelist = [\"10.0.0.0/8\"]\nban_s = 0\nscanner_action = \"ban\"\nscanner_user_agents = [\"Evil-Scanner\"]\n\n{MINIMAL}"
        ),
        "s.toml",
    )
    .unwrap();
    assert_eq!(c.general.security_log, None);
    assert_eq!(c.security.ban, Duration::ZERO);
    assert_eq!(c.security.scanner_action, ScannerAction::Ban);
    assert_eq!(c.security.scanner_user_agents, ["evil-scanner"]);
    assert!(c.security.whitelist.contains("10.1.1.1".parse().unwrap()));
    let e = errors(&format!(
        "[security]\nwhitelist = [\"10.0.0.0/40\"]\nrequests_per_s = 100\nrequest_burst = 10\nscanner_action = \"tarpit\"\nscanner_user_agents = [\" \"]\ntcp_max = 0\n\n{MINIMAL}"
    ));
    let keys: Vec<&str> = e.iter().map(|m| m.split(": ").nth(1).unwrap()).collect();
    assert_eq!(
        keys,
        [
            "security.whitelist[0]",
            "security.request_burst",
            "security.scanner_action",
            "security.scanner_user_agents[0]",
            "security.tcp_max",
        ],
        "{e:#?}"
    );
}

#[test]
fn contact_limit_and_relay_settings() {
    let d = Config::embedded();
    assert_eq!(d.registrar.max_contacts, 10);
    assert_eq!(d.registrar.contacts_overflow, store::Overflow::Refuse);
    assert!(!d.proxy.relay_for_users);
    let c = Config::from_str(
        &format!(
            "[registrar]\nmax_contacts = 3\ncontacts_overflow = \"replace_oldest\"\n\
             [proxy]\nrelay_for_users = true\n\n{MINIMAL}"
        ),
        "r.toml",
    )
    .unwrap();
    assert_eq!(c.registrar.max_contacts, 3);
    assert_eq!(
        c.registrar.contacts_overflow,
        store::Overflow::ReplaceOldest
    );
    assert!(c.proxy.relay_for_users);
    let e = errors(&format!(
        "[registrar]\nmax_contacts = 0\ncontacts_overflow = \"drop\"\n\n{MINIMAL}"
    ));
    assert_eq!(
        e,
        [
            "strowger.toml:2:16: registrar.max_contacts: 0 is out of range — expected 1 to 1000",
            "strowger.toml:3:21: registrar.contacts_overflow: \"drop\" — expected \"refuse\" or \
             \"replace_oldest\"",
        ]
    );
}

#[test]
fn registrar_digest_and_keepalive_settings() {
    let c = Config::from_str(
        &format!(
            "[registrar]\nalgorithms = [\"SHA-256\"]\nnonce_lifetime_s = 2\nkeepalive = \"crlf\"\n\n{MINIMAL}"
        ),
        "r.toml",
    )
    .unwrap();
    assert_eq!(c.registrar.algorithms, [sip::auth::Algorithm::Sha256]);
    assert_eq!(c.registrar.nonce_lifetime_s, 2);
    assert_eq!(c.registrar.keepalive, KeepAliveKind::Crlf);
    let e = errors(&format!(
        "[registrar]\nalgorithms = [\"MD5\", \"SHA-512\"]\nkeepalive = \"stun\"\n\n{MINIMAL}"
    ));
    assert_eq!(
        e,
        [
            "strowger.toml:2:22: registrar.algorithms[1]: \"SHA-512\" is not a digest algorithm — \
             use \"MD5\" and/or \"SHA-256\"",
            "strowger.toml:3:13: registrar.keepalive: \"stun\" — expected \"options\" or \"crlf\"",
        ]
    );
}

#[test]
fn syntax_error_has_position() {
    assert_eq!(
        errors("[general]\nworkers = = 3\n")[0].split(": ").next(),
        Some("strowger.toml:2:11")
    );
}

#[test]
fn unknown_key_names_the_key() {
    let e = errors("[general]\nworkers = 2\nlog_lvl = \"info\"\n");
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("strowger.toml:3:1: general.log_lvl: unknown field `log_lvl`"),
        "{}",
        e[0]
    );
    let e = errors(&format!("{MINIMAL}exten_ = \"2\"\n"));
    assert!(
        e[0].starts_with(
            "strowger.toml:4:1: dialplan.contexts.default.rules[0].exten_: unknown field"
        ),
        "{}",
        e[0]
    );
}

#[test]
fn type_mismatch_names_the_key() {
    let e = errors("[sip]\nt1_ms = \"fast\"\n");
    assert!(
        e[0].starts_with("strowger.toml:2:9: sip.t1_ms: invalid type: string \"fast\""),
        "{}",
        e[0]
    );
    let e = errors("[general]\nlog_level = \"loud\"\n");
    assert!(
        e[0].starts_with("strowger.toml:2:13: general.log_level: unknown variant `loud`"),
        "{}",
        e[0]
    );
}

#[test]
fn all_value_errors_are_reported_with_positions() {
    let text = format!(
        "[general]\nmax_calls = 0\n\n[sip]\nlisten = [\"udp:127.0.0.1:5060\", \"sctp:1.2.3.4:5060\", \"udp:localhost:5060\"]\n\
         min_se = 30\n\n[rtp]\nports = \"10000-9\"\ncodecs = [\"PCMU\", \"G729\"]\ndtmf_pt = 42\nspeex_quality = 11\n\n{MINIMAL}"
    );
    let e = errors(&text);
    assert_eq!(
        e,
        [
            "strowger.toml:2:13: general.max_calls: 0 is out of range — expected 1 to 1000000",
            "strowger.toml:5:33: sip.listen[1]: \"sctp:1.2.3.4:5060\" — expected udp:, tcp:, tls:, ws: or \
             wss:ADDRESS:PORT with an IP address, e.g. \"udp:127.0.0.1:5060\" or \"wss:[::1]:8089\"",
            "strowger.toml:5:54: sip.listen[2]: \"udp:localhost:5060\" — expected udp:, tcp:, tls:, ws: or \
             wss:ADDRESS:PORT with an IP address, e.g. \"udp:127.0.0.1:5060\" or \"wss:[::1]:8089\"",
            "strowger.toml:6:10: sip.min_se: 30 is out of range — expected 90 to 86400",
            "strowger.toml:9:9: rtp.ports: \"10000-9\" — expected LO-HI with LO < HI, even LO, e.g. \"10000-19999\"",
            "strowger.toml:10:19: rtp.codecs[1]: unknown codec \"G729\" — supported: PCMU, PCMA, GSM, G722, G726-32, \
             speex, speex16, opus, L16, iLBC20, iLBC30",
            "strowger.toml:11:11: rtp.dtmf_pt: 42 is out of range — expected 96 to 127",
            "strowger.toml:12:17: rtp.speex_quality: 11 is out of range — expected 0 to 10",
        ]
    );
}

#[test]
fn missing_default_context() {
    let e = errors("[dialplan]\ndefault_context = \"internal\"\n");
    assert_eq!(
        e,
        ["strowger.toml:2:19: dialplan.default_context: context \"internal\" is not defined in [dialplan.contexts]"]
    );
    // Without the key at all, the message still names it (no position to point at).
    assert_eq!(
        errors(""),
        ["strowger.toml:1:1: dialplan.default_context: context \"default\" is not defined in [dialplan.contexts]"]
    );
}

#[test]
fn tls_keys_come_in_pairs_and_a_tls_listener_may_be_added() {
    let e = errors(&format!("[sip]\ntls_cert = \"a.pem\"\n\n{MINIMAL}"));
    assert!(
        e[0].contains("sip.tls_key: must be set with sip.tls_cert"),
        "{e:?}"
    );
    let e = errors(&format!("[sip]\ntls_handshake_s = 0\n\n{MINIMAL}"));
    assert!(
        e[0].contains("sip.tls_handshake_s: 0 is out of range"),
        "{e:?}"
    );
    let text = format!(
        "[sip]\nlisten = [\"tls:[::1]:5061\"]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n\
         tls_ca = \"ca.pem\"\n\n{MINIMAL}"
    );
    let mut c = Config::from_str(&text, "t.toml").unwrap();
    assert_eq!(c.sip.listen[0].transport, Transport::Tls);
    assert_eq!(
        c.sip.tls.cert_key,
        Some((PathBuf::from("c.pem"), PathBuf::from("k.pem")))
    );
    assert_eq!(c.sip.tls.ca, Some(PathBuf::from("ca.pem")));
    c.override_sip_listen("127.0.0.1:5070").unwrap();
    c.add_listen(Transport::Tls, "127.0.0.1:5071").unwrap();
    let listen: Vec<_> = c.sip.listen.iter().map(ToString::to_string).collect();
    assert_eq!(
        listen,
        [
            "udp:127.0.0.1:5070",
            "tcp:127.0.0.1:5070",
            "tls:127.0.0.1:5071"
        ]
    );
    assert!(c.add_listen(Transport::Tls, "localhost:5061").is_err());
}

#[test]
fn overrides_validate() {
    let mut config = Config::embedded();
    config.override_sip_listen("[::1]:5070").unwrap();
    let listen: Vec<_> = config.sip.listen.iter().map(ToString::to_string).collect();
    assert_eq!(listen, ["udp:[::1]:5070", "tcp:[::1]:5070"]);
    assert!(config.override_sip_listen("localhost:5060").is_err());
    config
        .override_sip_listen("127.0.0.1:5070,[::1]:5070")
        .unwrap();
    let listen: Vec<_> = config.sip.listen.iter().map(ToString::to_string).collect();
    assert_eq!(
        listen,
        [
            "udp:127.0.0.1:5070",
            "tcp:127.0.0.1:5070",
            "udp:[::1]:5070",
            "tcp:[::1]:5070"
        ]
    );

    config.override_rtp_ports("20000-20099").unwrap();
    assert_eq!(
        config.rtp.ports,
        PortRange {
            lo: 20000,
            hi: 20099
        }
    );
    assert_eq!(
        config.override_rtp_ports("20001-20099").unwrap_err(),
        "--rtp-ports \"20001-20099\" — expected LO-HI with LO < HI, even LO, e.g. \"10000-19999\""
    );
    assert_eq!(
        config.rtp.ports.lo, 20000,
        "a rejected override changes nothing"
    );

    config.override_data_dir("/var/lib/strowger").unwrap();
    assert_eq!(config.general.data_dir, PathBuf::from("/var/lib/strowger"));
    assert!(config.override_data_dir("").is_err());
}

#[test]
fn hostile_config_text_never_panics() {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let text = DEFAULT_TOML;
    for _ in 0..300 {
        let mut bytes = text.as_bytes().to_vec();
        let at = next() as usize % bytes.len();
        bytes[at] = b"=[]\"{}$x9 \n#'"[next() as usize % 13];
        bytes.truncate(at + (next() as usize % (text.len() - at + 1)));
        if let Ok(mutated) = String::from_utf8(bytes) {
            let _ = Config::from_str(&mutated, "fuzz.toml")
                .map_err(|e| e.iter().map(ToString::to_string).count());
        }
    }
}

#[test]
fn a_user_listed_twice_is_an_error_among_many() {
    let twice = MINIMAL.to_string()
        + "[[users]]\nuser = \"1001\"\npassword = \"a\"\n[[users]]\nuser = \"1002\"\npassword = \"b\"\n\
                 [[users]]\nuser = \"1001\"\npassword = \"c\"\n";
    let e = errors(&twice);
    assert!(
        e.iter()
            .any(|l| l.contains("users[2].user") && l.contains("1001@strowger is listed twice")),
        "{e:?}"
    );
    let mut many = MINIMAL.to_string();
    for u in 0..20_000 {
        many.push_str(&format!("[[users]]\nuser = \"{u}\"\npassword = \"p\"\n"));
    }
    // A large directory with no duplicate loads whole (its parse time is the config benchmark's).
    let c = Config::from_str(&many, "many.toml").unwrap();
    assert_eq!(c.users.len(), 20_000);
}

#[test]
fn realtime_priority_is_a_sched_fifo_priority() {
    let e = errors(&format!("[general]\nrealtime_priority = 100\n\n{MINIMAL}"));
    assert_eq!(
        e,
        ["strowger.toml:2:21: general.realtime_priority: 100 is out of range — expected 0 to 99"]
    );
}

#[test]
fn log_level_and_format() {
    let c = Config::from_str(
        &format!("[general]\nlog_level = \"debug\"\nlog_format = \"json\"\n\n{MINIMAL}"),
        "strowger.toml",
    )
    .unwrap();
    assert_eq!(c.general.log_level, LogLevel::Debug);
    assert_eq!(c.general.log_format, LogFormat::Json);
    assert_eq!(Config::embedded().general.log_format, LogFormat::Text);
    let e = errors(&format!("[general]\nlog_format = \"xml\"\n\n{MINIMAL}"));
    assert!(
        e[0].starts_with("strowger.toml:2:14: general.log_format: unknown variant `xml`"),
        "{}",
        e[0]
    );
    let mut c = Config::embedded();
    c.override_log_level("error").unwrap();
    assert_eq!(c.general.log_level, LogLevel::Error);
    assert_eq!(
        c.override_log_level("loud").unwrap_err(),
        "--log-level \"loud\" — expected one of error, warn, info, debug, trace"
    );
    assert_eq!(
        c.general.log_level,
        LogLevel::Error,
        "a rejected override changes nothing"
    );
}

/// A trunk to a provider by name, and the contexts that may use it.
const TRUNK: &str = r#"[general]
dns_server = "127.0.0.1:5353"
[[trunks]]
name = "provider"
host = "sip.example.com"
username = "4930100"
password = "pw"
register = true
did_context = "in"
strip = 1
prefix = "+49"
[dialplan]
default_context = "office"
[dialplan.contexts.office]
trunks = ["provider"]
[[dialplan.contexts.office.rules]]
prefix = "0"
steps = ["bridge trunk/provider/${EXTEN}"]
[[dialplan.contexts.in.rules]]
prefix = ""
steps = ["echo"]
"#;

#[test]
fn trunks_load_with_their_defaults() {
    let c = Config::from_str(TRUNK, "t.toml").unwrap();
    assert_eq!(
        c.general.dns_server,
        Some("127.0.0.1:5353".parse().unwrap())
    );
    let t = &c.trunks[0];
    assert_eq!(t.host, TrunkHost::Domain("sip.example.com".into()));
    assert_eq!(
        (t.auth_user.as_str(), t.from_domain.as_str()),
        ("4930100", "sip.example.com")
    );
    assert_eq!((t.expires, t.transport), (600, None));
    assert_eq!(t.outbound_number("0301234"), "+49301234");
    assert_eq!(t.inbound_did("4930555"), "4930555");
    assert!(c.dialplan.allows_trunk("office", "provider"));
    assert!(!c.dialplan.allows_trunk("in", "provider"));
    let hosts = |h: &str| {
        let text = TRUNK.replace("\"sip.example.com\"", &format!("\"{h}\""));
        Config::from_str(&text, "t.toml").map(|c| c.trunks[0].host.clone())
    };
    assert_eq!(
        hosts("192.0.2.7").unwrap(),
        TrunkHost::Addr("192.0.2.7:5060".parse().unwrap())
    );
    assert_eq!(
        hosts("[2001:db8::7]:5080").unwrap(),
        TrunkHost::Addr("[2001:db8::7]:5080".parse().unwrap())
    );
    assert_eq!(
        hosts("sip.example.com:5080").unwrap(),
        TrunkHost::NamePort("sip.example.com".into(), 5080)
    );
    assert!(hosts("sip example").is_err());
    // Over TLS an address without a port means 5061 (RFC 3261 §19.1.2).
    let text = TRUNK.replace(
        "host = \"sip.example.com\"",
        "host = \"192.0.2.7\"\ntransport = \"tls\"",
    );
    let c = Config::from_str(&text, "t.toml").unwrap();
    assert_eq!(
        c.trunks[0].host,
        TrunkHost::Addr("192.0.2.7:5061".parse().unwrap())
    );
}

#[test]
fn a_context_dials_only_the_trunks_it_lists() {
    // The inbound context may not dial out; a trunk nobody defined; a context listing one.
    let text = format!(
        "{TRUNK}[[dialplan.contexts.in.rules]]\nexten = \"9\"\nsteps = [\"bridge trunk/provider/0301234\"]\n\
         [[dialplan.contexts.in.rules]]\nexten = \"8\"\nsteps = [\"bridge trunk/other/1\", \"bridge trunk/provider\"]\n\
         [dialplan.contexts.lobby]\ntrunks = [\"nope\"]\nrules = []\n"
    );
    let e = errors(&text);
    assert_eq!(e.len(), 4, "{e:#?}");
    assert!(e[0].contains("dialplan.contexts.in.rules[1].steps[0]: bridge: context \"in\" may not dial out through trunk \"provider\" — add it to the context's list: trunks = [\"provider\"]"), "{}", e[0]);
    assert!(e[1].contains("dialplan.contexts.in.rules[2].steps[0]: bridge: no trunk \"other\" — defined: provider"), "{}", e[1]);
    assert!(
        e[2].contains("rules[2].steps[1]: bridge trunk/NAME/NUMBER needs the number to dial"),
        "{}",
        e[2]
    );
    assert!(
        e[3].contains("dialplan.contexts.lobby.trunks[0]: no trunk \"nope\" — defined: provider"),
        "{}",
        e[3]
    );
    // A name in a variable is checked when the call dials.
    let text = format!(
        "{TRUNK}[[dialplan.contexts.in.rules]]\nexten = \"9\"\nsteps = [\"set t=provider\", \"bridge trunk/${{t}}/1\"]\n"
    );
    assert!(Config::from_str(&text, "t.toml").is_ok());
}

#[test]
fn trunk_errors_name_the_key() {
    let text = TRUNK
        .replace("username = \"4930100\"\n", "transport = \"sctp\"\n")
        .replace(
            "did_context = \"in\"",
            "did_context = \"nowhere\"\nacl = [\"10.0.0.0/33\"]\nexpires = 5",
        )
        .replace(
            "dns_server = \"127.0.0.1:5353\"",
            "dns_server = \"dns.example\"",
        );
    let e = errors(&text);
    let keys: Vec<&str> = e
        .iter()
        .map(|m| m.split(": ").nth(1).unwrap_or_default())
        .collect();
    assert_eq!(
        keys,
        [
            "general.dns_server",
            "trunks[0].transport",
            "trunks[0].password",
            "trunks[0].register",
            "trunks[0].did_context",
            "trunks[0].acl[0]",
            "trunks[0].expires",
        ],
        "{e:#?}"
    );
}

/// The commented `[[trunks]]` example of default.toml, uncommented, loads.
#[test]
fn the_documented_trunk_example_loads() {
    let start = DEFAULT_TOML.find("# [[trunks]]").expect("the example");
    let example: String = DEFAULT_TOML[start..]
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{}\n", l.trim_start_matches("# ").trim_start_matches('#')))
        .collect();
    let text = format!(
        "{DEFAULT_TOML}\n{example}\n[[dialplan.contexts.from-provider.rules]]\nprefix = \"\"\nsteps = [\"echo\"]\n"
    );
    let c = Config::from_str(&text, "t.toml").unwrap_or_else(|e| panic!("{e:#?}\n{example}"));
    let t = &c.trunks[0];
    assert_eq!(
        (t.name.as_str(), t.register, t.strip),
        ("provider", true, 1)
    );
    assert_eq!(t.outbound_number("0301234"), "+49301234");
}

#[test]
fn the_default_exposes_only_the_demo_to_strangers_and_says_no_version() {
    let c = Config::embedded();
    assert_eq!(c.sip.user_agent, "strowger", "no version by default");
    assert_eq!(c.security.public_context.as_deref(), Some("public"));
    assert!(c.security.trusted.is_empty());
    let vars = crate::dialplan::Vars::for_call("", "anonymous", "c", "d");
    let routes = |context: &str, exten: &str| c.dialplan.route(context, exten, &vars).is_some();
    for exten in ["44444", "9196", "9197"] {
        assert!(routes("public", exten), "{exten} is public");
        assert!(routes("default", exten), "{exten} is in default");
    }
    for exten in ["1001", "2000", "2999", "0", "s", ""] {
        assert!(!routes("public", exten), "{exten:?} is not public");
    }
    assert!(routes("default", "1001") && routes("default", "2000"));
}

#[test]
fn the_public_context_is_checked() {
    // Not set and no `public` context: nobody is let in unauthenticated.
    let c = Config::from_str(MINIMAL, "m.toml").unwrap();
    assert_eq!(c.security.public_context, None);
    // Named: it must exist; "" turns it off.
    let e = errors(&format!(
        "[security]\npublic_context = \"guests\"\n\n{MINIMAL}"
    ));
    assert!(
        e[0].starts_with(
            "strowger.toml:2:18: security.public_context: no dialplan context \"guests\""
        ),
        "{e:?}"
    );
    let text = DEFAULT_TOML.replace("# public_context = \"public\"", "public_context = \"\"");
    assert_eq!(
        Config::from_str(&text, "s.toml")
            .unwrap()
            .security
            .public_context,
        None
    );
    // A catch-all would let strangers reach every extension without a challenge.
    for rule in ["prefix = \"\"", "regex = \".*\"", "regex = \"^.*$\""] {
        let text = format!(
            "{MINIMAL}[[dialplan.contexts.public.rules]]\nexten = \"9196\"\nsteps = [\"echo\"]\n\
             [[dialplan.contexts.public.rules]]\n{rule}\nsteps = [\"hangup\"]\n"
        );
        let e = errors(&text);
        assert!(
            e.len() == 1
                && e[0].contains("dialplan.contexts.public.rules[1]: matches every extension"),
            "{rule}: {e:?}"
        );
    }
    let narrow = format!(
        "{MINIMAL}[[dialplan.contexts.public.rules]]\nregex = \"^9\\\\d+$\"\nsteps = [\"echo\"]\n"
    );
    let c = Config::from_str(&narrow, "n.toml").unwrap();
    assert_eq!(c.security.public_context.as_deref(), Some("public"));
}

#[test]
fn users_call_settings_are_checked() {
    let ok = format!(
        "{MINIMAL}[[users]]\nuser = \"1001\"\npassword = \"p\"\ncontext = \"default\"\n\
         caller_id = \"\\\"Alice\\\" <1001>\"\nmax_calls = 2\nallow = [\"^1\\\\d{{3}}$\"]\n"
    );
    let c = Config::from_str(&ok, "u.toml").unwrap();
    let u = &c.users[0];
    assert_eq!(u.context.as_deref(), Some("default"));
    assert_eq!(u.caller_id.as_deref(), Some("\"Alice\" <1001>"));
    assert_eq!(
        (u.max_calls, u.allow.as_slice()),
        (2, &["^1\\d{3}$".to_string()][..])
    );
    let creds = crate::registrar::user_credentials(u);
    assert_eq!(creds.max_calls, 2);
    assert_eq!(creds.context.as_deref(), Some("default"));

    let bad = format!(
        "{MINIMAL}[[users]]\nuser = \"1001\"\npassword = \"p\"\ncontext = \"nowhere\"\n\
         caller_id = \"Alice <>\"\nallow = [\"(\"]\n"
    );
    let e = errors(&bad);
    assert_eq!(e.len(), 3, "{e:?}");
    assert!(
        e[0].contains("users[0].context: no dialplan context \"nowhere\""),
        "{e:?}"
    );
    assert!(
        e[1].contains("users[0].caller_id: \"Alice <>\" — expected a number"),
        "{e:?}"
    );
    assert!(
        e[2].contains("users[0].allow[0]: invalid regex \"(\""),
        "{e:?}"
    );
}

#[test]
fn the_users_example_in_the_default_file_is_valid() {
    let text = DEFAULT_TOML
        .lines()
        .skip_while(|l| *l != "# [[users]]")
        .take_while(|l| l.starts_with("# "))
        .filter(|l| !l.starts_with("#  "))
        .map(|l| &l[2..])
        .collect::<Vec<_>>()
        .join("\n");
    assert!(text.contains("caller_id"), "{text}");
    let c = Config::from_str(&format!("{DEFAULT_TOML}\n{text}\n"), "d.toml").unwrap();
    assert_eq!(c.users.len(), 1);
    assert_eq!(c.users[0].max_calls, 2);
}

/// default.toml's queue is what an empty `[queues.NAME]` table gets, with its members; a bad
/// value and a step naming no queue are errors naming the key.
#[test]
fn queues_take_their_defaults_and_errors_name_the_key() {
    let default = Config::embedded();
    let minimal = Config::from_str(
        &format!("{MINIMAL}[queues.support]\nmembers = [\"1001\", \"1002\"]\n"),
        "m.toml",
    )
    .unwrap();
    assert_eq!(minimal.queues, default.queues);
    assert_eq!(default.queues[0].strategy, Strategy::RingAll);
    let e = errors(&format!(
        "{MINIMAL}[queues.q]\nstrategy = \"random\"\nmax_wait_s = 0\nmusic = \"jazz\"\n\
         [[dialplan.contexts.default.rules]]\nexten = \"2\"\nsteps = [\"queue sales\"]\n"
    ));
    assert!(e.iter().any(|m| m.contains("queues.q.strategy: \"random\" — expected one of ringall, roundrobin, leastrecent, fewestcalls")), "{e:?}");
    assert!(
        e.iter()
            .any(|m| m.contains("queues.q.max_wait_s: 0 is out of range")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|m| m.contains("steps[0]: no queue \"sales\" — defined: q")),
        "{e:?}"
    );
    let music =
        "queues.q.music: no music class \"jazz\" — defined: default (add a [moh.jazz] table)";
    assert!(e.iter().any(|m| m.contains(music)), "{e:?}");
}

#[test]
fn rtp_dtmf_names_a_mode() {
    let load =
        |mode: &str| Config::from_str(&format!("[rtp]\ndtmf = \"{mode}\"\n\n{MINIMAL}"), "d.toml");
    assert_eq!(load("auto").unwrap().rtp.dtmf, media::DtmfMode::Auto);
    assert_eq!(load("inband").unwrap().rtp.dtmf, media::DtmfMode::Inband);
    assert_eq!(load("INFO").unwrap().rtp.dtmf, media::DtmfMode::Info);
    assert_eq!(
        errors(&format!("[rtp]\ndtmf = \"rfc2833\"\n\n{MINIMAL}")),
        ["strowger.toml:2:8: rtp.dtmf: \"rfc2833\" — expected \"auto\", \"inband\" or \"info\""]
    );
}

#[test]
fn rtp_srtp_names_a_policy() {
    use crate::sdes::SrtpPolicy;
    let load = |p: &str| Config::from_str(&format!("[rtp]\nsrtp = \"{p}\"\n\n{MINIMAL}"), "d.toml");
    assert_eq!(Config::embedded().rtp.srtp, SrtpPolicy::Offer);
    assert_eq!(load("require").unwrap().rtp.srtp, SrtpPolicy::Require);
    assert_eq!(load("refuse").unwrap().rtp.srtp, SrtpPolicy::Refuse);
    assert_eq!(
        errors(&format!("[rtp]\nsrtp = \"always\"\n\n{MINIMAL}")),
        ["strowger.toml:2:8: rtp.srtp: \"always\" — expected \"offer\", \"require\" or \"refuse\""]
    );
}

#[test]
fn a_users_and_a_trunks_dtmf_name_a_mode_or_fall_back_to_rtp_dtmf() {
    let trunk = "[[trunks]]\nname = \"prov\"\nhost = \"127.0.0.1\"\n";
    let user = "[[users]]\nuser = \"1001\"\npassword = \"a-long-one\"\n";
    let c = Config::from_str(&format!("{trunk}{user}{MINIMAL}"), "d.toml").unwrap();
    assert_eq!((c.trunks[0].dtmf, c.users[0].dtmf), (None, None));
    let set = format!("{trunk}dtmf = \"Info\"\n{user}dtmf = \"inband\"\n{MINIMAL}");
    let c = Config::from_str(&set, "d.toml").unwrap();
    assert_eq!(c.trunks[0].dtmf, Some(media::DtmfMode::Info));
    assert_eq!(c.users[0].dtmf, Some(media::DtmfMode::Inband));
    let bad = format!("{trunk}dtmf = \"rfc2833\"\n{user}dtmf = \"tones\"\n{MINIMAL}");
    let expected = "— expected \"auto\", \"inband\" or \"info\"";
    assert_eq!(
        errors(&bad),
        [
            format!("strowger.toml:4:8: trunks[0].dtmf: \"rfc2833\" {expected}"),
            format!("strowger.toml:8:8: users[0].dtmf: \"tones\" {expected}"),
        ]
    );
}

#[test]
fn the_public_context_goes_nowhere_else() {
    let public = |step: &str| {
        format!("[[dialplan.contexts.public.rules]]\nexten = \"9\"\nsteps = [\"{step}\"]\n\n[[dialplan.contexts.public.rules]]\nexten = \"2\"\nsteps = [\"echo\"]\n\n[menus.m]\nprompt = \"p.wav\"\nchoices = {{ \"1\" = \"goto public exten=2\", \"2\" = \"goto default exten=1\" }}\n\n{MINIMAL}")
    };
    let e = errors(&public("goto default exten=1"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("dialplan.contexts.public.rules[0].steps[0]: goes to context \"default\""),
        "{e:?}"
    );
    let e = errors(&public("menu m"));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("menus.m.choices.\"2\": goes to context \"default\""),
        "{e:?}"
    );
    // Within the public context, and from a context for users, a goto is fine.
    Config::from_str(&public("goto public exten=2"), "t.toml").unwrap();
    let users = public("echo").replace(MINIMAL, &MINIMAL.replace("echo", "menu m"));
    Config::from_str(&users, "t.toml").unwrap();
}

/// `voicemail.store`: the data directory by default, a Redis URL, or an error naming the key;
/// the silence end on by default, off at 0, bounded.
#[test]
fn voicemail_store_and_silence_settings() {
    let minimal = Config::from_str(MINIMAL, "m.toml").unwrap();
    assert_eq!(minimal.voicemail.store, None);
    assert_eq!(
        minimal.voicemail.silence,
        Some(media::SilenceEnd {
            level: 256,
            after: Duration::from_secs(5)
        })
    );
    let redis =
        format!("[voicemail]\nstore = \"redis://127.0.0.1:6379/2\"\nsilence_s = 0\n{MINIMAL}");
    let c = Config::from_str(&redis, "r.toml").unwrap();
    assert_eq!(
        c.voicemail.store.as_deref(),
        Some("redis://127.0.0.1:6379/2")
    );
    assert_eq!(c.voicemail.silence, None);
    let e = errors(&format!("[voicemail]\nstore = \"/var/vm\"\n{MINIMAL}"));
    assert!(e.iter().any(|e| e.contains("voicemail.store")), "{e:?}");
    let e = errors(&format!("[voicemail]\nsilence_s = 61\n{MINIMAL}"));
    assert!(e.iter().any(|e| e.contains("voicemail.silence_s")), "{e:?}");
}

/// `[api]`: loopback by default, off with "", and a public address or a short token refused
/// with the key named.
#[test]
fn api_listens_on_loopback_only() {
    let c = Config::embedded();
    assert_eq!(c.api.listen, Some("127.0.0.1:8088".parse().unwrap()));
    assert_eq!(c.api.token, None);
    let off = Config::from_str(&format!("{MINIMAL}[api]\nlisten = \"\"\n"), "t.toml").unwrap();
    assert_eq!(off.api.listen, None);
    let public = errors(&format!("{MINIMAL}[api]\nlisten = \"0.0.0.0:8088\"\n"));
    assert!(
        public
            .iter()
            .any(|e| e.contains("api.listen") && e.contains("loopback")),
        "{public:?}"
    );
    let short = errors(&format!("{MINIMAL}[api]\ntoken = \"abc\"\n"));
    assert!(short.iter().any(|e| e.contains("api.token")), "{short:?}");
    let mut flag = Config::embedded();
    assert!(flag.api.override_listen("192.0.2.1:80").is_err());
    assert!(flag.api.override_listen("[::1]:9000").is_ok());
    assert_eq!(flag.api.listen, Some("[::1]:9000".parse().unwrap()));
}

/// `[api]` with a TLS certificate and key may listen off loopback; one of the two alone, or no
/// TLS, is refused with the keys named.
#[test]
fn api_off_loopback_needs_tls() {
    let public = "[api]\nlisten = \"0.0.0.0:8443\"\n";
    let tls = format!("{MINIMAL}{public}tls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n");
    let c = Config::from_str(&tls, "t.toml").unwrap();
    assert_eq!(c.api.listen, Some("0.0.0.0:8443".parse().unwrap()));
    assert_eq!(
        c.api.tls.as_ref().map(|t| t.key.as_path()),
        Some("k.pem".as_ref())
    );
    let plain = errors(&format!("{MINIMAL}{public}"));
    assert!(
        plain.iter().any(|e| e.contains("api.listen")
            && e.contains("api.tls_cert")
            && e.contains("api.tls_key")),
        "{plain:?}"
    );
    let half = errors(&format!("{MINIMAL}{public}tls_cert = \"c.pem\"\n"));
    assert!(half.iter().any(|e| e.contains("api.tls_key")), "{half:?}");
    let mut flag = c.clone();
    assert!(flag.api.override_listen("192.0.2.1:443").is_ok());
    let backlog = errors(&format!("{MINIMAL}[api]\nevent_backlog = 8\n"));
    assert!(
        backlog.iter().any(|e| e.contains("api.event_backlog")),
        "{backlog:?}"
    );
}

#[test]
fn cdr_database_is_parsed_and_errors_name_the_key() {
    let minimal = Config::from_str(MINIMAL, "m.toml").unwrap();
    assert_eq!(minimal.cdr, Config::embedded().cdr);
    assert_eq!(minimal.cdr.database, None);
    let pg = format!("[cdr]\ndatabase = \"postgres://u:p@127.0.0.1:5432/pbx\"\n{MINIMAL}");
    assert_eq!(
        Config::from_str(&pg, "pg.toml").unwrap().cdr.database,
        Some(CdrDatabase::Postgres(
            "postgres://u:p@127.0.0.1:5432/pbx".into()
        ))
    );
    let lite = format!("[cdr]\ndatabase = \"sqlite:cdr.db\"\n{MINIMAL}");
    assert_eq!(
        Config::from_str(&lite, "l.toml").unwrap().cdr.database,
        Some(CdrDatabase::Sqlite("cdr.db".into()))
    );
    let bad = errors(&format!(
        "[cdr]\ndatabase = \"mysql://x\"\nbatch_rows = 0\ntimeout_ms = 10\n{MINIMAL}"
    ));
    assert!(bad.iter().any(|e| e.contains("cdr.database")), "{bad:?}");
    assert!(bad.iter().any(|e| e.contains("cdr.batch_rows")), "{bad:?}");
    assert!(bad.iter().any(|e| e.contains("cdr.timeout_ms")), "{bad:?}");
    assert_eq!(
        minimal.cdr.timeout_ms, 5000,
        "a database never holds CDRs for ever"
    );
}

#[test]
fn advertised_addresses_must_be_of_their_family_and_wildcards_need_one() {
    let text = format!(
        "{MINIMAL}[sip]\nlisten = [\"udp:0.0.0.0:5060\", \"udp:[::1]:5060\"]\n[rtp]\nadvertise_ipv6 = \"203.0.113.7\"\n"
    );
    let e = errors(&text);
    assert!(
        e.iter()
            .any(|e| e.contains("rtp.advertise_ipv6") && e.contains("IPv6 unicast")),
        "{e:?}"
    );
    assert!(
        e.iter()
            .any(|e| e.contains("sip.listen[0]") && e.contains("set rtp.advertise_ipv4")),
        "{e:?}"
    );
    let ok = format!(
        "{MINIMAL}[sip]\nlisten = [\"udp:0.0.0.0:5060\"]\n[rtp]\nadvertise_ipv4 = \"203.0.113.7\"\nadvertise_ipv6 = \"2001:db8::7\"\n"
    );
    let rtp = Config::from_str(&ok, "strowger.toml").unwrap().rtp;
    assert_eq!(rtp.advertise_ipv4, Some("203.0.113.7".parse().unwrap()));
    assert_eq!(rtp.advertise_ipv6, Some("2001:db8::7".parse().unwrap()));
}

#[test]
fn websocket_listeners_and_their_checks() {
    let text = format!(
        "[sip]\nlisten = [\"ws:127.0.0.1:8088\", \"wss:[::1]:8089\", \"wss:0.0.0.0:8090\"]\n\
         [rtp]\nadvertise_ipv4 = \"192.0.2.1\"\n\n{MINIMAL}"
    );
    let mut c = Config::from_str(&text, "t.toml").unwrap();
    let listen: Vec<_> = c.sip.listen.iter().map(ToString::to_string).collect();
    assert_eq!(
        listen,
        ["ws:127.0.0.1:8088", "wss:[::1]:8089", "wss:0.0.0.0:8090"]
    );
    assert_eq!(c.sip.ws.path, "/ws");
    assert_eq!(c.sip.ws.max_connections, 1024);
    // Safe by default: only pages of the listen addresses' own hosts; none for 0.0.0.0.
    assert_eq!(c.sip.ws_same_hosts(), ["127.0.0.1", "localhost", "[::1]"]);
    c.override_sip_listen("127.0.0.1:5070").unwrap();
    assert!(c.sip.ws_same_hosts().is_empty());
    c.add_listen(Transport::Ws, "127.0.0.2:8088").unwrap();
    assert_eq!(c.sip.ws_same_hosts(), ["127.0.0.2", "localhost"]);

    let text = format!("[sip]\nws_origins = [\"https://pbx.example.com\"]\n\n{MINIMAL}");
    let c = Config::from_str(&text, "t.toml").unwrap();
    assert_eq!(c.sip.ws.origins, ["https://pbx.example.com"]);
    assert!(c.sip.ws_same_hosts().is_empty());

    let e = errors(&format!(
        "[sip]\nws_path = \"ws\"\nws_origins = [\"pbx.example.com/x\"]\nws_max_connections = 0\n\n{MINIMAL}"
    ));
    assert!(e.iter().any(|e| e.contains("sip.ws_path: \"ws\"")), "{e:?}");
    assert!(e.iter().any(|e| e.contains("sip.ws_origins[0]")), "{e:?}");
    assert!(
        e.iter()
            .any(|e| e.contains("sip.ws_max_connections: 0 is out of range")),
        "{e:?}"
    );
}

#[test]
fn dispatch_sets_load_with_defaults_and_bad_ones_name_the_key() {
    let good = MINIMAL.to_string()
        + "[proxy]\ndomains = [\"edge.example\"]\ndispatch = \"nodes\"\n\
           [[dispatch]]\nname = \"nodes\"\nnodes = [\"sip:127.0.0.2:5060;weight=3\", \"sip:127.0.0.3\"]\n";
    let c = Config::from_str(&good, "strowger.toml").unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.proxy.dispatch, Some(0));
    let set = &c.dispatch[0];
    assert_eq!((set.probe_interval.as_secs(), set.probe_failures), (5, 2));
    assert_eq!(set.timeout.as_millis(), 2000);
    assert_eq!(set.nodes[0].uri, "sip:127.0.0.2:5060");
    assert_eq!((set.nodes[0].weight, set.nodes[1].weight), (3, 1));
    assert_eq!(set.nodes[1].peer.addr.to_string(), "127.0.0.3:5060");

    let bad = MINIMAL.to_string()
        + "[proxy]\ndispatch = \"other\"\n[[dispatch]]\nname = \"nodes\"\n\
           nodes = [\"sip:node.example\", \"sip:127.0.0.2;weight=0\"]\nprobe_failures = 0\n\
           [[dispatch]]\nname = \"nodes\"\n";
    let e = errors(&bad);
    for (key, what) in [
        ("proxy.dispatch", "no [[dispatch]] set is named \"other\""),
        ("proxy.domains", "is empty"),
        ("dispatch[0].nodes[0]", "with an IP address"),
        ("dispatch[0].nodes[1]", "weight \"0\""),
        ("dispatch[0].probe_failures", "out of range"),
        ("dispatch[1].name", "a name of its own"),
        ("dispatch[1].nodes", "is empty"),
    ] {
        assert!(
            e.iter().any(|l| l.contains(key) && l.contains(what)),
            "{key}: {what} not in {e:#?}"
        );
    }
}

/// `rtp.opus_*` become the Opus encoders' options; out-of-range values name the key.
#[test]
fn opus_settings() {
    let cfg = Config::from_str(
        &format!("[rtp]\nopus_bitrate = 12000\nopus_complexity = 2\nopus_fec = false\nopus_dtx = true\n\n{MINIMAL}"),
        "strowger.toml",
    )
    .unwrap();
    let o = cfg.rtp.opus;
    assert_eq!(
        (o.bitrate, o.complexity, o.fec, o.dtx),
        (12000, 2, false, true)
    );
    let defaults = Config::from_str(MINIMAL, "m.toml").unwrap().rtp.opus;
    assert_eq!(defaults, codec::OpusOptions::default());
    assert_eq!(
        errors(&format!(
            "[rtp]\nopus_bitrate = 5999\nopus_complexity = 11\n\n{MINIMAL}"
        )),
        [
            "strowger.toml:2:16: rtp.opus_bitrate: 5999 is out of range — expected 6000 to 510000",
            "strowger.toml:3:19: rtp.opus_complexity: 11 is out of range — expected 0 to 10",
        ]
    );
}

#[test]
fn a_cluster_node_uri_must_be_a_sip_ip_address() {
    for bad in ["10.0.0.5:5060", "sip:node-b.example", "sip:8000@10.0.0.5"] {
        let e = errors(&format!("{MINIMAL}[cluster]\nnode_uri = \"{bad}\"\n"));
        assert!(
            e.iter()
                .any(|e| e.contains("cluster.node_uri") && e.contains("use sip:IP[:PORT]")),
            "{bad}: {e:?}"
        );
    }
    let ok = format!("{MINIMAL}[cluster]\nnode_uri = \"sip:10.0.0.5:5070\"\n");
    let cfg = Config::from_str(&ok, "strowger.toml").unwrap();
    assert_eq!(cfg.cluster.node_uri.as_deref(), Some("sip:10.0.0.5:5070"));
}

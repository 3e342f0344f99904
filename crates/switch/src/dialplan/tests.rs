use std::time::Duration;

use super::*;
use crate::config::{Config, ConfigError};

fn dialplan(rules: &str) -> Dialplan {
    let text = format!("[vars]\ntarget = \"192.0.2.9\"\n{rules}");
    match Config::from_str(&text, "t.toml") {
        Ok(c) => c.dialplan,
        Err(e) => panic!(
            "{}",
            e.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

fn problems(rules: &str) -> Vec<ConfigError> {
    let text = format!("[vars]\ntarget = \"192.0.2.9\"\n{rules}");
    match Config::from_str(&text, "t.toml") {
        Ok(c) => c.warnings,
        Err(e) => e,
    }
}

fn messages(rules: &str) -> Vec<String> {
    problems(rules).iter().map(ToString::to_string).collect()
}

fn rule(pattern: &str, steps: &str) -> String {
    format!("[[dialplan.contexts.default.rules]]\n{pattern}\nsteps = [{steps}]\n")
}

/// Runs a route to its end, collecting its steps.
fn run(plan: &Dialplan, context: &str, exten: &str, vars: &mut Vars) -> Option<Vec<Step>> {
    let mut route = plan.route(context, exten, vars)?;
    Some(std::iter::from_fn(|| route.next(vars)).collect())
}

/// A one-target `bridge` step.
fn bridge(uri: &str, timeout_s: u64) -> Step {
    Step::Bridge {
        uri: uri.into(),
        timeout: Duration::from_secs(timeout_s),
        strategy: None,
        member_timeout: None,
        turn: Default::default(),
    }
}

fn call(exten: &str) -> Vars {
    Vars::for_call(exten, "alice", "abc@host", "/data")
}

#[test]
fn default_config_demo_extensions() {
    let plan = Config::embedded().dialplan;
    let ctx = plan.default_context().to_owned();
    let steps = |exten: &str| run(&plan, &ctx, exten, &mut call(exten)).unwrap();
    assert_eq!(
        steps("44444"),
        [
            Step::Answer,
            Step::Playback {
                audio: Audio::Demo,
                looped: true,
                cache: true
            }
        ]
    );
    assert_eq!(steps("9196"), [Step::Answer, Step::Echo]);
    assert_eq!(
        steps("9197"),
        [
            Step::Answer,
            Step::Record {
                file: "rec-abc@host.wav".into(),
                max: Duration::from_secs(10)
            },
            Step::Playback {
                audio: Audio::File("rec-abc@host.wav".into()),
                looped: false,
                cache: true
            },
            Step::Hangup {
                cause: Cause::NORMAL_CLEARING
            },
        ]
    );
    assert_eq!(steps("2001"), [bridge("sip:2001@127.0.0.1:5090", 30)]);
    for other in ["20011", "3", "", "9196x"] {
        assert_eq!(
            steps(other),
            [Step::Hangup {
                cause: Cause::UNALLOCATED_NUMBER
            }],
            "{other:?}"
        );
    }
    assert_eq!(Cause::UNALLOCATED_NUMBER.sip_status(), 404);
}

#[test]
fn first_matching_rule_wins_whatever_its_kind() {
    let plan = dialplan(
        &[
            rule(
                "regex = '^1(\\d)(?P<rest>\\d*)$'",
                "\"set x=regex:${1}:${rest}:${0}\"",
            ),
            rule("exten = \"100\"", "\"set x=exact\""),
            rule("prefix = \"2\"", "\"set x=prefix\""),
            rule("exten = \"200\"", "\"set x=never\""),
            rule("exten = \"300\"\ncaller = \"^bob$\"", "\"set x=bob\""),
            rule("exten = \"300\"", "\"set x=anyone\""),
        ]
        .concat(),
    );
    let x = |exten: &str, caller: &str| {
        let mut vars = Vars::for_call(exten, caller, "c", "/d");
        run(&plan, "default", exten, &mut vars)?;
        vars.get("x").map(str::to_owned)
    };
    assert_eq!(
        x("100", "a").as_deref(),
        Some("regex:0:0:100"),
        "regex listed first"
    );
    assert_eq!(x("1", "a"), None, "regex needs a digit");
    assert_eq!(
        x("200", "a").as_deref(),
        Some("prefix"),
        "prefix listed before exact"
    );
    assert_eq!(x("300", "bob").as_deref(), Some("bob"));
    assert_eq!(x("300", "carol").as_deref(), Some("anyone"));
    assert_eq!(x("400", "a"), None);
    assert!(plan.route("nowhere", "100", &call("100")).is_none());
}

#[test]
fn set_affects_later_steps_and_call_vars_win() {
    let plan = dialplan(&rule(
        "regex = \"^(\\\\d+)$\"",
        "\"bridge sip:${1}@${target}\", \"set target=${CALLER}.example\", \"bridge sip:${EXTEN}@${target}\"",
    ));
    let mut vars = call("55");
    let steps = run(&plan, "default", "55", &mut vars).unwrap();
    let uris: Vec<_> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Bridge { uri, .. } => Some(uri.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(uris, ["sip:55@192.0.2.9", "sip:55@alice.example"]);
    assert_eq!(vars.get("target"), Some("alice.example"));
}

#[test]
fn goto_keeps_call_vars() {
    let plan = dialplan(&format!(
        "{}[[dialplan.contexts.other.rules]]\nprefix = \"\"\nsteps = [\"playback ${{greeting}}.wav\"]\n",
        rule("prefix = \"\"", "'set greeting=\"hi there\"', \"goto other\"")
    ));
    let mut vars = call("1");
    let mut route = plan.route("default", "1", &vars).unwrap();
    assert_eq!(
        route.next(&mut vars),
        Some(Step::Set {
            name: "greeting".into(),
            value: "hi there".into()
        })
    );
    let Some(Step::Goto { context, .. }) = route.next(&mut vars) else {
        panic!("goto expected")
    };
    let mut route = plan.route(&context, "1", &vars).unwrap();
    assert_eq!(
        route.next(&mut vars),
        Some(Step::Playback {
            audio: Audio::File("hi there.wav".into()),
            looped: false,
            cache: true
        })
    );
    assert_eq!(route.next(&mut vars), None);
}

#[test]
fn every_app_parses() {
    let cases = [
        ("ringing", Step::Ringing),
        ("progress", Step::Progress),
        (
            "playback file=/abs/x.wav loop=false",
            Step::Playback {
                audio: Audio::File("/abs/x.wav".into()),
                looped: false,
                cache: true,
            },
        ),
        (
            "tone busy duration=2.5",
            Step::Tone {
                tone: Tone {
                    freqs_hz: vec![480, 620],
                    cadence: vec![Duration::from_millis(500); 2],
                },
                duration: Some(Duration::from_millis(2500)),
            },
        ),
        (
            "tone 425 cadence=1000,4000",
            Step::Tone {
                tone: Tone {
                    freqs_hz: vec![425],
                    cadence: vec![Duration::from_secs(1), Duration::from_secs(4)],
                },
                duration: None,
            },
        ),
        (
            "record x.wav",
            Step::Record {
                file: "x.wav".into(),
                max: Duration::from_secs(60),
            },
        ),
        (
            "bridge sip:1@192.0.2.1;transport=tcp",
            bridge("sip:1@192.0.2.1;transport=tcp", 60),
        ),
        (
            "wait 0.5",
            Step::Wait {
                duration: Duration::from_millis(500),
            },
        ),
        ("hangup 17", Step::Hangup { cause: Cause(17) }),
        ("hangup cause=USER_BUSY", Step::Hangup { cause: Cause(17) }),
        (
            "park",
            Step::Park {
                lot: "default".into(),
            },
        ),
        (
            "park lot=sales",
            Step::Park {
                lot: "sales".into(),
            },
        ),
        (
            "retrieve",
            Step::Retrieve {
                slot: "${EXTEN}".into(),
            },
        ),
        ("pickup", Step::Pickup { exten: None }),
        (
            "pickup ${1}",
            Step::Pickup {
                exten: Some("${1}".into()),
            },
        ),
    ];
    for (text, step) in cases {
        assert_eq!(Step::parse(text), Ok(step), "{text}");
    }
}

#[test]
fn step_errors_point_into_the_string() {
    let steps = "\"answer\", \"playbak demo\", \"playback demo lop=true\", \"wait soon\", \"hangup 99\", \"goto nowhere\", \"tone 350+x\", \"set\", \"echo x\", \"echo \\\"x\"";
    let e = messages(&rule("exten = \"1\"", steps));
    let key = "dialplan.contexts.default.rules[0].steps";
    assert_eq!(
        e,
        [
            format!("t.toml:5:20: {key}[1]: unknown app \"playbak\" — known apps: answer, ringing, progress, playback, tone, echo, moh, record, bridge, wait, set, hangup, goto, forward, park, retrieve, pickup, queue, queue_login, queue_logout, background, read, say, menu, voicemail, voicemail_main, conference, record-call"),
            format!("t.toml:5:51: {key}[2]: unknown option \"lop\" — usage: playback FILE|demo [loop=true] [cache=false]"),
            format!("t.toml:5:68: {key}[3]: seconds: \"soon\" — expected seconds, more than 0 and at most 86400"),
            format!("t.toml:5:83: {key}[4]: cause: unknown cause \"99\" — expected a Q.850 number or one of {}", Cause::names().collect::<Vec<_>>().join(", ")),
            format!("t.toml:5:88: {key}[5]: goto: no context \"nowhere\" — defined: default"),
            format!("t.toml:5:110: {key}[6]: tone: unknown tone \"350+x\" — expected dial, ringback, busy, congestion or frequencies 20-4000 Hz joined by +, e.g. 350+440"),
            format!("t.toml:5:122: {key}[7]: missing NAME=VALUE — usage: set NAME=VALUE"),
            format!("t.toml:5:131: {key}[8]: unexpected \"x\" — usage: echo"),
            format!("t.toml:5:135: {key}[9]: unterminated quote"),
        ]
    );
}

#[test]
fn rule_errors() {
    let e = messages(
        &[
            rule("exten = \"1\"\nprefix = \"1\"", "\"echo\""),
            rule("regex = \"^2(\\\\d{3}$\"", "\"echo\""),
            rule("exten = \"3\"\ncaller = \"(\"", "\"echo\""),
            rule("exten = \"4\"", ""),
        ]
        .concat(),
    );
    let key = "dialplan.contexts.default.rules";
    assert_eq!(
        e,
        [
            format!("t.toml:3:1: {key}[0]: needs exactly one of exten = \"...\", prefix = \"...\" or regex = \"...\""),
            format!("t.toml:8:9: {key}[1].regex: invalid regex \"^2(\\\\d{{3}}$\": unclosed group"),
            format!("t.toml:12:10: {key}[2].caller: invalid regex \"(\": unclosed group"),
            format!("t.toml:16:9: {key}[3].steps: needs at least one step, e.g. [\"answer\", \"echo\"]"),
        ]
    );
}

#[test]
fn unknown_variables_warn_but_load() {
    let problems = problems(&rule(
        "regex = \"^(?P<num>\\\\d+)$\"",
        "\"set a=${num}${1}${CALLID}\", \"bridge sip:${a}@${target}\", \"playback ${nope}.wav\", \"record ${2}\", \"wait ${x\"",
    ));
    let text: Vec<_> = problems.iter().map(ToString::to_string).collect();
    let key = "dialplan.contexts.default.rules[0].steps";
    assert_eq!(
        text,
        [
            format!("t.toml:5:78: warning: {key}[2]: unknown variable ${{nope}} expands to \"\" — define it in [vars] or set it in an earlier step"),
            format!("t.toml:5:100: warning: {key}[3]: unknown variable ${{2}} expands to \"\" — define it in [vars] or set it in an earlier step"),
            format!("t.toml:5:113: {key}[4]: bad variable reference — expected ${{NAME}} with letters, digits and _"),
            format!("t.toml:5:113: {key}[4]: seconds: \"${{x\" — expected seconds, more than 0 and at most 86400"),
        ]
    );
    // Warnings alone do not stop loading; unknown names expand to "".
    let plan = dialplan(&rule("exten = \"1\"", "\"playback x${nope}y\""));
    assert_eq!(
        run(&plan, "default", "1", &mut call("1")).unwrap(),
        [Step::Playback {
            audio: Audio::File("xy".into()),
            looped: false,
            cache: true
        }]
    );
}

#[test]
fn q850_sip_mapping_both_ways() {
    let forward = [
        (1, 404),
        (16, 480),
        (17, 486),
        (18, 408),
        (19, 480),
        (21, 403),
        (27, 502),
        (28, 484),
        (34, 503),
        (41, 503),
        (65, 488),
        (102, 504),
        (127, 500),
    ];
    for (cause, status) in forward {
        assert_eq!(Cause(cause).sip_status(), status, "cause {cause}");
    }
    assert_eq!(Cause(99).sip_status(), 500, "unlisted cause");
    let reverse = [
        (200, 16),
        (404, 1),
        (486, 17),
        (600, 17),
        (480, 18),
        (408, 102),
        (603, 21),
        (604, 1),
        (503, 41),
        (502, 38),
        (484, 28),
        (487, 16),
        (488, 65),
        (606, 65),
        (499, 127),
    ];
    for (status, cause) in reverse {
        assert_eq!(
            Cause::from_sip_status(status),
            Cause(cause),
            "status {status}"
        );
    }
    assert_eq!(Cause::parse("user_busy"), Some(Cause(17)));
    assert_eq!(Cause::parse("17"), Some(Cause(17)));
    assert_eq!(
        Cause::parse("Normal_Clearing"),
        Some(Cause::NORMAL_CLEARING)
    );
    assert_eq!(Cause::parse("99"), None);
    assert_eq!(Cause(17).to_string(), "17 (user_busy)");
}

#[test]
fn vars_expansion() {
    let mut vars = Vars::new();
    vars.set("a", "1");
    assert_eq!(
        vars.expand("x${a}y${b}z$a${"),
        "x${a}y${b}z$a${",
        "unterminated: left as written"
    );
    assert_eq!(vars.expand("x${a}y${b}z$a"), "x1yz$a");
    assert_eq!(vars.expand("${a}${a}"), "11");
}

/// The first retrieve or pickup step a dialled extension would run in some context, expanded:
/// what a worker asks before it knows the caller's context.
#[test]
fn rendezvous_steps_are_found_in_any_context() {
    let toml = r#"
[dialplan]
default_context = "default"
[[dialplan.contexts.default.rules]]
regex = "^7(0[1-9]|1[0-9]|20)$"
steps = ["retrieve"]
[[dialplan.contexts.default.rules]]
exten = "700"
steps = ["park"]
[[dialplan.contexts.office.rules]]
regex = "^\\*8(\\d+)$"
steps = ["set X=1", "pickup ${1}"]
[[dialplan.contexts.office.rules]]
exten = "*8"
steps = ["pickup"]
"#;
    let plan = crate::config::Config::from_str(toml, "t.toml")
        .unwrap()
        .dialplan;
    let vars = |e: &str| Vars::for_call(e, "1002", "c@x", "/tmp");
    let found = |e: &str| plan.rendezvous(e, &vars(e));
    assert_eq!(found("705"), Some(Step::Retrieve { slot: "705".into() }));
    assert_eq!(
        found("*81001"),
        Some(Step::Pickup {
            exten: Some("1001".into())
        })
    );
    assert_eq!(found("*8"), Some(Step::Pickup { exten: None }));
    assert_eq!(found("700"), None, "parking joins no other call");
    assert_eq!(found("1001"), None);
    assert!(plan.has_pickup());
}

#[test]
fn conditional_goto_forward_and_ring_group_steps_parse() {
    use super::cond::{Expr, TimeSpec};
    let goto = Step::parse(
        r#"goto vm exten=vm-${EXTEN} if="${DIALSTATUS} = NOANSWER" time="mon-fri 09:00-17:30""#,
    );
    assert_eq!(
        goto,
        Ok(Step::Goto {
            context: "vm".into(),
            exten: Some("vm-${EXTEN}".into()),
            cond: Some(Expr::parse("${DIALSTATUS} = NOANSWER").unwrap()),
            time: Some(TimeSpec::parse("mon-fri 09:00-17:30").unwrap()),
        })
    );
    assert_eq!(
        Step::parse("forward set busy ${1}"),
        Ok(Step::Forward {
            kind: Some(store::Forward::Busy),
            target: Some("${1}".into())
        })
    );
    assert_eq!(
        Step::parse("forward clear all"),
        Ok(Step::Forward {
            kind: None,
            target: None
        })
    );
    let Ok(Step::Bridge {
        uri,
        strategy,
        member_timeout,
        ..
    }) = Step::parse("bridge user/1001&user/1002 strategy=sequential member_timeout=5")
    else {
        panic!("bridge expected")
    };
    assert_eq!(uri, "user/1001&user/1002");
    assert_eq!(strategy, Some(Strategy::Sequential));
    assert_eq!(member_timeout, Some(Duration::from_secs(5)));
    for bad in [
        "forward",
        "forward set",
        "forward set always",
        "forward set all 1",
        "forward clear busy 1",
        "forward set busy sip:a@b",
        "forward toggle busy",
        "goto x if=\"a b\"",
        "goto x time=\"someday\"",
        "bridge user/1 strategy=random",
    ] {
        assert!(Step::parse(bad).is_err(), "{bad}");
    }
    // Conditions and the target extension are expanded with the call's variables.
    let plan = dialplan(&rule(
        "exten = \"1\"",
        r#"'set s=BUSY', 'goto default exten=2 if="${s} = BUSY"'"#,
    ));
    let steps = run(&plan, "default", "1", &mut call("1")).unwrap();
    assert!(matches!(
        &steps[1],
        Step::Goto { exten: Some(e), cond: Some(c), .. } if e == "2" && c.holds()
    ));
    for ok in ["2001", "+4930123", "*97", "sales.desk"] {
        assert!(super::dialable(ok), "{ok}");
    }
    for bad in ["", "20 01", "sip:x@y", "a;b", &"1".repeat(65)] {
        assert!(!super::dialable(bad), "{bad}");
    }
}

#[test]
fn condition_time_zone_and_ring_group_errors_name_the_key() {
    let e = messages(
        &[
            "[dialplan]\ntimezone = \"Mars/Olympus\"\n",
            &rule(
                "exten = \"1\"",
                r#"'goto default time="mon-fry"', 'goto default if="a =~ ("', 'bridge group/nope', 'bridge user/1&iax2/x/1'"#,
            ),
            "[ring_groups.g]\nmembers = []\nstrategy = \"random\"\nmember_timeout_s = 0\n",
        ]
        .concat(),
    );
    let key = "dialplan.contexts.default.rules[0].steps";
    assert_eq!(
        e,
        [
            "t.toml:4:12: dialplan.timezone: unknown time zone \"Mars/Olympus\" — use an IANA name such as \"Europe/Berlin\" (the system's time zone database), or \"UTC\"".to_string(),
            format!("t.toml:7:24: {key}[0]: time: unknown day \"fry\" — expected * or mon, tue, wed, thu, fri, sat, sun"),
            format!("t.toml:7:55: {key}[1]: if: invalid regex \"(\": unclosed group"),
            format!("t.toml:7:69: {key}[2]: bridge: no ring group \"nope\" — define [ring_groups.nope] (defined: )"),
            format!("t.toml:7:90: {key}[3]: bridge: \"iax2/x/1\" in a list: a member is user/NAME or a SIP URI (sip:user@IP[:port])"),
            "t.toml:9:11: ring_groups.g.members: needs at least one member, e.g. [\"user/1001\", \"user/1002\"]".to_string(),
            "t.toml:10:12: ring_groups.g.strategy: unknown strategy \"random\" — expected ringall, sequential, roundrobin".to_string(),
            "t.toml:11:20: ring_groups.g.member_timeout_s: must be 1 to 3600 seconds".to_string(),
        ]
    );
}

#[test]
fn default_config_forwarding_codes_and_ring_group() {
    let plan = Config::embedded().dialplan;
    let ctx = plan.default_context().to_owned();
    let mut vars = call("*721002");
    let steps = run(&plan, &ctx, "*721002", &mut vars).unwrap();
    let Step::Goto { context, .. } = &steps[0] else {
        panic!("goto expected: {steps:?}")
    };
    let steps = run(&plan, context, "*721002", &mut vars).unwrap();
    assert_eq!(
        steps[0],
        Step::Forward {
            kind: Some(store::Forward::Always),
            target: Some("1002".into())
        }
    );
    let steps = run(&plan, context, "*93", &mut vars).unwrap();
    assert_eq!(
        steps[0],
        Step::Forward {
            kind: Some(store::Forward::NoAnswer),
            target: None
        }
    );
    let group = plan.ring_group("sales").unwrap();
    assert_eq!(group.members, ["user/1001", "user/1002"]);
    assert_eq!(group.strategy, Strategy::RingAll);
    assert!(matches!(
        &run(&plan, &ctx, "6000", &mut call("6000")).unwrap()[0],
        Step::Bridge { uri, .. } if uri == "group/sales"
    ));
}

#[test]
fn voice_menu_steps_parse() {
    assert_eq!(
        Step::parse("read PIN digits=4 timeout=3 terminator=* prompt=tts:\"your pin\""),
        Ok(Step::Read {
            var: "PIN".into(),
            max: Some(4),
            timeout: Duration::from_secs(3),
            terminator: Some('*'),
            prompt: Some("tts:your pin".into()),
        })
    );
    assert_eq!(
        Step::parse("read X"),
        Ok(Step::Read {
            var: "X".into(),
            max: None,
            timeout: Duration::from_secs(5),
            terminator: Some('#'),
            prompt: None,
        })
    );
    assert_eq!(
        Step::parse("say text \"Welcome to strowger\""),
        Ok(Step::Say {
            kind: SayAs::Text,
            value: "Welcome to strowger".into(),
        })
    );
    assert_eq!(
        Step::parse("background hello.wav"),
        Ok(Step::Background {
            file: "hello.wav".into()
        })
    );
    assert_eq!(
        Step::parse("menu main"),
        Ok(Step::Menu {
            name: "main".into()
        })
    );
    for bad in [
        "read",
        "read 1x",
        "read X digits=0",
        "read X terminator=##",
        "say",
        "say number",
        "say number twelve",
        "say colour 1",
        "say digits 1 2",
        "menu",
    ] {
        assert!(Step::parse(bad).is_err(), "{bad}");
    }
    // The value said is expanded with the call's variables; a read's variable is known after it.
    let plan = dialplan(&rule(
        "exten = \"1\"",
        r#"'read PIN digits=2', 'say number ${PIN}'"#,
    ));
    let mut vars = call("1");
    vars.set("PIN", "42");
    let steps = run(&plan, "default", "1", &mut vars).unwrap();
    assert_eq!(
        steps[1],
        Step::Say {
            kind: SayAs::Number,
            value: "42".into()
        }
    );
}

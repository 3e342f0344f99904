//! Voicemail on the simulated network (tests/net): callers leave messages in a box (the
//! greeting, the beep, the recording until `#` or hang-up, a full box refused), and the box's
//! user hears and manages them by RFC 4733 digits behind a PIN; phones SUBSCRIBE to the box's
//! message summary (RFC 3842) or are told unsolicited. The boxes are real files in the
//! switch's data directory. A message also ends on a run of silence, which is left out of it;
//! a box store that does not answer ends the caller's call and leaves the others alone.

use crate::net;

use net::*;
use sip::{HeaderName, Message, Method};
use std::path::PathBuf;
use store::voicemail::{Mailbox, MailboxOp, Mailboxes};

const SW: &str = "127.0.0.1:5060";
const ALICE: &str = "127.0.0.1:5070";
/// A phone whose SUBSCRIBEs the test writes by hand; it answers NOTIFYs 200.
const PHONE: &str = "127.0.0.1:5080";

/// A one-worker switch trusting its callers; 1001 has a box (PIN 4711) of two messages at
/// most, five seconds each.
fn switch(n: &mut Net) -> Id {
    switch_with(n, 1)
}

/// `switch` with `workers` workers.
fn switch_with(n: &mut Net, workers: usize) -> Id {
    switch_and_phone(n, workers, "").0
}

/// `switch_with` with `voicemail` keys added to `[voicemail]`, and the station of PHONE.
fn switch_and_phone(n: &mut Net, workers: usize, voicemail: &str) -> (Id, Id) {
    let toml = format!("[rtp]\nmedia_timeout_s = 0\n[registrar]\nauthenticate = false\nkeepalive_s = 0\n\
        [security]\ntrusted = [\"127.0.0.1\"]\n\
        [voicemail]\nmax_messages = 2\nmax_message_s = 5\nsounds_dir = \"/sounds\"\n\
        max_subscriptions_per_user = 2\n{voicemail}\n\
        [voicemail.mailboxes]\n\"1001\" = \"4711\"\n\"1002\" = \"1234\"\n\
        [[dialplan.contexts.default.rules]]\nexten = \"vm-1001\"\nsteps = [\"voicemail 1001 busy\", \"hangup\"]\n\
        [[dialplan.contexts.default.rules]]\nexten = \"vm-1003\"\nsteps = [\"voicemail 1003\"]\n\
        [[dialplan.contexts.default.rules]]\nexten = \"8500\"\nsteps = [\"voicemail_main 1001\", \"hangup\"]\n\
        [[dialplan.contexts.default.rules]]\nexten = \"echo\"\nsteps = [\"answer\", \"echo\"]\n");
    let sw = n.switch(&toml, &[SW], workers);
    let phone = n.ua(PHONE, "1001");
    n.agent(phone).notify_status = 200;
    for u in ["1001", "1002"] {
        n.sw(sw).shared.store.add_user(u, "strowger", "pw");
    }
    (sw, phone)
}

/// μ-law of a loud sample (about 8000): speech, not silence, to the recorder.
const LOUD: u8 = 0x8f;

/// A caller that speaks (a loud tone) and offers telephone-event.
fn caller(n: &mut Net) -> Id {
    let a = n.ua(ALICE, "2001");
    n.agent(a).codecs = vec![0, 101];
    n.agent(a).send_rtp = true;
    n.agent(a).voice = vec![LOUD; 160];
    a
}

fn data_dir(n: &mut Net, sw: Id) -> PathBuf {
    n.sw(sw).shared.data_dir.0.clone()
}

fn mailbox(n: &mut Net, sw: Id) -> Mailbox {
    Mailboxes::new(&data_dir(n, sw), None)
        .and_then(|b| b.run("1001", &MailboxOp::List))
        .expect("the box lists")
}

fn prompts(n: &mut Net, sw: Id) -> Vec<String> {
    n.sw(sw).node().prompts().to_vec()
}

/// `keys` pressed on call `c`, a little apart.
fn press(n: &mut Net, a: Id, c: usize, keys: &str) {
    for k in keys.chars() {
        n.agent(a).dtmf(c, k);
        n.run_for(ms(300));
    }
}

/// A message of `secs_long` seconds left in 1001's box by hanging up.
fn leave_message(n: &mut Net, a: Id, secs_long: u64) {
    let c = n.invite(a, "sip:vm-1001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)), "voicemail answers");
    // The greeting: "the person at 1 0 0 1 is on the phone", the intro, the beep (8 prompts of
    // 1 s here), then the message.
    n.run_for(secs(8 + secs_long));
    n.bye(a, c);
    assert!(n.run_until(secs(2), bye_answered(a, c)), "hung up");
}

#[test]
fn a_message_is_left_after_the_greeting_and_kept_when_the_caller_hangs_up() {
    let mut n = Net::new(1);
    let sw = switch(&mut n);
    let a = caller(&mut n);
    leave_message(&mut n, a, 3);
    let said = prompts(&mut n, sw);
    // (A prompt is asked of the shell once: digits/0 and digits/1 are said twice.)
    assert_eq!(
        said,
        [
            "/sounds/vm-theperson.wav",
            "/sounds/digits/1.wav",
            "/sounds/digits/0.wav",
            "/sounds/vm-isonphone.wav",
            "/sounds/vm-intro.wav",
            "/sounds/beep.wav"
        ]
        .map(String::from)
    );
    let b = mailbox(&mut n, sw);
    assert_eq!((b.new.len(), b.old.len()), (1, 0));
    let m = &b.new[0];
    assert_eq!(m.meta.caller, "2001");
    assert!((2..=4).contains(&m.meta.duration_s), "{:?}", m.meta);
    // The audio the caller sent (8 kHz 16-bit samples) is in the message's WAV.
    let wav = std::fs::read(data_dir(&mut n, sw).join(store::voicemail::audio("1001", m))).unwrap();
    assert_eq!(&wav[..4], b"RIFF");
    assert!(wav.len() > 2 * 8000 * 2, "{} bytes", wav.len());
}

/// A caller speaks 1 s and falls silent: 2 s later (`voicemail.silence_s`, within the 5 s a
/// message may last) strowger ends the message itself, says it was saved and hangs up; the file
/// holds the second spoken, not the silence, and its duration says so.
#[test]
fn a_message_ends_on_silence_which_is_left_out() {
    let mut n = Net::new(9);
    let (sw, _) = switch_and_phone(&mut n, 1, "silence_s = 2");
    let a = caller(&mut n);
    let c = n.invite(a, "sip:vm-1001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)), "voicemail answers");
    // The greeting: 8 prompts of 1 s here; then 1 s spoken.
    n.run_for(secs(8 + 1));
    n.agent(a).voice.clear();
    assert!(
        !n.run_until(ms(1500), ended(a, c)),
        "not before 2 s of silence"
    );
    assert!(
        n.run_until(secs(3), ended(a, c)),
        "strowger ends the message and the call after 2 s of silence"
    );
    assert!(prompts(&mut n, sw)
        .iter()
        .any(|p| p.ends_with("vm-msgsaved.wav")));
    let b = mailbox(&mut n, sw);
    assert_eq!(b.new.len(), 1);
    let m = &b.new[0];
    assert!(m.meta.duration_s <= 2, "{:?}", m.meta);
    let wav = std::fs::read(data_dir(&mut n, sw).join(store::voicemail::audio("1001", m))).unwrap();
    let data = wav
        .windows(4)
        .position(|w| w == b"data")
        .expect("a data chunk")
        + 8;
    let samples: Vec<i16> = wav[data..]
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert!(
        (8000 / 2..=8000 * 3 / 2).contains(&samples.len()),
        "about 1 s kept of 3 s recorded: {} samples",
        samples.len()
    );
    assert!(
        samples[samples.len() - 160..]
            .iter()
            .all(|s| s.abs() > 4000),
        "it ends on speech: the silence is left out"
    );
}

/// With the box store away (`voicemail.store` in a Redis that is down) a caller to voicemail is
/// hung up at once rather than left in silence, the log says why, and other calls go on.
#[test]
fn a_box_store_away_ends_the_voicemail_call_and_no_other() {
    let mut n = Net::new(10);
    let sw = switch(&mut n);
    let a = caller(&mut n);
    let echo = n.invite(a, "sip:echo@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, echo)), "a call before");
    n.sw(sw)
        .node()
        .boxes_away("voicemail.store redis://127.0.0.1:1: connection refused");
    let c = n.invite(a, "sip:vm-1001@127.0.0.1", SW);
    assert!(
        n.run_until(secs(2), ended(a, c)),
        "the caller is not left hanging"
    );
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter()
            .any(|l| l.contains("voicemail box 1001") && l.contains("voicemail.store")),
        "{logs:?}"
    );
    n.run_for(secs(2));
    assert_eq!(
        n.agent(a).call(echo).state,
        State::Confirmed,
        "the other call goes on"
    );
    n.bye(a, echo);
    assert!(n.run_until(secs(2), bye_answered(a, echo)));
    assert_bye_ok(&mut n, a, echo, "the other call");
}

#[test]
fn hash_ends_the_message_and_a_full_box_takes_no_more() {
    let mut n = Net::new(2);
    let sw = switch(&mut n);
    let a = caller(&mut n);
    let c = n.invite(a, "sip:vm-1001@127.0.0.1", SW);
    n.run_for(secs(10));
    press(&mut n, a, c, "#");
    assert!(
        n.run_until(secs(5), ended(a, c)),
        "strowger hangs up after its goodbye"
    );
    assert!(prompts(&mut n, sw)
        .iter()
        .any(|p| p.ends_with("vm-msgsaved.wav")));
    assert_eq!(mailbox(&mut n, sw).new.len(), 1);
    leave_message(&mut n, a, 1);
    assert_eq!(mailbox(&mut n, sw).new.len(), 2);
    // The third finds the box full: it is told so and nothing is recorded.
    let c = n.invite(a, "sip:vm-1001@127.0.0.1", SW);
    assert!(n.run_until(secs(5), ended(a, c)), "a full box hangs up");
    assert!(prompts(&mut n, sw)
        .iter()
        .any(|p| p.ends_with("vm-mailboxfull.wav")));
    assert_eq!(mailbox(&mut n, sw).new.len(), 2);
    // A user without a box is refused, and the log names the key to add.
    let c = n.invite(a, "sip:vm-1003@127.0.0.1", SW);
    assert!(n.run_until(secs(2), ended(a, c)));
    let logs = n.sw(sw).logs();
    assert!(
        logs.iter().any(|l| l.contains("[voicemail.mailboxes]")),
        "{logs:?}"
    );
}

#[test]
fn the_menu_asks_the_pin_then_plays_saves_and_deletes() {
    let mut n = Net::new(3);
    let sw = switch(&mut n);
    let a = caller(&mut n);
    leave_message(&mut n, a, 2);
    let id = mailbox(&mut n, sw).new[0].id.clone();
    let c = n.invite(a, "sip:8500@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    n.run_for(secs(1));
    assert!(prompts(&mut n, sw)
        .iter()
        .any(|p| p.ends_with("vm-password.wav")));
    // A wrong PIN hears nothing of the box.
    press(&mut n, a, c, "1234#");
    n.run_for(secs(1));
    assert!(!prompts(&mut n, sw)
        .iter()
        .any(|p| p.ends_with("vm-youhave.wav")));
    press(&mut n, a, c, "4711#");
    n.run_for(secs(1));
    assert!(prompts(&mut n, sw)
        .iter()
        .any(|p| p.ends_with("vm-youhave.wav")));
    // 1 plays the new message; heard, it is old.
    press(&mut n, a, c, "1");
    n.run_for(secs(3));
    let heard = format!("voicemail/1001/Old/{id}.wav");
    assert!(
        prompts(&mut n, sw).contains(&heard),
        "{:?}",
        prompts(&mut n, sw)
    );
    let b = mailbox(&mut n, sw);
    assert_eq!((b.new.len(), b.old.len()), (0, 1));
    // 5 repeats it, 7 deletes it.
    let played = |n: &mut Net| prompts(n, sw).iter().filter(|p| **p == heard).count();
    press(&mut n, a, c, "5");
    n.run_for(secs(3));
    assert_eq!(played(&mut n), 2);
    press(&mut n, a, c, "7");
    n.run_for(secs(1));
    let b = mailbox(&mut n, sw);
    assert_eq!((b.new.len(), b.old.len()), (0, 0));
    // 0 5: a new PIN, which the next call asks for.
    press(&mut n, a, c, "05");
    press(&mut n, a, c, "2468#");
    n.run_for(secs(1));
    assert_eq!(mailbox(&mut n, sw).pin.as_deref(), Some("2468"));
    press(&mut n, a, c, "#");
    assert!(
        n.run_until(secs(5), ended(a, c)),
        "# says goodbye and leaves"
    );
}

#[test]
fn the_user_records_a_busy_greeting_that_callers_then_hear() {
    let mut n = Net::new(11);
    let sw = switch(&mut n);
    let a = caller(&mut n);
    let c = n.invite(a, "sip:8500@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    // 0 options, 2 busy greeting: "record your busy message", the beep, 2 s, then #.
    press(&mut n, a, c, "4711#02");
    n.run_for(secs(4));
    press(&mut n, a, c, "#");
    n.run_for(secs(1));
    assert!(mailbox(&mut n, sw).busy_greeting);
    let said = prompts(&mut n, sw);
    assert!(
        said.iter().any(|p| p.ends_with("vm-rec-busy.wav")),
        "{said:?}"
    );
    // Back in the options, # leaves.
    press(&mut n, a, c, "#");
    assert!(n.run_until(secs(5), ended(a, c)));
    let greeting = data_dir(&mut n, sw).join("voicemail/1001/busy.wav");
    let len = std::fs::metadata(&greeting).unwrap().len();
    assert!(len > 8000 * 2, "about 2 s recorded: {len} bytes");
    // A caller hears it instead of "the person at ... is on the phone".
    let c = n.invite(a, "sip:vm-1001@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    n.run_for(secs(1));
    let said = prompts(&mut n, sw);
    assert!(
        said.contains(&"voicemail/1001/busy.wav".to_string()),
        "{said:?}"
    );
    assert!(
        !said.iter().any(|p| p.ends_with("vm-theperson.wav")),
        "{said:?}"
    );
}

#[test]
fn the_owner_may_skip_the_pin_where_configured_and_nobody_else() {
    let mut n = Net::new(13);
    let (sw, _) = switch_and_phone(&mut n, 1, "owner_skips_pin = true");
    // Callers from 127.0.0.2 are not trusted: they are challenged and run as their user.
    let owner = n.ua("127.0.0.2:5070", "1001");
    n.agent(owner).credentials = Some(("1001".into(), "pw".into()));
    n.agent(owner).codecs = vec![0, 101];
    let c = n.invite(owner, "sip:8500@127.0.0.1", SW);
    assert!(n.run_until(secs(3), confirmed(owner, c)));
    n.run_for(secs(1));
    let said = prompts(&mut n, sw);
    assert!(
        said.iter().any(|p| p.ends_with("vm-youhave.wav")),
        "{said:?}"
    );
    assert!(
        !said.iter().any(|p| p.ends_with("vm-password.wav")),
        "{said:?}"
    );
    hang_up(&mut n, owner, c, secs(2));
    let other = n.ua("127.0.0.2:5072", "1002");
    n.agent(other).credentials = Some(("1002".into(), "pw".into()));
    let c = n.invite(other, "sip:8500@127.0.0.1", SW);
    assert!(n.run_until(secs(3), confirmed(other, c)));
    n.run_for(secs(1));
    assert!(prompts(&mut n, sw)
        .iter()
        .any(|p| p.ends_with("vm-password.wav")));
}

#[test]
fn three_wrong_pins_end_the_call() {
    let mut n = Net::new(4);
    let sw = switch(&mut n);
    let a = caller(&mut n);
    let c = n.invite(a, "sip:8500@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    press(&mut n, a, c, "0000#1111#2222#");
    assert!(n.run_until(secs(10), ended(a, c)));
    let said = prompts(&mut n, sw);
    assert!(said.iter().any(|p| p.ends_with("vm-incorrect.wav")));
    assert!(!said.iter().any(|p| p.ends_with("vm-youhave.wav")));
}

/// What the switch sent to PHONE so far, parsed, retransmissions left out.
fn to_phone(n: &Net) -> Vec<Message> {
    let mut seen = Vec::new();
    n.trace
        .iter()
        .filter(|p| p.to == addr(PHONE) && p.from == addr(SW))
        .filter(|p| {
            !seen.contains(&p.bytes) && {
                seen.push(p.bytes.clone());
                true
            }
        })
        .map(|p| Message::parse(&p.bytes, true).expect("SIP"))
        .collect()
}

fn notifies(n: &Net) -> Vec<Message> {
    to_phone(n)
        .into_iter()
        .filter(|m| m.method() == Some(&Method::Notify))
        .collect()
}

/// One SUBSCRIBE in dialog `call_id` (`to_tag`: a refresh), answering `challenge` as `user`.
struct Subscribe<'a> {
    /// The Request-URI: the box asked for.
    ruri: &'a str,
    user: &'a str,
    password: &'a str,
    call_id: &'a str,
    event: &'a str,
    expires: &'a str,
    to_tag: Option<String>,
}

impl Subscribe<'_> {
    fn new(call_id: &str) -> Subscribe<'_> {
        Subscribe {
            ruri: "sip:1001@127.0.0.1:5060",
            user: "1001",
            password: "pw",
            call_id,
            event: "message-summary",
            expires: "3600",
            to_tag: None,
        }
    }

    /// Sends it with CSeq `cseq`, then once more with credentials if challenged; the final
    /// response.
    fn send(&self, n: &mut Net, sw: Id, cseq: u32) -> Message {
        let first = self.once(n, sw, cseq, None);
        if first.status() != Some(401) {
            return first;
        }
        let c = first
            .header(HeaderName::WwwAuthenticate)
            .and_then(|v| sip::auth::Challenge::parse(v).ok())
            .expect("a challenge");
        let uri = self.ruri;
        let auth = sip::auth::Authorization::build(
            &c,
            self.user,
            self.password,
            "SUBSCRIBE",
            uri,
            1,
            "cn",
        );
        self.once(n, sw, cseq + 1, Some(auth))
    }

    fn once(&self, n: &mut Net, sw: Id, cseq: u32, auth: Option<String>) -> Message {
        let to_tag = self
            .to_tag
            .as_ref()
            .map_or(String::new(), |t| format!(";tag={t}"));
        let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
        let text = format!(
            "SUBSCRIBE {} SIP/2.0\r\n\
             Via: SIP/2.0/UDP {PHONE};branch=z9hG4bK-{}-{cseq};rport\r\n\
             Max-Forwards: 70\r\nFrom: <sip:{}@strowger>;tag=ph\r\nTo: <sip:1001@strowger>{to_tag}\r\n\
             Call-ID: {}\r\nCSeq: {cseq} SUBSCRIBE\r\nContact: <sip:{}@{PHONE}>\r\n\
             Event: {}\r\nExpires: {}\r\nAccept: application/simple-message-summary\r\n{auth}\
             Content-Length: 0\r\n\r\n",
            self.ruri,
            self.call_id, self.user, self.call_id, self.user, self.event, self.expires
        );
        let now = n.now;
        n.sw(sw)
            .deliver(Packet::sip(addr(PHONE), addr(SW), text.into_bytes()), now);
        let answered = |n: &mut Net| {
            to_phone(n).into_iter().any(|m| {
                m.status().is_some_and(|s| s >= 200)
                    && m.header(HeaderName::CSeq) == Some(&format!("{cseq} SUBSCRIBE"))
            })
        };
        assert!(n.run_until(secs(2), answered), "SUBSCRIBE {cseq} answered");
        to_phone(n)
            .into_iter()
            .rfind(|m| {
                m.header(HeaderName::CSeq) == Some(&format!("{cseq} SUBSCRIBE"))
                    && m.status().is_some_and(|s| s >= 200)
            })
            .unwrap()
    }
}

#[test]
fn the_user_subscribes_to_its_box_and_is_told_every_change() {
    let mut n = Net::new(5);
    let sw = switch(&mut n);
    let ok = Subscribe::new("sub-1").send(&mut n, sw, 1);
    assert_eq!(ok.status(), Some(200));
    assert_eq!(ok.header(HeaderName::Expires), Some("3600"));
    assert!(n.run_until(secs(1), |n| notifies(n).len() == 1));
    let first = &notifies(&n)[0];
    assert_eq!(first.header(HeaderName::Event), Some("message-summary"));
    assert!(first
        .header_named("Subscription-State")
        .unwrap()
        .starts_with("active;expires="));
    let b = body(first);
    assert!(
        b.contains("Messages-Waiting: no") && b.contains("Voice-Message: 0/0 (0/0)"),
        "{b}"
    );
    // A message left: told at once.
    let a = caller(&mut n);
    leave_message(&mut n, a, 1);
    assert!(
        n.run_until(secs(1), |n| notifies(n).len() == 2),
        "{:?}",
        notifies(&n).len()
    );
    let b = body(&notifies(&n)[1]);
    assert!(
        b.contains("Messages-Waiting: yes") && b.contains("Voice-Message: 1/0 (0/0)"),
        "{b}"
    );
    // Heard in the menu, it is old: told again.
    let c = n.invite(a, "sip:8500@127.0.0.1", SW);
    assert!(n.run_until(secs(2), confirmed(a, c)));
    press(&mut n, a, c, "4711#1");
    n.run_for(secs(1));
    let b = body(notifies(&n).last().unwrap());
    assert!(
        b.contains("Messages-Waiting: no") && b.contains("Voice-Message: 0/1 (0/0)"),
        "{b}"
    );
    // Expires: 0 in the dialog ends it with a last NOTIFY.
    let told = notifies(&n).len();
    let mut bye = Subscribe::new("sub-1");
    bye.expires = "0";
    bye.to_tag = ok
        .header(HeaderName::To)
        .and_then(|t| sip::NameAddr::parse(t).ok())
        .and_then(|t| t.tag().map(String::from));
    assert_eq!(bye.send(&mut n, sw, 10).status(), Some(200));
    assert!(n.run_until(secs(1), |n| notifies(n).len() == told + 1));
    let last = notifies(&n).last().unwrap().clone();
    assert!(last
        .header_named("Subscription-State")
        .unwrap()
        .starts_with("terminated"));
    // Ended, it is told nothing more.
    press(&mut n, a, c, "7");
    n.run_for(secs(2));
    assert_eq!(notifies(&n).len(), told + 1);
}

#[test]
fn a_box_changed_on_one_worker_is_told_to_subscriptions_on_every_worker() {
    let mut n = Net::new(9);
    let sw = switch_with(&mut n, 2);
    // Two subscriptions whose dialogs two different workers own.
    let ids: Vec<String> = (0..2)
        .map(|w| {
            (0..)
                .map(|i| format!("sub-{i}"))
                .find(|id| switch::owner(id, 2) == w)
                .unwrap()
        })
        .collect();
    for id in &ids {
        assert_eq!(Subscribe::new(id).send(&mut n, sw, 1).status(), Some(200));
    }
    let a = caller(&mut n);
    leave_message(&mut n, a, 1);
    n.run_for(secs(1));
    for id in &ids {
        let told: Vec<String> = notifies(&n)
            .iter()
            .filter(|m| m.header(HeaderName::CallId) == Some(id))
            .map(body)
            .collect();
        assert!(
            told.last()
                .is_some_and(|b| b.contains("Voice-Message: 1/0")),
            "{id} (worker {}): {told:?}",
            switch::owner(id, 2)
        );
    }
}

#[test]
fn only_the_user_subscribes_within_the_limits() {
    let mut n = Net::new(6);
    let sw = switch(&mut n);
    // Another user, a wrong password: the same 403; nothing is told.
    let mut s = Subscribe::new("s-1");
    s.user = "1002";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(403));
    let mut s = Subscribe::new("s-2");
    s.password = "guess";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(403));
    // Another package, an interval too brief, an Expires that is no number.
    let mut s = Subscribe::new("s-3");
    s.event = "presence";
    let r = s.send(&mut n, sw, 1);
    assert_eq!(
        (r.status(), r.header_named("Allow-Events")),
        (Some(489), Some("message-summary"))
    );
    let mut s = Subscribe::new("s-4");
    s.expires = "10";
    let r = s.send(&mut n, sw, 1);
    assert_eq!(
        (r.status(), r.header(HeaderName::MinExpires)),
        (Some(423), Some("60"))
    );
    let mut s = Subscribe::new("s-5");
    s.expires = "soon";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(400));
    // A refresh of a subscription that does not exist.
    let mut s = Subscribe::new("s-6");
    s.to_tag = Some("nope".into());
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(481));
    assert!(notifies(&n).is_empty());
    // Two at most (voicemail.max_subscriptions_per_user), a day at most shortened to the hour.
    let mut s = Subscribe::new("s-7");
    s.expires = "86400";
    assert_eq!(
        s.send(&mut n, sw, 1).header(HeaderName::Expires),
        Some("3600")
    );
    assert_eq!(
        Subscribe::new("s-8").send(&mut n, sw, 1).status(),
        Some(200)
    );
    assert_eq!(
        Subscribe::new("s-9").send(&mut n, sw, 1).status(),
        Some(503)
    );
}

#[test]
fn odd_subscribes_get_an_answer() {
    let mut n = Net::new(12);
    let sw = switch(&mut n);
    // No box named, an Expires past u32, an Event with parameters, a huge Expires.
    let mut s = Subscribe::new("o-1");
    s.ruri = "sip:127.0.0.1:5060";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(403));
    let mut s = Subscribe::new("o-2");
    s.expires = "99999999999";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(400));
    let mut s = Subscribe::new("o-3");
    s.event = "Message-Summary;id=7";
    s.expires = "4294967295";
    let r = s.send(&mut n, sw, 1);
    assert_eq!(
        (r.status(), r.header(HeaderName::Expires)),
        (Some(200), Some("3600"))
    );
    let mut s = Subscribe::new("o-4");
    s.event = "";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(489));
    // Expires: 0 outside a dialog fetches the state once and keeps nothing.
    let mut s = Subscribe::new("o-5");
    s.expires = "0";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(200));
    let fetched = |n: &mut Net| {
        notifies(n)
            .iter()
            .any(|m| m.header(HeaderName::CallId) == Some("o-5"))
    };
    assert!(n.run_until(secs(1), fetched));
    let a = caller(&mut n);
    leave_message(&mut n, a, 1);
    n.run_for(secs(1));
    let told: Vec<Message> = notifies(&n)
        .into_iter()
        .filter(|m| m.header(HeaderName::CallId) == Some("o-5"))
        .collect();
    assert_eq!(told.len(), 1, "a fetch is told once");
    let state = told[0].header_named("Subscription-State");
    assert_eq!(state, Some("terminated;reason=timeout"));
}

#[test]
fn a_subscription_not_refreshed_ends_with_a_notify() {
    let mut n = Net::new(7);
    let sw = switch(&mut n);
    let mut s = Subscribe::new("s-1");
    s.expires = "60";
    assert_eq!(s.send(&mut n, sw, 1).status(), Some(200));
    n.run_for(secs(59));
    assert_eq!(notifies(&n).len(), 1);
    n.run_for(secs(2));
    let all = notifies(&n);
    assert_eq!(all.len(), 2);
    assert_eq!(
        all[1].header_named("Subscription-State"),
        Some("terminated;reason=timeout")
    );
}

#[test]
fn a_refreshed_subscription_lasts_and_is_told_again() {
    let mut n = Net::new(14);
    let sw = switch(&mut n);
    let mut s = Subscribe::new("r-1");
    s.expires = "60";
    let ok = s.send(&mut n, sw, 1);
    n.run_for(secs(50));
    s.to_tag = ok
        .header(HeaderName::To)
        .and_then(|t| sip::NameAddr::parse(t).ok())
        .and_then(|t| t.tag().map(String::from));
    s.expires = "120";
    assert_eq!(
        s.send(&mut n, sw, 5).header(HeaderName::Expires),
        Some("120")
    );
    assert!(
        n.run_until(secs(1), |n| notifies(n).len() == 2),
        "a NOTIFY after the refresh"
    );
    n.run_for(secs(60));
    assert_eq!(
        notifies(&n).len(),
        2,
        "still subscribed past the first expiry"
    );
    n.run_for(secs(61));
    let all = notifies(&n);
    assert_eq!(all.len(), 3);
    let state = all[2].header_named("Subscription-State");
    assert_eq!(state, Some("terminated;reason=timeout"));
}

#[test]
fn a_phone_refusing_the_notify_loses_its_subscription() {
    let mut n = Net::new(10);
    let (sw, phone) = switch_and_phone(&mut n, 1, "");
    n.agent(phone).notify_status = 481;
    assert_eq!(
        Subscribe::new("s-1").send(&mut n, sw, 1).status(),
        Some(200)
    );
    assert!(n.run_until(secs(1), |n| notifies(n).len() == 1));
    let a = caller(&mut n);
    leave_message(&mut n, a, 1);
    n.run_for(secs(1));
    assert_eq!(notifies(&n).len(), 1, "nothing more after the 481");
}

#[test]
fn a_phone_that_does_not_subscribe_is_told_unsolicited() {
    let mut n = Net::new(8);
    switch(&mut n);
    let p = n.ua("127.0.0.1:5090", "1001");
    n.register(p, SW, "strowger", 600);
    assert!(n.run_until(secs(2), registered([p])));
    let a = caller(&mut n);
    leave_message(&mut n, a, 1);
    n.run_for(secs(1));
    let told = n
        .agent(p)
        .requests_of(&Method::Notify)
        .last()
        .map(|m| body(m));
    let b = told.expect("a NOTIFY");
    assert!(
        b.contains("Messages-Waiting: yes") && b.contains("Voice-Message: 1/0 (0/0)"),
        "{b}"
    );
}

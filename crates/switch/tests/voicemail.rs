//! Voicemail on the simulated network (tests/net): callers leave messages in a box (the
//! greeting, the beep, the recording until `#` or hang-up, a full box refused), and the box's
//! user hears and manages them by RFC 4733 digits behind a PIN. The boxes are real files in
//! the switch's data directory.

mod net;

use net::*;
use std::path::PathBuf;
use store::voicemail::{FileMailboxes, Mailbox, MailboxOp};

const SW: &str = "127.0.0.1:5060";
const ALICE: &str = "127.0.0.1:5070";

/// A one-worker switch trusting its callers; 1001 has a box (PIN 4711) of two messages at
/// most, five seconds each.
fn switch(n: &mut Net) -> Id {
    let toml = "[rtp]\nmedia_timeout_s = 0\n[registrar]\nauthenticate = false\nkeepalive_s = 0\n\
        [security]\ntrusted = [\"127.0.0.1\"]\n\
        [voicemail]\nmax_messages = 2\nmax_message_s = 5\nsounds_dir = \"/sounds\"\n\
        [voicemail.mailboxes]\n\"1001\" = \"4711\"\n\
        [[dialplan.contexts.default.rules]]\nexten = \"vm-1001\"\nsteps = [\"voicemail 1001 busy\", \"hangup\"]\n\
        [[dialplan.contexts.default.rules]]\nexten = \"vm-1002\"\nsteps = [\"voicemail 1002\"]\n\
        [[dialplan.contexts.default.rules]]\nexten = \"8500\"\nsteps = [\"voicemail_main 1001\", \"hangup\"]\n";
    n.switch(toml, &[SW], 1)
}

/// A caller that sends audio and offers telephone-event.
fn caller(n: &mut Net) -> Id {
    let a = n.ua(ALICE, "2001");
    n.agent(a).codecs = vec![0, 101];
    n.agent(a).send_rtp = true;
    a
}

fn data_dir(n: &mut Net, sw: Id) -> PathBuf {
    n.sw(sw).shared.data_dir.0.clone()
}

fn mailbox(n: &mut Net, sw: Id) -> Mailbox {
    FileMailboxes::new(data_dir(n, sw))
        .run("1001", &MailboxOp::List)
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
    let c = n.invite(a, "sip:vm-1002@127.0.0.1", SW);
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
    let heard = format!("voicemail/1001/INBOX/{id}.wav");
    assert!(
        prompts(&mut n, sw).contains(&heard),
        "{:?}",
        prompts(&mut n, sw)
    );
    let b = mailbox(&mut n, sw);
    assert_eq!((b.new.len(), b.old.len()), (0, 1));
    // 5 repeats it (from Old now), 7 deletes it.
    press(&mut n, a, c, "5");
    n.run_for(secs(3));
    assert!(prompts(&mut n, sw).contains(&format!("voicemail/1001/Old/{id}.wav")));
    press(&mut n, a, c, "7");
    n.run_for(secs(1));
    let b = mailbox(&mut n, sw);
    assert_eq!((b.new.len(), b.old.len()), (0, 0));
    // 0 5: a new PIN, which the next session asks for.
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

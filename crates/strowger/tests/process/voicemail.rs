//! Voicemail in the real process (tests/configs/voicemail.toml): a caller leaves a message in
//! user 1001's box, whose phone (baresip with its `mwi` module, subscribed to the box) is told
//! a message waits; the message is what the caller sent; the box's menu, driven by RFC 4733
//! digits, plays it back, and the phone is told it was heard. With the boxes in Redis
//! (`voicemail.store`) two strowger nodes share them: a message left through one is heard and
//! deleted through the other, and phones subscribed on either are told; with that Redis
//! stopped a caller to voicemail is hung up and other calls go on. The same from SIPp: its
//! message (speech from a pcap) is stored as sent, and its RFC 4733 PIN opens the box.

use crate::common;

use common::audio::{best_correlation, read_wav, tone, tone_purity};
use common::baresip::{account, Baresip};
use common::pcap::Stream;
use common::servers::Server;
use common::sip::{call, frames, pcm, Rtp, Uac};
use common::sipp::Sipp;
use common::switch::{config_path, Opts};
use common::{wait_for, Strowger, TempDir};
use std::path::PathBuf;
use std::time::Duration;

/// `keys` as RFC 4733 events, 200 ms apart.
fn press(rtp: &mut Rtp, keys: &str) {
    for k in keys.chars() {
        rtp.dtmf(k);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The phone's MWI reports so far (baresip prints each NOTIFY's body after this line).
fn mwi_reports(phone: &Baresip) -> Vec<String> {
    phone
        .log()
        .split("----- MWI for ")
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Waits until the phone's latest report says `what`.
fn wait_report(phone: &Baresip, what: &str) {
    let told = wait_for(Duration::from_secs(10), || {
        mwi_reports(phone)
            .last()
            .is_some_and(|r| r.contains(what))
            .then_some(())
    });
    assert!(
        told.is_some(),
        "the phone was not told {what:?}; its log:\n{}",
        phone.log()
    );
}

/// Strowger on `config` (tests/configs/voicemail.toml, or `in_redis` of it).
fn node(label: &str, config: PathBuf) -> Strowger {
    Strowger::with(
        label,
        Opts {
            config_file: Some(config),
            workers: Some(2),
            ..Opts::default()
        },
    )
}

/// tests/configs/voicemail.toml with the boxes in the Redis at `url`, written in `dir`.
fn in_redis(dir: &TempDir, url: &str) -> PathBuf {
    let file = dir.path().join("voicemail.toml");
    let text = std::fs::read_to_string(config_path("voicemail.toml")).unwrap();
    let text = text.replace(
        "[voicemail]\n",
        &format!("[voicemail]\nstore = \"{url}\"\n"),
    );
    std::fs::write(&file, text).unwrap();
    file
}

/// 1001's phone on `s`, subscribed to its box, told at first that nothing waits.
fn subscribed_phone(s: &Strowger, label: &str) -> Baresip {
    let silence = s.dir.path().join("silence.wav");
    std::fs::copy(common::repo_root().join("assets/demo.wav"), &silence).unwrap();
    let acc = account(s.sip, "1001", "secret-1001", ";mwi=yes");
    // The account comes after the mwi module: baresip 1.0's mwi module, loaded while a
    // registration is under way, may subscribe over and over without answering a challenge.
    // Its free ports may be taken by another process before it binds them: then it starts anew.
    let phone = (0..3)
        .map(|n| {
            let label = format!("{label}-{n}");
            let phone = Baresip::spawn(s.dir.path(), &label, "", &silence, &["/insmod mwi"], 90);
            std::thread::sleep(Duration::from_millis(500));
            phone
        })
        .find(|phone| !phone.log().contains("init failed"))
        .expect("baresip started");
    phone.command(&format!("/uanew {acc}"));
    phone.wait_registered(label);
    wait_report(&phone, "Messages-Waiting: no");
    phone
}

/// A caller skips 1001's greeting with #, speaks `secs` s (the demo announcement) after the
/// beep and ends with #; strowger thanks and hangs up. Returns what was spoken.
fn leave_message(s: &Strowger, secs: usize) -> Vec<i16> {
    let spoken =
        read_wav(&common::repo_root().join("assets/demo.wav")).samples[..8000 * secs].to_vec();
    let mut rtp = Rtp::bind();
    let uac = call(s, "vm-1001", &mut rtp);
    std::thread::sleep(Duration::from_millis(500));
    press(&mut rtp, "#");
    rtp.recv_for(Duration::from_millis(1500));
    rtp.send_frames(&frames(&spoken), Duration::ZERO);
    press(&mut rtp, "#");
    uac.expect_request("BYE", Duration::from_secs(15));
    spoken
}

/// Calls 8500 on `s`, types the PIN and presses 1: what the menu plays within `listen` holds
/// `spoken`. Returns the call, in the message menu.
fn hear_first_message(s: &Strowger, spoken: &[i16], listen: Duration) -> (Uac, Rtp) {
    let mut rtp = Rtp::bind();
    let uac = call(s, "8500", &mut rtp);
    std::thread::sleep(Duration::from_millis(500));
    press(&mut rtp, "4711#");
    std::thread::sleep(Duration::from_millis(500));
    press(&mut rtp, "1");
    let heard = pcm(&rtp.recv_for(listen));
    let n = spoken.len() as isize;
    let (c, lag) = best_correlation(spoken, &heard, 4000, 8000, 0..=(heard.len() as isize - n));
    assert!(
        c > 0.8,
        "what the menu played vs what was sent: {c:.3} at lag {lag}"
    );
    (uac, rtp)
}

/// The WAV files of 1001's INBOX in `s`'s data directory.
fn inbox_files(s: &Strowger) -> Vec<PathBuf> {
    let inbox = s.data_dir().join("voicemail/1001/INBOX");
    std::fs::read_dir(&inbox)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default()
}

#[test]
fn a_message_left_is_notified_stored_and_played_back() {
    let s = node("voicemail", config_path("voicemail.toml"));
    let phone = subscribed_phone(&s, "1001");
    let spoken = leave_message(&s, 3);
    wait_report(&phone, "Voice-Message: 1/0");

    // On disk: one new message, its sidecar naming the caller, its audio what was sent.
    let files = inbox_files(&s);
    let wav = files
        .iter()
        .find(|p| p.extension().is_some_and(|e| e == "wav"))
        .expect("a message's WAV");
    let meta = std::fs::read_to_string(wav.with_extension("json")).unwrap();
    assert!(
        meta.contains("\"duration_s\":3") || meta.contains("\"duration_s\":4"),
        "{meta}"
    );
    let stored = read_wav(wav).samples;
    let (c, lag) = best_correlation(&stored, &spoken, 4000, 8000, -16000..=16000);
    assert!(
        c > 0.9,
        "the stored message vs what was sent: {c:.3} at lag {lag}"
    );

    // The menu: PIN, then 1 plays the message; heard, the message is old: the phone is told
    // nothing waits.
    let (mut uac, _rtp) = hear_first_message(&s, &spoken, Duration::from_secs(8));
    wait_report(&phone, "Voice-Message: 0/1");
    assert_eq!(uac.bye().status(), Some(200));
}

/// Two nodes, one Redis: a message left on A is announced to 1001's phone subscribed on B (and
/// on A), heard through B's menu and deleted there, and the phone on A is told the box is
/// empty. Neither node keeps the message in its data directory.
#[test]
fn two_nodes_share_boxes_in_redis() {
    let redis = Server::redis();
    let dir = TempDir::new("voicemail-redis");
    let config = in_redis(&dir, &redis.url);
    let a = node("voicemail-redis-a", config.clone());
    let b = node("voicemail-redis-b", config);
    let phone_b = subscribed_phone(&b, "1001-b");
    let phone_a = subscribed_phone(&a, "1001-a");

    let spoken = leave_message(&a, 2);
    wait_report(&phone_b, "Messages-Waiting: yes");
    wait_report(&phone_b, "Voice-Message: 1/0");
    wait_report(&phone_a, "Voice-Message: 1/0");
    assert!(inbox_files(&a).is_empty() && inbox_files(&b).is_empty());

    let (mut uac, mut rtp) = hear_first_message(&b, &spoken, Duration::from_secs(5));
    wait_report(&phone_a, "Voice-Message: 0/1");
    press(&mut rtp, "7");
    wait_report(&phone_b, "Voice-Message: 0/0");
    wait_report(&phone_a, "Voice-Message: 0/0");
    assert_eq!(uac.bye().status(), Some(200));
}

/// With the boxes' Redis stopped, a caller to voicemail is hung up at once, the log names
/// `voicemail.store`, and a call in progress (echo) goes on, echoing.
#[test]
fn a_stopped_redis_ends_voicemail_calls_and_no_other() {
    let mut redis = Server::redis();
    let dir = TempDir::new("voicemail-redis-down");
    let s = node("voicemail-redis-down", in_redis(&dir, &redis.url));
    let mut echo_rtp = Rtp::bind();
    let mut echo = call(&s, "echo", &mut echo_rtp);
    redis.kill();

    let mut rtp = Rtp::bind();
    let uac = call(&s, "vm-1001", &mut rtp);
    uac.expect_request("BYE", Duration::from_secs(5));
    let log = s.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("voicemail box 1001") && l.contains("voicemail.store")),
        "{log}"
    );

    let sent = frames(&tone(440.0, 8000, 8000.0));
    let back = pcm(&echo_rtp.send_frames(&sent, Duration::from_millis(300)));
    assert!(
        back.len() > 6000 && tone_purity(&back, 440.0) > 0.8,
        "the echo call still echoes: {} samples back",
        back.len()
    );
    assert_eq!(echo.bye().status(), Some(200));
}

/// The WAV files in `dir`.
fn wavs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.unwrap().path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "wav"))
        .collect()
}

/// SIPp leaves a message — # skips the greeting, 3 s of speech after the beep, then it hangs
/// up — and the stored WAV is that speech; then SIPp calls 8500, types the PIN 4711# and 1 as
/// RFC 4733 events, and hears the message: the box has opened, and the message is now old.
#[test]
fn sipp_leaves_a_message_and_opens_the_box_with_its_pin() {
    let s = Strowger::with(
        "voicemail-sipp",
        Opts {
            config_file: Some(config_path("voicemail.toml")),
            ..Opts::default()
        },
    );
    let spoken =
        read_wav(&common::repo_root().join("assets/demo.wav")).samples[..8000 * 3].to_vec();
    let mut deposit = Stream::default();
    deposit
        .silence(500)
        .events("#")
        .silence(1500)
        .audio(&spoken);
    let hold = deposit.duration() + Duration::from_millis(300);
    Sipp::media_caller("vm-1001", &deposit, true, hold)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let box_dir = s.data_dir().join("voicemail/1001");
    let stored = wait_for(Duration::from_secs(5), || {
        wavs(&box_dir.join("INBOX")).pop()
    })
    .expect("the message is in the INBOX");
    // A second from 2 s in: the speech, which began a little after the beep.
    let stored = read_wav(&stored).samples;
    let (c, lag) = best_correlation(&stored, &spoken, 16000, 8000, -16000..=0);
    assert!(
        c > 0.9,
        "the stored message vs what SIPp sent: {c:.3} at lag {lag}"
    );

    let mut login = Stream::default();
    login
        .silence(1000)
        .events("4711#")
        .silence(500)
        .events("1")
        .silence(2000);
    let hold = login.duration();
    Sipp::media_caller("8500", &login, true, hold)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let old = wait_for(Duration::from_secs(5), || wavs(&box_dir.join("Old")).pop());
    assert!(
        old.is_some() && wavs(&box_dir.join("INBOX")).is_empty(),
        "the message was heard: INBOX {:?}, Old {:?}\n{}",
        wavs(&box_dir.join("INBOX")),
        wavs(&box_dir.join("Old")),
        s.stderr()
    );
}

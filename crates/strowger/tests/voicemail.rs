//! Voicemail in the real process (tests/configs/voicemail.toml): a caller leaves a message in
//! user 1001's box, whose phone (baresip with its `mwi` module, subscribed to the box) is told
//! a message waits; the message on disk is what the caller sent; the box's menu, driven by
//! RFC 4733 digits, plays it back, and the phone is told it was heard. The same from SIPp: its
//! message (speech from a pcap) is stored as sent, and its RFC 4733 PIN opens the box.

mod common;

use common::audio::{best_correlation, read_wav, ulaw_decode_all, ulaw_encode};
use common::baresip::{account, Baresip};
use common::pcap::Stream;
use common::sip::{call, Rtp};
use common::sipp::Sipp;
use common::switch::{config_path, Opts};
use common::{wait_for, Strowger};
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

fn wait_report(phone: &Baresip, what: &str) {
    let told = wait_for(Duration::from_secs(10), || {
        mwi_reports(phone)
            .iter()
            .any(|r| r.contains(what))
            .then_some(())
    });
    assert!(
        told.is_some(),
        "the phone was not told {what:?}; its log:\n{}",
        phone.log()
    );
}

#[test]
fn a_message_left_is_notified_stored_and_played_back() {
    let s = Strowger::with(
        "voicemail",
        Opts {
            config_file: Some(config_path("voicemail.toml")),
            workers: Some(2),
            ..Opts::default()
        },
    );
    // 1001's phone, subscribed to its box: nothing waits yet.
    let silence = s.dir.path().join("silence.wav");
    std::fs::copy(common::repo_root().join("assets/demo.wav"), &silence).unwrap();
    let acc = account(s.sip, "1001", "secret-1001", ";mwi=yes");
    // The account comes after the mwi module: baresip 1.0's mwi module, loaded while a
    // registration is under way, may subscribe over and over without answering a challenge.
    let phone = Baresip::spawn(s.dir.path(), "1001", "", &silence, &["/insmod mwi"], 90);
    std::thread::sleep(Duration::from_millis(500));
    phone.command(&format!("/uanew {acc}"));
    phone.wait_registered("1001");
    wait_report(&phone, "Messages-Waiting: no");

    // A caller skips the greeting with #, speaks 3 s (the demo announcement) after the beep and
    // ends with #; strowger thanks and hangs up.
    let spoken =
        read_wav(&common::repo_root().join("assets/demo.wav")).samples[..8000 * 3].to_vec();
    let frames: Vec<Vec<u8>> = spoken
        .chunks(160)
        .map(|c| c.iter().map(|&x| ulaw_encode(x)).collect())
        .collect();
    let mut rtp = Rtp::bind();
    let uac = call(&s, "vm-1001", &mut rtp);
    std::thread::sleep(Duration::from_millis(500));
    press(&mut rtp, "#");
    rtp.recv_for(Duration::from_millis(1500));
    rtp.send_frames(&frames, Duration::ZERO);
    press(&mut rtp, "#");
    uac.expect_request("BYE", Duration::from_secs(15));
    wait_report(&phone, "Voice-Message: 1/0");

    // On disk: one new message, its sidecar naming the caller, its audio what was sent.
    let inbox = s.data_dir().join("voicemail/1001/INBOX");
    let files: Vec<_> = std::fs::read_dir(&inbox)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
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

    // The menu: PIN, then 1 plays the message; what is heard holds what was sent.
    let mut rtp = Rtp::bind();
    let mut uac = call(&s, "8500", &mut rtp);
    std::thread::sleep(Duration::from_millis(500));
    press(&mut rtp, "4711#");
    std::thread::sleep(Duration::from_millis(500));
    press(&mut rtp, "1");
    let heard: Vec<i16> = rtp
        .recv_for(Duration::from_secs(8))
        .iter()
        .filter(|p| p.pt == 0)
        .flat_map(|p| ulaw_decode_all(&p.payload))
        .collect();
    let (c, lag) = best_correlation(
        &spoken,
        &heard,
        4000,
        8000,
        0..=(heard.len() as isize - 12_000),
    );
    assert!(
        c > 0.8,
        "what the menu played vs what was sent: {c:.3} at lag {lag}"
    );
    // Heard, the message is old: the phone is told nothing waits.
    wait_report(&phone, "Voice-Message: 0/1");
    assert_eq!(uac.bye().status(), Some(200));
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

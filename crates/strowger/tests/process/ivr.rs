//! Voice menus in the real process: RFC 4733 digits from a hand-written SIP/RTP client
//! (tests/common/sip.rs) and from SIPp (RFC 4733 events and in-band tones in the pcap it
//! plays) against the demo menu on 9198, and what `say` sends: the sound set's files and the
//! speech engine's audio (espeak-ng and sox, as scripts/setup.sh installs them).

use crate::common;

use common::audio::{best_correlation, read_wav, rms, tone, tone_purity};
use common::pcap::{pcmu_from, Capture, Stream};
use common::sip::{call, frames, pcm, Rtp};
use common::sipp::Sipp;
use common::Strowger;
use std::path::Path;
use std::time::Duration;

/// 9198 speaks its menu; after "2" the caller is in the echo test and hears its own tone.
#[test]
fn the_demo_menu_speaks_and_2_reaches_the_echo_test() {
    let s = Strowger::start("ivr-demo");
    let mut rtp = Rtp::bind();
    let mut uac = call(&s, "9198", &mut rtp);
    // Within 10 s (the first call renders the speech), a second of it.
    let spoken = (0..10).any(|_| rms(&pcm(&rtp.recv_for(Duration::from_secs(1)))) > 300.0);
    assert!(spoken, "the menu is spoken, not silent");

    rtp.dtmf('2');
    let sent = tone(440.0, 8000 * 3, 8000.0);
    let back = pcm(&rtp.send_frames(&frames(&sent), Duration::from_millis(300)));
    assert!(back.len() > 8000 * 2, "{} samples back", back.len());
    let last = &back[back.len() - 8000..];
    let purity = tone_purity(last, 440.0);
    assert!(
        purity > 0.8,
        "the caller's 440 Hz comes back: purity {purity:.2}"
    );
    assert_eq!(uac.bye().status(), Some(200));
}

/// SIPp calls 9198 (offering telephone-event if `events`), presses 2 — `press` puts the key
/// into its media — and then talks 440 Hz for 2 s: strowger's RTP to it (captured on lo) ends
/// with that tone, echoed: the menu took the echo test's branch.
fn sipp_reaches_the_echo_test(label: &str, events: bool, press: fn(&mut Stream) -> &mut Stream) {
    let s = Strowger::start(label);
    let mut media = Stream::default();
    // The menu's prompt starts (a digit typed meanwhile is kept for the menu).
    media.silence(1500);
    press(&mut media)
        .silence(300)
        .audio(&tone(440.0, 8000 * 2, 8000.0));
    let from_strowger = format!("udp and src portrange {}-{}", s.rtp.0, s.rtp.1);
    let capture = Capture::start(s.dir.path(), &from_strowger);
    let hold = media.duration() + Duration::from_millis(300);
    Sipp::media_caller("9198", &media, events, hold)
        .run(s.sip, s.dir.path())
        .assert_ok(1);
    let heard = pcmu_from(&capture.finish(), s.rtp);
    assert!(
        heard.len() > 8000 * 3,
        "{} samples sent to SIPp",
        heard.len()
    );
    // The last second strowger sent: the echo of SIPp's tone (the menu's prompt, the
    // announcement of 1 or an invalid choice's prompt are speech).
    let last = &heard[heard.len() - 8000..];
    let purity = tone_purity(last, 440.0);
    assert!(purity > 0.8, "SIPp's 440 Hz echoed: purity {purity:.2}");
}

#[test]
fn sipp_presses_2_by_rfc_4733_and_reaches_the_echo_test() {
    sipp_reaches_the_echo_test("ivr-sipp-events", true, |m| m.events("2"));
}

#[test]
fn sipp_presses_2_in_band_and_reaches_the_echo_test() {
    sipp_reaches_the_echo_test("ivr-sipp-tones", false, |m| m.tones("2"));
}

/// `say digits 42` plays digits/4.wav then digits/2.wav of the sound set; `say text` arrives
/// as speech.
#[test]
fn say_plays_the_sound_files_and_the_speech_engine() {
    let s = Strowger::with_config("ivr-say", "ivr.toml");
    let mut rtp = Rtp::bind();
    let uac = call(&s, "9301", &mut rtp);
    // Everything until the media stops for 3 s (after the BYE), at most 30 s.
    let mut got = Vec::new();
    for _ in 0..10 {
        let more = pcm(&rtp.recv_for(Duration::from_secs(3)));
        if more.is_empty() && !got.is_empty() {
            break;
        }
        got.extend(more);
    }
    uac.expect_request("BYE", Duration::from_secs(1));
    let digits = Path::new("/usr/share/asterisk/sounds/en_US_f_Allison/digits");
    let four = read_wav(&digits.join("4.wav")).samples;
    let two = read_wav(&digits.join("2.wav")).samples;
    // Where in what arrived each file starts: "four", then "two" right after it.
    let (c4, at4) = best_correlation(&four, &got, 800, 2400, 0..=16_000);
    assert!(c4 > 0.9, "digits/4.wav: correlation {c4:.2} at {at4}");
    let next = at4 + four.len() as isize;
    let (c2, at2) = best_correlation(&two, &got, 800, 2400, next - 400..=next + 400);
    assert!(c2 > 0.9, "digits/2.wav: correlation {c2:.2} at {at2}");
    // Then the spoken text.
    let speech = &got[(at2 as usize + two.len()).min(got.len())..];
    assert!(
        speech.len() > 8000,
        "{} samples after the digits",
        speech.len()
    );
    let loud = rms(speech);
    assert!(loud > 300.0, "the text is spoken: rms {loud:.0}");
    let cached = std::fs::read_dir(s.data_dir().join("tts")).unwrap().count();
    assert_eq!(cached, 1, "the speech is kept for the next call");
    // Every prompt loaded (a failed one is logged as the playback of its file).
    let log = s.stderr();
    assert!(!log.contains("playback"), "{log}");
}

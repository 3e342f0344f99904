//! The phone page's call moved to another worker by an attended transfer, in headless
//! Chromium: strowger runs two workers; a phone's first call (to the transferee, a UAS of the
//! test whose media is its RTP socket) is held by one worker and its consultation call with the
//! page by the other, whether the phone called the page or the page called the phone. The
//! phone refers its first call to the page with Replaces: the page's leg moves to the first
//! call's worker, whose re-INVITE brings a new port, new ICE credentials and that worker's
//! certificate, and the page's JsSIP answers it (an ICE restart and a new DTLS handshake in
//! Chromium). Then the transferee and the page hear each other's tones.

use crate::common;
use crate::phone_page::with_users_opts;
use crate::phone_page_calls::{
    comes_to_hear_tone, hang_up, mic, phone, runtime, status, CALL_WAIT,
};
use crate::transfer::{call_id_on, first_call, refer_replacing};

use common::audio::{dominant_freq, tone, ulaw_decode_all};
use common::sip::{frames, sdp, tag_of, Rtp, RtpPkt, Uac, Uas};
use common::switch::{default_config_trusting_loopback, Opts};
use common::webdriver::{click, type_into, Browser, Driver};
use common::TempDir;
use fantoccini::Client;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Who places the consultation call between the phone and the page.
#[derive(Clone, Copy)]
enum Consultation {
    /// The phone calls the page (1001), which answers: strowger offered the page's leg.
    PhoneCallsPage,
    /// The page calls the phone (82002): the page offered its leg, strowger answered.
    PageCallsPhone,
}

/// The `a=fingerprint` of strowger's side of the page's call, as the page has it now.
async fn far_fingerprint(c: &Client) -> String {
    let sdp = c
        .execute("return session.connection.remoteDescription.sdp;", vec![])
        .await
        .expect("the page's remote description");
    let sdp = sdp.as_str().expect("an SDP").to_string();
    sdp.lines()
        .find_map(|l| l.strip_prefix("a=fingerprint:"))
        .unwrap_or_else(|| panic!("no a=fingerprint in {sdp}"))
        .to_string()
}

/// The embedded configuration trusting 127.0.0.1, with 82002 bridged to the phone at `phone`.
fn config(dir: &Path, phone: std::net::SocketAddr) -> std::path::PathBuf {
    let path = default_config_trusting_loopback(dir);
    let text = std::fs::read_to_string(&path).unwrap();
    let marker = "# 2000-2999: bridged";
    let rule = format!(
        "[[dialplan.contexts.default.rules]]\nexten = \"82002\"\n\
         steps = [\"bridge sip:transferor@{phone} timeout=10\"]\n\n"
    );
    std::fs::write(&path, text.replace(marker, &format!("{rule}{marker}"))).unwrap();
    path
}

/// The consultation with the page on the worker `consult.call_id` hashes to (the phone
/// calls): the Replaces naming its dialog.
async fn phone_calls_page(page: &Client, consult: &mut Uac) -> String {
    let consult_rtp = Rtp::bind();
    consult.send_invite(&sdp(consult_rtp.port, &[(0, "PCMU/8000")], "sendrecv"));
    status(page, "call from").await;
    click(page, "#answer").await;
    let ok = consult.final_response("INVITE", CALL_WAIT);
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    consult.invite_answered(&ok);
    consult.ack("");
    status(page, "in call with").await;
    consult.replaces()
}

/// The page calls the phone (`uas`, through 82002), which answers: the consultation's INVITE
/// as the phone got it.
async fn page_calls_phone(page: &Client, uas: &Uas) -> common::sip::Msg {
    type_into(page, "#number", "82002").await;
    click(page, "#call").await;
    let rtp = Rtp::bind();
    let invite = uas.answer(&sdp(rtp.port, &[(0, "PCMU/8000")], "sendrecv"));
    status(page, "in call with 82002").await;
    invite
}

/// Waits for strowger's BYE to `uas` (the phone, or the transferee) and answers it.
fn uas_gets_bye(uas: &Uas) {
    loop {
        let (m, from) = uas
            .recv(Duration::from_secs(5))
            .expect("a BYE from strowger");
        if m.method() == Some("BYE") {
            uas.respond(&m, from, 200, "");
            return;
        }
    }
}

/// The transferee (its RTP socket `heard`) speaks a 1 kHz tone until `stop` (30 s at most, should
/// the test fail meanwhile): what it got meanwhile.
fn speak_until(mut heard: Rtp, stop: Arc<AtomicBool>) -> JoinHandle<Vec<RtpPkt>> {
    std::thread::spawn(move || {
        // A second of the tone, a whole number of periods: repeated, it is one tone.
        let second = frames(&tone(1000.0, 8000, 8000.0));
        let mut got = Vec::new();
        for _ in 0..30 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            got.extend(heard.send_frames(&second, Duration::ZERO));
        }
        got
    })
}

/// The transfer with the consultation placed as `how`, and the page and the transferee heard.
fn transferred(label: &str, how: Consultation) {
    let dir = TempDir::new(label);
    let mut heard = Rtp::bind();
    let (transferee, uas) = (Uas::bind(), Uas::bind());
    let s = with_users_opts(
        label,
        &["1001"],
        Opts {
            config_file: Some(config(dir.path(), uas.addr())),
            vars: vec![("bridge_target".into(), transferee.addr().to_string())],
            workers: Some(2),
            ..Opts::default()
        },
    );
    let mic = mic(dir.path(), 800);
    let driver = Driver::start(Browser::Chromium, dir.path());
    runtime().block_on(async {
        let page = phone(&driver, &s, dir.path(), &mic, "1001").await;
        // The consultation on one worker, then the first call on the other.
        let (replaces, mut consult, worker) = match how {
            Consultation::PhoneCallsPage => {
                let mut consult = Uac::new(s.sip, "1001");
                consult.call_id = call_id_on(1, "consult");
                let replaces = phone_calls_page(&page, &mut consult).await;
                (replaces, Some(consult), 1)
            }
            Consultation::PageCallsPhone => {
                let invite = page_calls_phone(&page, &uas).await;
                let call_id = invite.header("call-id").unwrap().to_string();
                let ours = tag_of(invite.header("from").unwrap()).unwrap();
                let replaces = format!("{call_id};to-tag={ours};from-tag=uas1");
                (replaces, None, switch::owner(&call_id, 2))
            }
        };
        // The transferee answers with its media at `heard`.
        let media = sdp(heard.port, &[(0, "PCMU/8000")], "sendrecv");
        let answering = std::thread::spawn(move || {
            transferee.answer(&media);
            transferee
        });
        let mut first = first_call(&s, call_id_on(1 - worker, "first"), &mut heard);
        let transferee = answering.join().unwrap();
        let before = far_fingerprint(&page).await;

        refer_replacing(&s, &mut first, "1001", &replaces);
        match consult.as_mut() {
            Some(consult) => drop(consult.expect_request("BYE", Duration::from_secs(5))),
            None => uas_gets_bye(&uas),
        }
        first.expect_request("BYE", Duration::from_secs(5));
        let after = far_fingerprint(&page).await;
        assert_ne!(
            after, before,
            "the leg moved to the other worker's certificate"
        );

        // The transferee speaks 1 kHz until the page hears it (its new leg's ICE and DTLS
        // done), and a second and a half more, while the page speaks 800 Hz.
        let stop = Arc::new(AtomicBool::new(false));
        let talk = speak_until(heard, stop.clone());
        comes_to_hear_tone(&page, 1000.0, CALL_WAIT).await;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        stop.store(true, Ordering::Relaxed);
        let back = talk.join().unwrap();
        assert!(
            back.len() >= 50,
            "the transferee got {} packets",
            back.len()
        );
        let last_second: Vec<u8> = back[back.len() - 50..]
            .iter()
            .flat_map(|p| p.payload.clone())
            .collect();
        let f = dominant_freq(&ulaw_decode_all(&last_second));
        assert!(
            (f - 800.0).abs() < 20.0,
            "the transferee hears {f} Hz from the page"
        );
        hang_up(&page, &s).await;
        uas_gets_bye(&transferee);
        page.close().await.unwrap();
    });
}

#[test]
fn the_phone_page_called_on_another_worker_is_transferred_and_heard() {
    transferred("phone-transfer-called", Consultation::PhoneCallsPage);
}

#[test]
fn the_phone_page_calling_on_another_worker_is_transferred_and_heard() {
    transferred("phone-transfer-calling", Consultation::PageCallsPhone);
}

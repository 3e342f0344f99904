//! The phone page's call moved to another worker by an attended transfer, in headless
//! Chromium: strowger runs two workers; a phone's first call (to the transferee, SIPp whose
//! media is the test's RTP socket) is held by worker 0 and its consultation call to the page by
//! worker 1. The phone refers its first call to the page with Replaces: the page's leg moves to
//! worker 0, whose re-INVITE brings a new port, new ICE credentials and worker 0's certificate,
//! and the page's JsSIP answers it (an ICE restart and a new DTLS handshake in Chromium). Then
//! the transferee and the page hear each other's tones.

use crate::common;
use crate::phone_page::with_users_opts;
use crate::phone_page_calls::{hang_up, hears_tone, mic, phone, runtime, status, CALL_WAIT};
use crate::transfer::{call_id_on, first_call, refer_replacing};

use common::audio::{dominant_freq, tone, ulaw_decode_all};
use common::sip::{frames, sdp, Rtp, Uac};
use common::sipp::{Scenario, Sipp};
use common::switch::{default_config_trusting_loopback, Opts};
use common::webdriver::{click, Browser, Driver};
use common::TempDir;
use fantoccini::Client;
use std::time::Duration;

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

#[test]
fn the_phone_page_transferred_to_another_worker_hears_and_is_heard() {
    let dir = TempDir::new("phone-transfer");
    let mut heard = Rtp::bind();
    let transferee = Sipp::new(Scenario::File("uas_media_at.xml"))
        .args(&["-key", "media", &heard.port.to_string()])
        .spawn(None, dir.path());
    let s = with_users_opts(
        "phone-transfer",
        &["1001"],
        Opts {
            config_file: Some(default_config_trusting_loopback(dir.path())),
            vars: vec![("bridge_target".into(), transferee.addr.to_string())],
            workers: Some(2),
            ..Opts::default()
        },
    );
    let mic = mic(dir.path(), 800);
    let driver = Driver::start(Browser::Chromium, dir.path());
    runtime().block_on(async {
        let page = phone(&driver, &s, dir.path(), &mic, "1001").await;
        let mut first = first_call(&s, call_id_on(0, "first"), &mut heard);

        // The consultation: the phone calls the page, in a call worker 1 holds.
        let consult_rtp = Rtp::bind();
        let mut consult = Uac::new(s.sip, "1001");
        consult.call_id = call_id_on(1, "consult");
        consult.send_invite(&sdp(consult_rtp.port, &[(0, "PCMU/8000")], "sendrecv"));
        status(&page, "call from").await;
        click(&page, "#answer").await;
        let ok = consult.final_response("INVITE", CALL_WAIT);
        assert_eq!(ok.status(), Some(200), "{ok:?}");
        consult.invite_answered(&ok);
        consult.ack("");
        status(&page, "in call with").await;
        let before = far_fingerprint(&page).await;

        refer_replacing(&s, &mut first, "1001", &consult);
        consult.expect_request("BYE", Duration::from_secs(5));
        first.expect_request("BYE", Duration::from_secs(5));
        let after = far_fingerprint(&page).await;
        assert_ne!(
            after, before,
            "the leg moved to the other worker's certificate"
        );

        // The transferee speaks 1 kHz for 4 s while the page speaks 800 Hz.
        let talk = std::thread::spawn(move || {
            heard.send_frames(&frames(&tone(1000.0, 8000 * 4, 8000.0)), Duration::ZERO)
        });
        tokio::time::sleep(Duration::from_secs(3)).await;
        hears_tone(&page, 1000.0).await;
        let back = talk.join().unwrap();
        let payload: Vec<u8> = back[back.len() / 2..]
            .iter()
            .flat_map(|p| p.payload.clone())
            .collect();
        let f = dominant_freq(&ulaw_decode_all(&payload));
        assert!(
            (f - 800.0).abs() < 20.0,
            "the transferee hears {f} Hz from the page ({} packets)",
            back.len()
        );
        hang_up(&page, &s).await;
        page.close().await.unwrap();
    });
    transferee.finish().assert_ok(1);
}

//! Calls from and to the phone page in headless Chromium (WebRTC: ICE-lite, DTLS-SRTP, Opus or
//! G.711), with a fake microphone playing a tone made by sox. What the page hears is recorded
//! in the page (WebAudio) and read here: the echo (9196) gives back the tone, the demo (44444)
//! is the demo announcement, the menu (9198) takes the keypad's RFC 4733 digit "1" and plays the
//! demo; baresip registered over TLS with SDES-SRTP and the page call each other, both ways,
//! and hear each other's tone; two pages call each other.

use crate::common;
use crate::phone_page::{chromium_args, register, with_users, with_users_opts};
use crate::srtp::{srtp_account, srtp_config};
use crate::tls::self_signed;

use common::api::Api;
use common::audio::{best_correlation, dominant_freq, read_wav, rms, tone, write_wav};
use common::baresip::Baresip;
use common::switch::Opts;
use common::webdriver::{click, shot, type_into, wait_text, Browser, Driver};
use common::{repo_root, Strowger, TempDir};
use fantoccini::Client;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long a call may take to be set up (ICE and DTLS included) or to end.
pub(crate) const CALL_WAIT: Duration = Duration::from_secs(15);

/// A fake microphone for Chromium: `freq` Hz at half scale, 48 kHz mono, 60 s, made by sox.
pub(crate) fn mic(dir: &Path, freq: u32) -> PathBuf {
    let wav = dir.join(format!("mic-{freq}.wav"));
    let status = Command::new("sox")
        .args(["-n", "-r", "48000", "-c", "1", "-b", "16"])
        .arg(&wav)
        .args(["synth", "60", "sine", &freq.to_string(), "vol", "0.5"])
        .status()
        .expect("run sox (scripts/setup.sh installs it)");
    assert!(status.success(), "sox made no {}", wav.display());
    wav
}

/// The page from `s`'s `wss:` listener in a new Chromium hearing `mic`, registered as
/// `user` (password `pw-USER`).
pub(crate) async fn phone(
    driver: &Driver,
    s: &Strowger,
    dir: &Path,
    mic: &Path,
    user: &str,
) -> Client {
    let c = driver
        .session(
            &dir.join(format!("profile-{user}")),
            &chromium_args(Some(mic)),
        )
        .await;
    c.goto(&format!("https://{}/", s.ws.unwrap().1))
        .await
        .unwrap();
    register(
        &c,
        user,
        &format!("pw-{user}"),
        &format!("registered as {user}"),
    )
    .await;
    c
}

pub(crate) async fn status(c: &Client, text: &str) -> String {
    wait_text(c, "phone", "#call-status", text, CALL_WAIT).await
}

/// Dials `number` from the page and waits for the call to be answered.
async fn dial(c: &Client, number: &str) {
    type_into(c, "#number", number).await;
    click(c, "#call").await;
    status(c, &format!("in call with {number}")).await;
}

/// Hangs up on the page and waits for strowger to have no call left.
pub(crate) async fn hang_up(c: &Client, s: &Strowger) {
    click(c, "#hangup").await;
    status(c, "ended").await;
    let api = Api::of(s);
    let gone = common::wait_for(Duration::from_secs(5), || {
        api.calls().is_empty().then_some(())
    });
    assert!(gone.is_some(), "calls left: {:?}", api.calls());
}

/// The last `seconds` the page heard, at 8 kHz (each output sample the mean of the page's
/// samples it spans, which is low-pass enough for a tone's frequency and a correlation).
async fn heard(c: &Client, seconds: f64) -> Vec<i16> {
    let got = c
        .execute(
            "return phone.received(arguments[0]);",
            vec![serde_json::json!(seconds)],
        )
        .await
        .expect("phone.received");
    let rate = got["rate"].as_f64().unwrap();
    let samples: Vec<f64> = got["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        samples.len() as f64 >= seconds * rate * 0.9,
        "the page heard {} samples at {rate} Hz, not {seconds} s",
        samples.len()
    );
    let step = rate / 8000.0;
    (0..(samples.len() as f64 / step) as usize)
        .map(|j| {
            let span = &samples[(j as f64 * step) as usize..((j + 1) as f64 * step) as usize];
            (span.iter().sum::<f64>() / span.len() as f64) as i16
        })
        .collect()
}

/// Asserts the page hears a tone of `freq` Hz (the last second).
pub(crate) async fn hears_tone(c: &Client, freq: f64) {
    let x = heard(c, 1.0).await;
    let f = dominant_freq(&x);
    assert!((f - freq).abs() < 20.0, "the page hears {f} Hz, not {freq}");
}

/// Waits up to `limit` for the page's last second to be a tone of `freq` Hz: for a call
/// whose media is still being set up (ICE and DTLS anew, after a re-INVITE).
pub(crate) async fn comes_to_hear_tone(c: &Client, freq: f64, limit: Duration) {
    let end = std::time::Instant::now() + limit;
    loop {
        let f = dominant_freq(&heard(c, 1.0).await);
        if (f - freq).abs() < 20.0 {
            return;
        }
        assert!(
            std::time::Instant::now() < end,
            "the page hears {f} Hz after {limit:?}, not {freq}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Asserts the page hears the demo announcement: two in three eighths of a second of the last
/// 2 s it heard are a stretch of assets/demo.wav's first 10 s (the demo began when the call was
/// answered). Runs of exact zeros are left out first: a headless browser on a loaded machine
/// fills what its audio thread was late for with digital silence, in the middle of the audio
/// the call brought.
async fn hears_demo(c: &Client) {
    let demo = read_wav(&repo_root().join("assets/demo.wav"));
    let x = without_gaps(&heard(c, 2.0).await);
    let windows: Vec<&[i16]> = x.chunks_exact(1000).filter(|w| rms(w) > 100.0).collect();
    assert!(
        windows.len() >= 2,
        "the page heard {} s of sound",
        x.len() as f64 / 8000.0
    );
    let matched: Vec<f64> = windows
        .iter()
        .map(|w| best_correlation(w, &demo.samples, 0, w.len(), 0..=80_000).0)
        .collect();
    let good = matched.iter().filter(|&&m| m > 0.7).count();
    assert!(
        good * 3 >= windows.len() * 2,
        "the page's audio matches the demo only {matched:.2?}"
    );
}

/// `x` without its runs of 16 or more exact zeros (2 ms at 8 kHz).
fn without_gaps(x: &[i16]) -> Vec<i16> {
    let mut out = Vec::with_capacity(x.len());
    for run in x.chunk_by(|a, b| (*a == 0) == (*b == 0)) {
        if run[0] != 0 || run.len() < 16 {
            out.extend_from_slice(run);
        }
    }
    out
}

/// Waits for the level meter `css` (its dBFS text) to show more than -30 dBFS.
async fn meter_rises(c: &Client, css: &str) {
    let mut last = String::new();
    for _ in 0..50 {
        last = c
            .find(fantoccini::Locator::Css(css))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let db: Option<f64> = last.trim_end_matches(" dBFS").parse().ok();
        if db.is_some_and(|db| db > -30.0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css} stays at {last:?}");
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_phone_page_calls_the_echo_the_demo_and_the_menu() {
    let dir = TempDir::new("phone-calls");
    let s = with_users("phone-calls", &["1001"]);
    let mic = mic(dir.path(), 800);
    let driver = Driver::start(Browser::Chromium, dir.path());
    runtime().block_on(async {
        let c = phone(&driver, &s, dir.path(), &mic, "1001").await;
        dial(&c, "9196").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        hears_tone(&c, 800.0).await;
        meter_rises(&c, "#speaker-db").await;
        shot(&c, "phone", "3-echo").await;
        hang_up(&c, &s).await;

        dial(&c, "44444").await;
        // The microphone's meter shows the tone going out (the echo test is no place for it:
        // the browser's echo canceller may rightly take out a tone that comes straight back).
        meter_rises(&c, "#mic-db").await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        hears_demo(&c).await;
        hang_up(&c, &s).await;

        // The menu: its prompt, then "1" from the keypad (RFC 4733) goes to the demo.
        dial(&c, "9198").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        click(&c, "#keypad button[data-key='1']").await;
        wait_text(&c, "phone", "#sent-digits", "sent 1", CALL_WAIT).await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        hears_demo(&c).await;
        hang_up(&c, &s).await;
        c.close().await.unwrap();
    });
}

/// A strowger with `tls:`, `ws:` and `wss:` listeners and users 1001 (the page) and 1002, and
/// baresip registered as 1002 over TLS, answering by itself, with SDES-SRTP only
/// (`mediaenc=srtp-mand`: RTP/SAVP with `a=crypto` keys, or no call), playing a 600 Hz tone
/// for `run_s` seconds. strowger requires SRTP on TLS legs (`rtp.srtp = "require"`), so its
/// offers to baresip are RTP/SAVP too. The page's leg is DTLS-SRTP: strowger re-encrypts
/// between the two.
fn with_srtp_baresip(label: &str, dir: &Path, run_s: u32) -> (Strowger, Baresip) {
    let require = [("srtp = \"offer\"", "srtp = \"require\"")];
    let s = with_users_opts(
        label,
        &["1001", "1002"],
        Opts {
            tls: true,
            config_file: Some(crate::tls::config(dir, "srtp.toml", &require, "")),
            ..Opts::default()
        },
    );
    let tls = s.tls.unwrap();
    let source = dir.join("baresip-600.wav");
    write_wav(&source, 8000, &tone(600.0, 8000 * 30, 8000.0));
    let baresip = Baresip::spawn_with(
        "127.0.0.1",
        dir,
        "1002",
        &format!("{};answermode=auto", srtp_account(tls, "1002", "pw-1002")),
        &source,
        &[],
        run_s,
        &srtp_config(&self_signed(&s)),
    );
    baresip.wait_registered("1002 over TLS");
    (s, baresip)
}

/// Asserts baresip, when it has quit, had its call and heard the page's 800 Hz tone.
fn baresip_heard_the_page(baresip: Baresip, what: &str) {
    baresip.command("/quit");
    let got = baresip.finish(what);
    let f = dominant_freq(&got.samples[got.samples.len() / 2..]);
    assert!(
        (f - 800.0).abs() < 20.0,
        "baresip heard {f} Hz from the page"
    );
}

#[test]
fn the_phone_page_calls_baresip_over_tls_with_srtp() {
    let dir = TempDir::new("phone-baresip");
    let (s, baresip) = with_srtp_baresip("phone-baresip", dir.path(), 60);
    let mic = mic(dir.path(), 800);
    let driver = Driver::start(Browser::Chromium, dir.path());
    runtime().block_on(async {
        let c = phone(&driver, &s, dir.path(), &mic, "1001").await;
        dial(&c, "1002").await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        hears_tone(&c, 600.0).await;
        hang_up(&c, &s).await;
        c.close().await.unwrap();
    });
    baresip_heard_the_page(baresip, "called by the page");
}

#[test]
fn baresip_over_tls_with_srtp_calls_the_phone_page() {
    let dir = TempDir::new("baresip-phone");
    let (s, baresip) = with_srtp_baresip("baresip-phone", dir.path(), 60);
    let mic = mic(dir.path(), 800);
    let driver = Driver::start(Browser::Chromium, dir.path());
    runtime().block_on(async {
        let c = phone(&driver, &s, dir.path(), &mic, "1001").await;
        baresip.command(&format!("/dial sip:1001@{};transport=tls", s.tls.unwrap()));
        status(&c, "call from 1002").await;
        click(&c, "#answer").await;
        status(&c, "in call with 1002").await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        hears_tone(&c, 600.0).await;
        hang_up(&c, &s).await;
        c.close().await.unwrap();
    });
    baresip_heard_the_page(baresip, "calling the page");
}

#[test]
fn two_phone_pages_call_each_other_through_strowger() {
    let dir = TempDir::new("phone-to-phone");
    let s = with_users("phone-to-phone", &["1001", "1003"]);
    let (mic_a, mic_b) = (mic(dir.path(), 800), mic(dir.path(), 1200));
    let driver = Driver::start(Browser::Chromium, dir.path());
    runtime().block_on(async {
        let a = phone(&driver, &s, dir.path(), &mic_a, "1001").await;
        let b = phone(&driver, &s, dir.path(), &mic_b, "1003").await;
        type_into(&a, "#number", "1003").await;
        click(&a, "#call").await;
        status(&b, "call from 1001").await;
        click(&b, "#answer").await;
        status(&a, "in call with 1003").await;
        status(&b, "in call with 1001").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        hears_tone(&a, 1200.0).await;
        hears_tone(&b, 800.0).await;
        shot(&b, "phone", "4-answered").await;
        // B hangs up; A sees the call end.
        click(&b, "#hangup").await;
        status(&a, "ended").await;
        a.close().await.unwrap();
        b.close().await.unwrap();
    });
}

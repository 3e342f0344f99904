//! The phone page (crates/strowger/phone), as a browser gets it from strowger's `wss:` and
//! `ws:` listeners, in headless Chromium over WebDriver: the console's /phone leads to it on
//! the `wss:` listener; a wrong password is refused on the page and leaves no binding; the right one registers over the secure WebSocket (the API
//! lists the binding, transport wss); unregistering removes it; the page from the plain `ws:`
//! listener registers over that one. Screenshots go under target/test-artifacts/phone/.

use crate::common;

use common::api::Api;
use common::switch::Opts;
use common::webdriver::{click, shot, type_into, Browser, Driver, PAGE_WAIT};
use common::{wait_for, Strowger, TempDir};
use fantoccini::Client;
use serde_json::json;
use std::path::Path;
use std::time::Duration;

/// Chromium's flags for the page: the demo's self-signed certificate accepted, a fake
/// microphone playing `mic` (a WAV file) that the page may use without asking, audio that
/// plays without a click, and ICE candidates on loopback (Chromium leaves the loopback
/// interface out otherwise, and would offer only the machine's other addresses).
pub(crate) fn chromium_args(mic: Option<&Path>) -> Vec<String> {
    let mut args = vec![
        "--ignore-certificate-errors".to_string(),
        "--use-fake-ui-for-media-stream".into(),
        "--use-fake-device-for-media-stream".into(),
        "--autoplay-policy=no-user-gesture-required".into(),
        "--allow-loopback-in-peer-connection".into(),
    ];
    if let Some(wav) = mic {
        args.push(format!(
            "--use-file-for-fake-audio-capture={}",
            wav.display()
        ));
    }
    args
}

/// A strowger with `ws:` and `wss:` listeners and `users` (password `pw-USER`).
pub(crate) fn with_users(label: &str, users: &[&str]) -> Strowger {
    with_users_opts(label, users, Opts::default())
}

/// [`with_users`] with more options (a `tls:` listener, say).
pub(crate) fn with_users_opts(label: &str, users: &[&str], opts: Opts) -> Strowger {
    let s = Strowger::with(label, Opts { ws: true, ..opts });
    let api = Api::of(&s);
    for u in users {
        let user = json!({ "user": u, "password": format!("pw-{u}"), "context": "default" });
        assert_eq!(api.send("POST", "/api/v1/users", Some(user))["user"], *u);
    }
    s
}

/// Fills the page's account form and registers: waits for the page to say `expect`.
pub(crate) async fn register(c: &Client, user: &str, password: &str, expect: &str) -> String {
    type_into(c, "#user", user).await;
    type_into(c, "#password", password).await;
    click(c, "#register").await;
    common::webdriver::wait_text(c, "phone", "#reg-status", expect, PAGE_WAIT).await
}

/// The transports of `user`'s bindings as the API lists them (none when it has none).
pub(crate) fn bound_transports(s: &Strowger, user: &str) -> Vec<String> {
    let regs = Api::of(s).ok("GET", &format!("/api/v1/registrations?user={user}"));
    regs["registrations"][0]["contacts"]
        .as_array()
        .map(|contacts| {
            contacts
                .iter()
                .map(|c| c["transport"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits up to 5 s for the API to list `user`'s bindings as `transports`.
fn wait_bound(s: &Strowger, user: &str, transports: &[&str]) {
    let got = wait_for(Duration::from_secs(5), || {
        let bound = bound_transports(s, user);
        (bound == transports).then_some(())
    });
    assert!(
        got.is_some(),
        "{user}'s bindings: {:?}, not {transports:?}",
        bound_transports(s, user)
    );
}

#[test]
fn the_phone_page_registers_over_wss_and_ws_and_unregisters() {
    let dir = TempDir::new("phone-page");
    let s = with_users("phone-page", &["1001"]);
    let (ws, wss) = s.ws.unwrap();
    let driver = Driver::start(Browser::Chromium, dir.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = driver
            .session(&dir.subdir("profile"), &chromium_args(None))
            .await;
        // The console's link leads to the page on the wss: listener.
        c.goto(&format!("http://{}/phone", s.api)).await.unwrap();
        assert_eq!(c.title().await.unwrap(), "strowger phone");
        assert_eq!(
            c.current_url().await.unwrap().as_str(),
            format!("https://{wss}/")
        );
        let status = register(&c, "1001", "not-the-password", "registration failed").await;
        shot(&c, "phone", "1-refused").await;
        assert!(
            bound_transports(&s, "1001").is_empty(),
            "bound with a wrong password ({status})"
        );
        register(&c, "1001", "pw-1001", "registered as 1001").await;
        shot(&c, "phone", "2-registered").await;
        wait_bound(&s, "1001", &["wss"]);
        click(&c, "#unregister").await;
        wait_bound(&s, "1001", &[]);

        c.goto(&format!("http://{ws}/")).await.unwrap();
        register(&c, "1001", "pw-1001", "registered as 1001").await;
        wait_bound(&s, "1001", &["ws"]);
        c.close().await.unwrap();
    });
}

//! The web console in real headless browsers, Chromium and Firefox, driven over WebDriver
//! (chromedriver, geckodriver): log in with the API token, see a live SIPp call appear, hang
//! it up from the page (SIPp receives the BYE), find its CDR by search. One test body runs in
//! each browser; screenshots of each step are kept under target/test-artifacts/console/BROWSER/.

use crate::common;

use common::sipp::{Scenario, Sipp};
use common::switch::{default_config_trusting_loopback, Opts};
use common::webdriver::{self, type_into, wait_for_async, Browser, Driver, PAGE_WAIT};
use common::{Strowger, TempDir};
use fantoccini::{Client, Locator};

/// Opens one of the page's tabs.
async fn tab(c: &Client, name: &str) {
    webdriver::click(c, &format!("nav button[data-tab={name}]")).await;
}

/// Types `token` into the login form (replacing what it held) and submits it.
async fn log_in(c: &Client, token: &str) {
    type_into(c, "#token", token).await;
    webdriver::click(c, "#login-button").await;
}

/// Waits for an element holding `text` (the page polls every 2 s and refreshes on every call
/// event) and returns its whole text.
async fn wait_text(c: &Client, css: &str, text: &str) -> String {
    webdriver::wait_text(c, "console", css, text, PAGE_WAIT).await
}

async fn shot(c: &Client, name: &str) {
    webdriver::shot(c, "console", name).await;
}

#[test]
fn the_console_shows_a_live_call_hangs_it_up_and_finds_its_cdr() {
    walk_through(Browser::Chromium);
}

#[test]
fn the_console_works_in_firefox_too() {
    walk_through(Browser::Firefox);
}

fn walk_through(browser: Browser) {
    let dir = TempDir::new(&format!("console-{}", browser.name()));
    let s = Strowger::with(
        "console",
        Opts {
            config_file: Some(default_config_trusting_loopback(dir.path())),
            ..Opts::default()
        },
    );
    let token =
        std::fs::read_to_string(s.data_dir().join("api.token")).expect("the generated api.token");
    let driver = Driver::start(browser, dir.path());
    let console = format!("http://{}/", s.api);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let call = rt.block_on(async {
        let c = driver.session(&dir.subdir(browser.name()), &[]).await;
        c.goto(&console).await.unwrap();
        // A wrong token is refused on the page.
        log_in(&c, "not-the-token").await;
        wait_text(&c, "#login-error", "refused").await;
        log_in(&c, token.trim()).await;
        wait_text(&c, "#status", "calls").await;
        // Logged in: a call to the echo test that waits up to 10 s for strowger's BYE
        // (switch_bye.xml), which only the page's button will cause.
        let call = Sipp::new(Scenario::File("switch_bye.xml"))
            .service("44444")
            .spawn(Some(s.sip), s.dir.path());
        wait_text(&c, "#calls-body tr", "44444").await;
        shot(&c, "1-live-call").await;
        // The table is redrawn as calls change: a row found a moment ago may be replaced,
        // so find and click the button in one try, again if the row was redrawn between.
        let clicked = wait_for_async(|| async {
            match c.find(Locator::Css("#calls-body tr button.hangup")).await {
                Ok(b) => b.click().await.is_ok(),
                Err(_) => false,
            }
        })
        .await;
        assert!(clicked, "no hang-up button to click");
        // The row goes once the call is gone.
        let gone = wait_for_async(|| async {
            c.find_all(Locator::Css("#calls-body tr"))
                .await
                .map(|r| r.is_empty())
                .unwrap_or(false)
        })
        .await;
        assert!(gone, "the hung-up call is still listed");
        tab(&c, "cdrs").await;
        c.find(Locator::Id("cdr-search"))
            .await
            .unwrap()
            .send_keys("44444")
            .await
            .unwrap();
        let text = wait_text(&c, "#cdrs-body tr", "44444").await;
        assert!(
            text.contains("switch"),
            "the CDR row should say strowger hung up: {text}"
        );
        shot(&c, "2-cdr").await;
        tab(&c, "graph").await;
        wait_text(&c, "#plot", "calls").await;
        tab(&c, "translation").await;
        wait_text(&c, "#matrix", "pcmu").await;
        shot(&c, "3-translation").await;
        c.close().await.unwrap();
        call
    });
    // SIPp got the BYE the page asked for, and answered it.
    call.finish().assert_ok(1);
}

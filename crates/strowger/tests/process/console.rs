//! The web console in real headless browsers, Chromium and Firefox, driven over WebDriver
//! (chromedriver, geckodriver): log in with the API token, see a live SIPp call appear, hang
//! it up from the page (SIPp receives the BYE), find its CDR by search. One test body runs in
//! each browser; screenshots of each step are kept under target/test-artifacts/console/BROWSER/.

use crate::common;

use common::net::free_port;
use common::sipp::{Scenario, Sipp};
use common::switch::{default_config_trusting_loopback, Opts};
use common::{wait_for, Strowger, TempDir};
use fantoccini::{Client, ClientBuilder, Locator};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long the page may take to show what the test waits for (it polls every 2 s and
/// refreshes on every call event).
const PAGE_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
enum Browser {
    /// Debian's chromium and chromium-driver.
    Chromium,
    /// Debian's firefox-esr, and geckodriver (built by scripts/setup.sh).
    Firefox,
}

impl Browser {
    fn name(self) -> &'static str {
        match self {
            Browser::Chromium => "chromium",
            Browser::Firefox => "firefox",
        }
    }

    /// The WebDriver server on `port`, logging under `dir`.
    fn driver(self, port: u16, dir: &Path) -> Command {
        let log = dir.join(format!("{}-driver.log", self.name()));
        let mut c = match self {
            Browser::Chromium => {
                let mut c = Command::new("chromedriver");
                c.arg(format!("--port={port}"))
                    .arg(format!("--log-path={}", log.display()))
                    .stderr(Stdio::null());
                c
            }
            Browser::Firefox => {
                let mut c = Command::new("geckodriver");
                c.args(["--host", "127.0.0.1", "--port", &port.to_string()])
                    .stderr(std::fs::File::create(log).unwrap());
                c
            }
        };
        c.stdout(Stdio::null());
        c
    }

    /// The session's capabilities: headless, with a profile in `profile`.
    fn capabilities(self, profile: &Path) -> serde_json::Map<String, serde_json::Value> {
        let (key, options) = match self {
            Browser::Chromium => (
                "goog:chromeOptions",
                serde_json::json!({
                    "binary": "/usr/bin/chromium",
                    "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                             "--disable-gpu", format!("--user-data-dir={}", profile.display())],
                }),
            ),
            Browser::Firefox => (
                "moz:firefoxOptions",
                serde_json::json!({
                    "binary": "/usr/bin/firefox-esr",
                    "args": ["-headless", "-profile", profile.display().to_string()],
                }),
            ),
        };
        let mut caps = serde_json::Map::new();
        caps.insert(key.into(), options);
        caps
    }
}

/// A WebDriver server on a free loopback port, killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start(browser: Browser, dir: &Path) -> Driver {
        let port = free_port();
        let child = browser.driver(port, dir).spawn().unwrap_or_else(|e| {
            panic!("run the {browser:?} WebDriver server ({e}): scripts/setup.sh installs it")
        });
        let up = wait_for(Duration::from_secs(15), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(
            up.is_some(),
            "{browser:?}'s driver did not listen on port {port}"
        );
        Driver { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn artifacts(browser: &str) -> PathBuf {
    let d = common::repo_root()
        .join("target/test-artifacts/console")
        .join(browser);
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn session(browser: Browser, driver: &Driver, profile: &Path) -> Client {
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    let c = ClientBuilder::new(connector)
        .capabilities(browser.capabilities(profile))
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .unwrap_or_else(|e| panic!("a WebDriver session with headless {browser:?}: {e}"));
    c.set_window_size(1280, 900).await.unwrap();
    c
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    let browser = c
        .capabilities()
        .and_then(|caps| caps.get("browserName")?.as_str().map(str::to_string))
        .unwrap_or_default();
    std::fs::write(artifacts(&browser).join(format!("{name}.png")), png).unwrap();
}

/// Opens one of the page's tabs.
async fn tab(c: &Client, name: &str) {
    let css = format!("nav button[data-tab={name}]");
    c.find(Locator::Css(&css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Types `token` into the login form (replacing what it held) and submits it.
async fn log_in(c: &Client, token: &str) {
    let field = c.find(Locator::Id("token")).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(token).await.unwrap();
    c.find(Locator::Id("login-button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
}

/// Waits for an element holding `text` and returns its whole text, read in the same pass:
/// the page redraws its tables, so an element handle kept past this call may already be stale.
async fn wait_text(c: &Client, css: &str, text: &str) -> String {
    let deadline = std::time::Instant::now() + PAGE_WAIT;
    loop {
        for e in c.find_all(Locator::Css(css)).await.unwrap_or_default() {
            if let Ok(t) = e.text().await {
                if t.contains(text) {
                    return t;
                }
            }
        }
        if std::time::Instant::now() > deadline {
            shot(c, "timeout").await;
            panic!(
                "no {css} holding {text:?} within {PAGE_WAIT:?}: {}",
                c.source().await.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
        let c = session(browser, &driver, &dir.subdir(browser.name())).await;
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

async fn wait_for_async<F, Fut>(mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + PAGE_WAIT;
    while std::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

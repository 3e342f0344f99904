//! Headless browsers driven over WebDriver (fantoccini): Debian's chromium with
//! chromium-driver, firefox-esr with geckodriver (built by scripts/setup.sh). The web console's
//! and the phone page's tests drive them; screenshots go under target/test-artifacts/AREA/BROWSER/.

use super::net::free_port;
use super::wait_for;
use fantoccini::{Client, ClientBuilder, Locator};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a page may take to show what a test waits for.
pub const PAGE_WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Copy, Debug)]
pub enum Browser {
    /// Debian's chromium and chromium-driver.
    Chromium,
    /// Debian's firefox-esr, and geckodriver (built by scripts/setup.sh).
    Firefox,
}

impl Browser {
    pub fn name(self) -> &'static str {
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

    /// The session's capabilities: headless, with a profile in `profile`, and `args` for the
    /// browser's command line.
    fn capabilities(
        self,
        profile: &Path,
        args: &[String],
    ) -> serde_json::Map<String, serde_json::Value> {
        let (key, mut all, binary) = match self {
            Browser::Chromium => (
                "goog:chromeOptions",
                vec![
                    "--headless=new".to_string(),
                    "--no-sandbox".into(),
                    "--disable-dev-shm-usage".into(),
                    "--disable-gpu".into(),
                    format!("--user-data-dir={}", profile.display()),
                ],
                "/usr/bin/chromium",
            ),
            Browser::Firefox => (
                "moz:firefoxOptions",
                vec![
                    "-headless".to_string(),
                    "-profile".into(),
                    profile.display().to_string(),
                ],
                "/usr/bin/firefox-esr",
            ),
        };
        all.extend_from_slice(args);
        let mut caps = serde_json::Map::new();
        caps.insert(
            key.into(),
            serde_json::json!({ "binary": binary, "args": all }),
        );
        caps
    }
}

/// A WebDriver server on a free loopback port, killed when dropped.
pub struct Driver {
    child: Child,
    port: u16,
    browser: Browser,
}

impl Driver {
    pub fn start(browser: Browser, dir: &Path) -> Driver {
        let port = free_port();
        let child = browser
            .driver(port, dir)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("run the {browser:?} WebDriver server ({e}): scripts/setup.sh installs it")
            });
        let up = wait_for(Duration::from_secs(15), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(
            up.is_some(),
            "{browser:?}'s driver did not listen on port {port}"
        );
        Driver {
            child,
            port,
            browser,
        }
    }

    /// A browser session (one browser started), headless in a 1280x900 window, with its
    /// profile in `profile` and `args` on its command line.
    pub async fn session(&self, profile: &Path, args: &[String]) -> Client {
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let browser = self.browser;
        let c = ClientBuilder::new(connector)
            .capabilities(browser.capabilities(profile, args))
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .unwrap_or_else(|e| panic!("a WebDriver session with headless {browser:?}: {e}"));
        c.set_window_size(1280, 900).await.unwrap();
        c
    }
}

impl Drop for Driver {
    /// Kills the driver's process group: the browsers it started too, which a test that
    /// panicked before closing its session would leave running.
    fn drop(&mut self) {
        // SAFETY: kill(2) on the group this driver leads (started with process_group(0)).
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// Keeps a screenshot of the page as target/test-artifacts/AREA/BROWSER/NAME.png.
pub async fn shot(c: &Client, area: &str, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    let browser = c
        .capabilities()
        .and_then(|caps| caps.get("browserName")?.as_str().map(str::to_string))
        .unwrap_or_default();
    let dir: PathBuf = super::repo_root()
        .join("target/test-artifacts")
        .join(area)
        .join(browser);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

/// Waits up to `limit` for an element holding `text` and returns its whole text, read in the
/// same pass: a page that redraws may have replaced an element handle kept past this call.
/// Panics with the page's source (and a screenshot under AREA) when none comes.
pub async fn wait_text(c: &Client, area: &str, css: &str, text: &str, limit: Duration) -> String {
    let deadline = std::time::Instant::now() + limit;
    loop {
        for e in c.find_all(Locator::Css(css)).await.unwrap_or_default() {
            if let Ok(t) = e.text().await {
                if t.contains(text) {
                    return t;
                }
            }
        }
        if std::time::Instant::now() > deadline {
            shot(c, area, "timeout").await;
            panic!(
                "no {css} holding {text:?} within {limit:?}: {}",
                c.source().await.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls `f` every 200 ms until it says true, for up to [`PAGE_WAIT`]; whether it did.
pub async fn wait_for_async<F, Fut>(mut f: F) -> bool
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

/// Clicks the element `css` finds.
pub async fn click(c: &Client, css: &str) {
    c.find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
        .click()
        .await
        .unwrap_or_else(|e| panic!("clicking {css}: {e}"));
}

/// Replaces what the input `css` holds with `text`.
pub async fn type_into(c: &Client, css: &str, text: &str) {
    let field = c
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no {css} on the page: {e}"));
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

//! A real headless Chromium (Debian's `chromium`), driven over WebDriver by
//! `fantoccini` through its own `chromedriver` (Debian's `chromium-driver`)
//! on a free loopback port.
//!
//! Chrome's DevTools commands, which WebDriver lacks (a bearer header on
//! every request, the network switched off), go through chromedriver's
//! `goog/cdp/execute` endpoint.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use tokio::process::Child;

use super::HANG_GUARD;
use super::http::http_client;

/// The first of `names` found on `PATH` or in `/usr/bin`, `/usr/lib/chromium`.
fn binary(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path).chain([
        PathBuf::from("/usr/bin"),
        PathBuf::from("/usr/lib/chromium"),
    ]);
    dirs.flat_map(|dir| names.iter().map(move |name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

/// A free loopback port (bound, then released for the driver).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// One headless browser session and the driver process behind it.
pub(crate) struct Browser {
    pub(crate) client: Client,
    driver: Child,
    driver_url: String,
    session: String,
    /// The browser's own profile directory: it names the browser's
    /// processes, which a test that panics leaves behind its driver.
    profile: PathBuf,
}

impl Browser {
    /// Starts `chromedriver` on a free port, waits until it accepts
    /// connections, and opens a headless Chromium session at 1280×900.
    pub(crate) async fn start() -> Self {
        let driver_binary = binary(&["chromedriver"]).expect(
            "no chromedriver: install Debian's chromium and chromium-driver (.ci/run does)",
        );
        let chromium = binary(&["chromium", "chromium-browser"])
            .expect("no chromium: install Debian's chromium (.ci/run does)");
        let profile = super::files::temp_dir("chromium-profile");
        let port = free_port();
        let driver = tokio::process::Command::new(driver_binary)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let driver_url = format!("http://127.0.0.1:{port}");
        wait_for_port(port).await;
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    "--no-first-run", "--disable-extensions",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = tokio::time::timeout(
            HANG_GUARD,
            ClientBuilder::rustls()
                .unwrap()
                .capabilities(capabilities)
                .connect(&driver_url),
        )
        .await
        .expect("chromedriver did not open a session in time")
        .unwrap();
        let session = client.session_id().await.unwrap().unwrap();
        Self {
            client,
            driver,
            driver_url,
            session,
            profile,
        }
    }

    /// Runs a Chrome DevTools Protocol command.
    pub(crate) async fn cdp(&self, cmd: &str, params: Value) -> Value {
        let url = format!(
            "{}/session/{}/goog/cdp/execute",
            self.driver_url, self.session
        );
        let response = http_client()
            .post(url)
            .json(&json!({"cmd": cmd, "params": params}))
            .send()
            .await
            .unwrap();
        assert!(response.status().is_success(), "CDP {cmd}: {response:?}");
        response.json().await.unwrap()
    }

    /// Every later request of the page carries `Authorization: Bearer TOKEN`
    /// (what an authenticating proxy in front of the server adds).
    pub(crate) async fn send_bearer(&self, token: &str) {
        self.cdp("Network.enable", json!({})).await;
        self.cdp(
            "Network.setExtraHTTPHeaders",
            json!({"headers": {"Authorization": format!("Bearer {token}")}}),
        )
        .await;
    }

    /// No network at all from now on (`file://` still loads).
    pub(crate) async fn go_offline(&self) {
        self.cdp("Network.enable", json!({})).await;
        self.cdp(
            "Network.emulateNetworkConditions",
            json!({"offline": true, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}),
        )
        .await;
    }

    /// Opens `url`.
    pub(crate) async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The `file://` URL of `path`.
    pub(crate) fn file_url(path: &Path) -> String {
        format!("file://{}", path.canonicalize().unwrap().display())
    }

    /// Waits for an element matching the CSS `selector`.
    pub(crate) async fn wait_for(&self, selector: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(HANG_GUARD)
            .for_element(Locator::Css(selector))
            .await
            .unwrap_or_else(|e| panic!("no {selector} appeared: {e}"))
    }

    /// Every element matching the CSS `selector` now.
    pub(crate) async fn all(&self, selector: &str) -> Vec<fantoccini::elements::Element> {
        self.client.find_all(Locator::Css(selector)).await.unwrap()
    }

    /// Runs `script` in the page and returns its value.
    pub(crate) async fn eval(&self, script: &str) -> Value {
        self.client.execute(script, Vec::new()).await.unwrap()
    }

    /// Writes a PNG screenshot of the window to `path`.
    pub(crate) async fn screenshot(&self, path: &Path) {
        let png = self.client.screenshot().await.unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    /// Ends the session and the driver.
    pub(crate) async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill().await;
    }
}

impl Drop for Browser {
    /// Ends the browser processes of this session's profile that are still
    /// running (a test that panicked never closed its session).
    fn drop(&mut self) {
        let marker = format!("--user-data-dir={}", self.profile.display());
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            if cmdline
                .split(|&b| b == 0)
                .any(|arg| arg == marker.as_bytes())
            {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
}

/// Waits until something listens on `port` (the driver is up).
async fn wait_for_port(port: u16) {
    tokio::time::timeout(HANG_GUARD, async {
        loop {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("chromedriver did not listen in time");
}

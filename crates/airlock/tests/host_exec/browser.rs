//! A real headless Chromium for the web page's tests, driven through Debian's
//! `chromedriver` (WebDriver) with `fantoccini`. It sends nothing off this machine:
//! background networking, component updates, sync, metrics reporting, default apps,
//! first-run, domain reliability and the rest of its phoning home are off, every request
//! goes to a proxy at 127.0.0.1:9 that does not exist except those to loopback, and no
//! host name resolves but `localhost`.
//!
//! For the page served remotely ([`Browser::start_remote`]) one test name, such as
//! `airlock.test`, also resolves, to 127.0.0.1, and the certificate whose public key has
//! the given SPKI hash is accepted (that one key, not any certificate).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};

/// A browser and the driver that runs it; both end when it is dropped.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A test name that resolves to 127.0.0.1, and the SPKI hash (base64 of the SHA-256 of
/// the DER SubjectPublicKeyInfo) of the one TLS key accepted for it.
pub struct RemoteName<'a> {
    pub name: &'a str,
    pub spki_sha256: &'a str,
}

/// The switches that keep Chromium on this machine and quiet.
fn chromium_args(
    profile: &std::path::Path,
    width: u32,
    height: u32,
    remote: Option<&RemoteName>,
) -> Vec<String> {
    let mut args: Vec<String> = [
        "--headless=new",
        // The tests run as root, where Chromium's own sandbox cannot start.
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--metrics-recording-only",
        "--disable-default-apps",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-domain-reliability",
        "--disable-breakpad",
        "--disable-client-side-phishing-detection",
        "--disable-features=OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
        "--password-store=basic",
        // Everything through a proxy that is not there, but loopback (the page under test).
        "--proxy-server=127.0.0.1:9",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    match remote {
        None => {
            args.push("--proxy-bypass-list=127.0.0.1;localhost;[::1]".into());
            args.push(
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1"
                    .into(),
            );
        }
        Some(r) => {
            args.push(format!(
                "--proxy-bypass-list=127.0.0.1;localhost;[::1];{}",
                r.name
            ));
            args.push(format!(
                "--host-resolver-rules=MAP {} 127.0.0.1 , MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
                r.name
            ));
            args.push(format!(
                "--ignore-certificate-errors-spki-list={}",
                r.spki_sha256
            ));
        }
    }
    args.push(format!("--user-data-dir={}", profile.display()));
    args.push(format!("--window-size={width},{height}"));
    args
}

impl Browser {
    /// A headless Chromium with a `width`×`height` window.
    pub async fn start(width: u32, height: u32) -> Browser {
        Browser::launch(width, height, None).await
    }

    /// A headless Chromium for the page served remotely as `remote.name`.
    pub async fn start_remote(remote: &RemoteName<'_>) -> Browser {
        Browser::launch(1280, 900, Some(remote)).await
    }

    async fn launch(width: u32, height: u32, remote: Option<&RemoteName<'_>>) -> Browser {
        use std::os::unix::process::CommandExt;
        for (bin, pkg) in [
            ("chromium", "chromium"),
            ("chromedriver", "chromium-driver"),
        ] {
            assert!(
                Command::new("sh")
                    .args(["-c", &format!("command -v {bin}")])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success()),
                "`{bin}` is not installed: the web page's tests need Debian's {pkg} (scripts/test-env installs it)"
            );
        }
        let port = free_port();
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so the browser it starts ends with it.
            .process_group(0)
            .spawn()
            .unwrap();
        let profile = tempfile::tempdir().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut caps = serde_json::Map::new();
        caps.insert("browserName".into(), "chrome".into());
        // A window has a least width; a phone's viewport is emulated instead, exactly.
        let mut options =
            serde_json::json!({ "args": chromium_args(profile.path(), width, height, remote) });
        if width < 600 {
            options["mobileEmulation"] = serde_json::json!({
                "deviceMetrics": { "width": width, "height": height, "pixelRatio": 3.0, "touch": true },
            });
        }
        caps.insert("goog:chromeOptions".into(), options);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a Chromium session through chromedriver");
        Browser {
            client,
            driver,
            _profile: profile,
        }
    }

    /// The page's text.
    pub async fn text(&self) -> String {
        // Read in one script: the page's own script may redraw the body between a
        // WebDriver find and a read of what was found (a stale element).
        let text = self
            .client
            .execute(
                "return document.body ? document.body.innerText : '';",
                vec![],
            )
            .await
            .unwrap();
        text.as_str().unwrap_or_default().to_string()
    }

    /// Click the element `css` finds.
    pub async fn click(&self, css: &str) {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap()
            .click()
            .await
            .unwrap();
    }

    /// Type `text` into the element `css` finds, once it is there.
    pub async fn type_into(&self, css: &str, text: &str) {
        self.client
            .wait()
            .for_element(Locator::Css(css))
            .await
            .unwrap()
            .send_keys(text)
            .await
            .unwrap();
    }

    /// How many elements of the page match `css`.
    pub async fn count(&self, css: &str) -> usize {
        self.client
            .find_all(fantoccini::Locator::Css(css))
            .await
            .unwrap()
            .len()
    }

    /// Whether any script of the page set `window.__pwned` (what every XSS payload in
    /// these tests would do if it ran).
    pub async fn pwned(&self) -> bool {
        self.client
            .execute("return window.__pwned !== undefined;", vec![])
            .await
            .unwrap()
            .as_bool()
            .unwrap_or(true)
    }

    /// Keep a screenshot of the page as `name`.png under `AIRLOCK_WEB_SCREENSHOTS` (how the
    /// pictures in docs/web.md are made); nothing when it is unset.
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("AIRLOCK_WEB_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(std::path::Path::new(&dir).join(format!("{name}.png")), png).unwrap();
    }

    /// Give the browser a virtual WebAuthn authenticator (a platform passkey store that
    /// verifies its user), through WebDriver's `POST /session/{id}/webauthn/authenticator`.
    pub async fn add_virtual_authenticator(&self) -> String {
        let id = self
            .client
            .issue_cmd(AddVirtualAuthenticator)
            .await
            .expect("chromedriver adds a virtual authenticator");
        id.as_str().expect("the authenticator's id").to_string()
    }

    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver's process group: the driver and the browser it started.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.driver.id() as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.driver.wait();
    }
}

/// WebDriver's "Add Virtual Authenticator" (Web Authentication, §11), which fantoccini has
/// no method for.
#[derive(Debug)]
struct AddVirtualAuthenticator;

impl fantoccini::wd::WebDriverCompatibleCommand for AddVirtualAuthenticator {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/webauthn/authenticator",
            session_id.unwrap_or_default()
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (axum::http::Method, Option<String>) {
        let options = serde_json::json!({
            "protocol": "ctap2",
            "transport": "internal",
            "hasResidentKey": true,
            "hasUserVerification": true,
            "isUserVerified": true,
            "isUserConsenting": true,
        });
        (axum::http::Method::POST, Some(options.to_string()))
    }
}

//! `airlock web`: ask the running host for a one-time login link to its web page, print
//! it, and open it where a browser can be (`docs/web.md`). With `--enroll`, the link
//! enrols a passkey for the page served remotely instead.

use clap::Args;

use crate::home::Home;
use crate::web::LoginLink;

/// `airlock web` arguments.
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Only print the link; do not start a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Print a one-time link that enrols a passkey for the page served remotely (at
    /// `[web] public_name`), instead of a login link.
    #[arg(long)]
    pub enroll: bool,
}

pub fn run(args: WebArgs) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let Some(host) = crate::host::client::find(&home) else {
        anyhow::bail!(
            "no host serves {}: the web page is served by `airlock serve`\nhelp: start `airlock serve` with `[web] listen = \"127.0.0.1:7464\"` in airlock.toml",
            home.state.display()
        );
    };
    let (path, what) = if args.enroll {
        ("/v1/web/enroll", "enrols a passkey")
    } else {
        ("/v1/web/login", "logs in")
    };
    let link: LoginLink = host.post(path, &serde_json::json!({}))?;
    crate::out!("{}", link.url);
    eprintln!(
        "airlock: this link {what} once, within {} seconds; keep it to yourself",
        link.expires_in_secs
    );
    if !args.no_open && has_display() {
        // Best effort: without a browser the printed link is the way in.
        let _ = std::process::Command::new("xdg-open")
            .arg(&link.url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    Ok(0)
}

/// Whether a graphical session could show a browser.
fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

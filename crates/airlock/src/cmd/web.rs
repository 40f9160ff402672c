//! `airlock web`: ask the running host for a one-time login link to its web page, print
//! it, and open it where a browser can be (`docs/web.md`). With `--enroll`, the link
//! enrols a passkey for the page served remotely instead. `--passkeys` lists the enrolled
//! passkeys and `--revoke-passkey ID` revokes one, through the running host (which then
//! accepts it no more) or, when none runs, in the passkeys file; `--logout-all` ends
//! every login the same way.

use clap::Args;

use airlock_core::terminal_text::escape_line;

use crate::home::Home;
use crate::service::decider::Decider;
use crate::web::passkeys::{PasskeyInfo, Revoked};
use crate::web::LoginLink;

/// `airlock web` arguments.
#[derive(Debug, Args)]
pub struct WebArgs {
    /// Only print the link; do not start a browser.
    #[arg(long)]
    pub no_open: bool,
    /// Print a one-time link that enrols a passkey for the page served remotely (at
    /// `[web] public_name`), instead of a login link.
    #[arg(long, conflicts_with_all = ["passkeys", "revoke_passkey"])]
    pub enroll: bool,
    /// List the passkeys enrolled for the page served remotely: id, name, when enrolled and
    /// last used.
    #[arg(long, conflicts_with = "revoke_passkey")]
    pub passkeys: bool,
    /// Revoke the passkey with this id (from `--passkeys`); with none left, the page
    /// serves only enrolment again.
    #[arg(long, value_name = "ID", conflicts_with = "logout_all")]
    pub revoke_passkey: Option<String>,
    /// End every login of the page (they are kept across restarts of the host until they
    /// expire or end).
    #[arg(long, conflicts_with_all = ["enroll", "passkeys"])]
    pub logout_all: bool,
}

pub fn run(args: WebArgs) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    if args.passkeys {
        let list: Vec<PasskeyInfo> = crate::host::client::through_host_or(
            &home,
            |host| host.get("/v1/web/passkeys"),
            || crate::web::admin::list(None, &home),
        )?;
        print_passkeys(&list)?;
        return Ok(0);
    }
    if args.logout_all {
        let ended: usize = crate::host::client::through_host_or(
            &home,
            |host| host.post("/v1/web/logout-all", &serde_json::json!({})),
            || crate::web::admin::end_all_logins(None, &home, &Decider::cli()),
        )?;
        crate::out!("ended {ended} web login(s)");
        return Ok(0);
    }
    if let Some(id) = &args.revoke_passkey {
        let done: Revoked = crate::host::client::through_host_or(
            &home,
            |host| host.post("/v1/web/passkeys/revoke", id),
            || crate::web::admin::revoke(None, &home, id, &Decider::cli()),
        )?;
        crate::out!(
            "revoked passkey {} ({}); {} still enrolled",
            done.passkey.id,
            escape_line(&done.passkey.label),
            done.remaining
        );
        if !done.logins_ended.is_empty() {
            crate::out!(
                "ended the logins it opened: {}",
                done.logins_ended.join(", ")
            );
        }
        if done.remaining == 0 {
            eprintln!("airlock: no passkey is enrolled now, so the page served remotely serves only enrolment; `airlock web --enroll` makes a link to enrol one");
        }
        return Ok(0);
    }
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

/// One passkey a line: id, when enrolled, when last used, and its name.
fn print_passkeys(list: &[PasskeyInfo]) -> anyhow::Result<()> {
    if list.is_empty() {
        crate::out!("no passkey is enrolled");
        return Ok(());
    }
    let when = |secs: u64| {
        humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs),
        )
        .to_string()
    };
    crate::out!(
        "{:<15}  {:<20}  {:<20}  NAME",
        "ID",
        "ENROLLED",
        "LAST USED"
    );
    for p in list {
        crate::out!(
            "{:<15}  {:<20}  {:<20}  {}",
            p.id,
            when(p.enrolled_at),
            p.last_used.map(when).unwrap_or_else(|| "never".into()),
            escape_line(&p.label)
        );
    }
    Ok(())
}

/// Whether a graphical session could show a browser.
fn has_display() -> bool {
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

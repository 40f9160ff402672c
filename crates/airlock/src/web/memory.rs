//! Memory review: each change to memory that was held for the owner (a write by a tainted
//! session to context that is always loaded, …) with the record now and the one proposed,
//! where it came from and why it was held; approve or reject, through the same service as
//! `airlock memory approve|reject`, recorded as the owner via the web. Then the live
//! records, each with its history (every kept version, as a diff against the one before)
//! and a rollback to any earlier version, through the same service as `airlock memory
//! rollback`.
//!
//! An approval names the payload hash of the change as the page drew it
//! ([`service::ReviewView::payload_hash`]): a change that differs from what was shown is
//! not applied. Served remotely, the approval is also a passkey assertion whose challenge
//! is bound to that change and hash ([`super::remote::check_approval`]).

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;
use similar::{ChangeTag, TextDiff};

use super::auth::WebLogin;
use super::guard::{Checked, HasCsrf, LoggedIn};
use super::layout::{self, csrf};
use super::untrusted;
use super::WebState;
use crate::service::decider::Decider;
use crate::service::memory::{self as service, MemoryAct, VersionView};

/// What an approval's passkey assertion names as its request: a held memory change, never
/// to be confused with a held action's id.
pub fn approval_subject(change: &str) -> String {
    format!("memory-change:{change}")
}

/// What a remote rollback's passkey signs: the record and the version it restores
/// (versions never change once written, so these two say exactly what comes back).
pub fn rollback_subject(id: &str, to: i64) -> String {
    format!("memory-rollback:{id}:{to}")
}

/// The payload hash a rollback form carries, over what it restores.
fn rollback_hash(id: &str, to: i64) -> String {
    format!(
        "sha256:{}",
        airlock_core::canonical::sha256_hex(rollback_subject(id, to).as_bytes())
    )
}

pub async fn page(State(web): State<Arc<WebState>>, LoggedIn(login): LoggedIn) -> Response {
    let home = web.host.home.clone();
    let read = tokio::task::spawn_blocking(move || {
        let reviews = service::reviews(&home)?;
        let records = service::records(&home)?;
        anyhow::Ok((reviews, records))
    })
    .await;
    let chrome = web.chrome().await;
    let passkey = web.bound.is_remote();
    let body = match read {
        Ok(Ok(((items, corrupt), (records, corrupt_records)))) => html! {
            h2 { "Held changes" }
            @if items.is_empty() { p id="no-reviews" { "No memory changes are waiting for review." } }
            @for c in &items {
                section class="approval memory-change" id=(format!("change-{}", c.change)) {
                    h2 { (untrusted::line(&c.op)) " " (untrusted::line(&c.tier)) " record " code { (untrusted::line(&c.record_id)) } }
                    p class="meta" {
                        "in " (untrusted::line(&c.namespace)) " · from session "
                        a href=(format!("/sessions/{}", c.session)) { (untrusted::line(&c.session)) }
                        " (" (untrusted::line(&c.principal)) "), tool call " (untrusted::line(&c.tool_call))
                        @if c.tainted { " · " span class="tainted" { "written after untrusted content" } }
                    }
                    ul class="reasons" { @for r in &c.reasons { li { (untrusted::line(r)) } } }
                    pre class="diff" {
                        @match &c.current {
                            Some((v, text)) => {
                                span class="hunk" { "--- version " (v) } "\n"
                                @for l in text.lines() { span class="del" { "- " (untrusted::line(l)) } "\n" }
                            }
                            None => { span class="hunk" { "--- (new record)" } "\n" }
                        }
                        span class="hunk" { "+++ proposed" } "\n"
                        @match &c.proposed {
                            Some(text) => { @for l in text.lines() { span class="add" { "+ " (untrusted::line(l)) } "\n" } }
                            None => { span class="add" { "+ (forgotten)" } "\n" }
                        }
                    }
                    p class="hash" { "Payload " code { (c.payload_hash) } }
                    form method="post" action="/memory/decide" class="decide"
                        data-passkey=[passkey.then_some("required")]
                        data-subject=(approval_subject(&c.change)) {
                        (csrf(&login))
                        input type="hidden" name="change" value=(c.change);
                        input type="hidden" name="hash" value=(c.payload_hash);
                        @if passkey {
                            input type="hidden" name="ceremony" value="";
                            input type="hidden" name="assertion" value="";
                            p class="passkey-note" { "Applying asks your passkey to sign this change and payload hash." }
                        }
                        div class="buttons" {
                            button type="submit" name="decision" value="approve" class="approve" { "Apply" }
                            button type="submit" name="decision" value="reject" class="deny" { "Reject" }
                        }
                    }
                }
            }
            @if corrupt > 0 { p class="error" { (corrupt) " held change(s) could not be read; the store quarantined them." } }
            h2 { "Records" }
            @if records.is_empty() { p id="no-records" { "Memory holds no records." } }
            @else {
                table class="records" {
                    thead { tr { th { "Record" } th { "Version" } th { "Tier" } th { "Kind" } th { "Namespace" } th { "Text" } } }
                    tbody {
                        @for r in &records {
                            tr class="record" data-record=(r.record_id) {
                                td { a href=(format!("/memory/records/{}", r.record_id)) { (untrusted::line(&r.record_id)) } }
                                td { (r.version) }
                                td { (untrusted::line(&r.tier)) }
                                td { (untrusted::line(&r.kind)) }
                                td { (untrusted::line(&r.namespace)) }
                                td {
                                    (untrusted::line(&r.summary))
                                    @if r.untrusted { " " span class="tainted" { "untrusted" } }
                                }
                            }
                        }
                    }
                }
            }
            @if corrupt_records > 0 { p class="error" { (corrupt_records) " record(s) could not be read; the store quarantined them." } }
        },
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    Html(layout::page("Memory review", &login, &chrome, body).into_string()).into_response()
}

/// `GET /memory/records/{id}`: every kept version of a record, newest first, each as a
/// diff against the version before it, with a rollback to each earlier one.
pub async fn record(
    State(web): State<Arc<WebState>>,
    LoggedIn(login): LoggedIn,
    Path(id): Path<String>,
) -> Response {
    let home = web.host.home.clone();
    let wanted = id.clone();
    let read = tokio::task::spawn_blocking(move || service::history(&home, &wanted)).await;
    let chrome = web.chrome().await;
    let body = match read {
        Ok(Ok((versions, corrupt))) => {
            history_view(&login, &id, &versions, corrupt, web.bound.is_remote())
        }
        Ok(Err(e)) => html! { p class="error" { (untrusted::block(&format!("{e:#}"))) } },
        Err(e) => html! { p class="error" { (e.to_string()) } },
    };
    let title = format!("Memory record {id}");
    Html(layout::page(&title, &login, &chrome, body).into_string()).into_response()
}

fn history_view(
    login: &WebLogin,
    id: &str,
    versions: &[VersionView],
    corrupt: usize,
    passkey: bool,
) -> Markup {
    let current = versions.last().map(|v| v.version);
    html! {
        p { a href="/memory" { "All records and held changes" } }
        @if versions.is_empty() { p id="no-history" { "No kept version of this record." } }
        @for (i, v) in versions.iter().enumerate().rev() {
            section class="version" id=(format!("version-{}", v.version)) data-version=(v.version) {
                h2 {
                    "Version " (v.version)
                    @if Some(v.version) == current { " (current)" }
                }
                p class="meta" {
                    (when(v.written_at_ms)) " · " (untrusted::line(&v.origin))
                    @if let Some(a) = &v.actor { " by " (untrusted::line(a)) }
                    " · " (untrusted::line(&v.kind)) " · from session "
                    a href=(format!("/sessions/{}", v.session)) { (untrusted::line(&v.session)) }
                    " (" (untrusted::line(&v.principal)) ")"
                    @if v.untrusted { " · " span class="tainted" { "untrusted" } }
                }
                (version_diff(i.checked_sub(1).map(|p| &versions[p]), v))
                @if Some(v.version) != current {
                    // Served remotely, a rollback is signed by the passkey as an
                    // approval is: what it restores is bound into the challenge.
                    form method="post" action="/memory/rollback" class="rollback decide"
                        data-passkey=[passkey.then_some("required")]
                        data-subject=(rollback_subject(id, v.version)) {
                        (csrf(login))
                        input type="hidden" name="id" value=(id);
                        input type="hidden" name="to" value=(v.version);
                        input type="hidden" name="hash" value=(rollback_hash(id, v.version));
                        @if passkey {
                            input type="hidden" name="ceremony" value="";
                            input type="hidden" name="assertion" value="";
                        }
                        button type="submit" name="decision" value="rollback" class="rollback" { "Roll back to version " (v.version) }
                    }
                }
            }
        }
        @if corrupt > 0 { p class="error" { (corrupt) " version(s) could not be read; the store quarantined them." } }
    }
}

/// A version as a line diff against the one before it (the first against nothing).
fn version_diff(before: Option<&VersionView>, v: &VersionView) -> Markup {
    let old = before.and_then(|b| b.text.clone()).unwrap_or_default();
    let new = v.text.clone().unwrap_or_default();
    let diff = TextDiff::from_lines(&old, &new);
    html! {
        pre class="diff" {
            span class="hunk" {
                @match before {
                    Some(b) => { "--- version " (b.version) }
                    None => { "--- (new record)" }
                }
            } "\n"
            span class="hunk" { "+++ version " (v.version) @if v.text.is_none() { " (forgotten)" } } "\n"
            @for change in diff.iter_all_changes() {
                @let line = change.value().trim_end_matches('\n');
                @match change.tag() {
                    ChangeTag::Delete => { span class="del" { "- " (untrusted::line(line)) } "\n" }
                    ChangeTag::Insert => { span class="add" { "+ " (untrusted::line(line)) } "\n" }
                    ChangeTag::Equal => { span class="ctx" { "  " (untrusted::line(line)) } "\n" }
                }
            }
        }
    }
}

/// A time in milliseconds since the epoch, as RFC 3339 (UTC).
fn when(ms: i64) -> String {
    let t =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
    humantime::format_rfc3339_seconds(t).to_string()
}

#[derive(Debug, Deserialize)]
pub struct DecideForm {
    #[serde(default)]
    csrf: String,
    change: String,
    /// The payload hash of the change the page drew.
    #[serde(default)]
    hash: String,
    decision: String,
    /// Served remotely: the passkey ceremony and its assertion (JSON) for an approval.
    #[serde(default)]
    ceremony: String,
    #[serde(default)]
    assertion: String,
}

impl HasCsrf for DecideForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn decide(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<DecideForm>,
) -> Response {
    // A decision, like an approval's: counted against the owner's request rate.
    if let Some(refused) = web.owner_rate_refused(&login, "/memory").await {
        return refused;
    }
    if form.decision == "approve" {
        if form.hash.is_empty() {
            return web
                .outcome_page(
                    &login,
                    "Refused",
                    false,
                    "the form names no payload hash, so it cannot say what you approved\nhelp: reload the memory page",
                    "/memory",
                )
                .await;
        }
        // Served remotely, applying is a passkey assertion bound to this change and the
        // hash of what the page drew (nothing to check on loopback).
        let subject = approval_subject(&form.change);
        let signed = super::remote::Signed {
            subject: &subject,
            hash: &form.hash,
            decision: "approve",
            scope: "",
            duration: "",
            ceremony: &form.ceremony,
            assertion: &form.assertion,
        };
        if let Some(refused) = super::remote::signed_or_refused(
            &web,
            &login,
            signed,
            "applying a memory change",
            "/memory",
        )
        .await
        {
            return refused;
        }
    }
    let who = Decider::web(&login.id);
    let home = web.host.home.clone();
    let done = tokio::task::spawn_blocking(move || {
        let act = match form.decision.as_str() {
            "approve" => MemoryAct::Approve {
                change: form.change,
                hash: Some(form.hash),
            },
            "reject" => MemoryAct::Reject {
                change: form.change,
            },
            other => anyhow::bail!("unknown decision {other:?}"),
        };
        service::act_as(&home, &act, &who)
    })
    .await;
    let (ok, message) = match done {
        Ok(Ok(service::MemoryActed::Approved { change, now })) => (
            true,
            format!(
                "Applied {change}: {} is now at version {}.",
                now.record_id, now.version
            ),
        ),
        Ok(Ok(service::MemoryActed::Rejected { change })) => (true, format!("Rejected {change}.")),
        Ok(Ok(other)) => (true, format!("{other:?}")),
        Ok(Err(e)) => (false, format!("{e:#}")),
        Err(e) => (false, e.to_string()),
    };
    web.outcome_page(
        &login,
        if ok { "Done" } else { "Refused" },
        ok,
        &message,
        "/memory",
    )
    .await
}

#[derive(Debug, Deserialize)]
pub struct RollbackForm {
    #[serde(default)]
    csrf: String,
    id: String,
    /// The version to restore.
    to: i64,
    #[serde(default)]
    hash: String,
    /// Served remotely: the passkey ceremony and its assertion (JSON) for the rollback.
    #[serde(default)]
    ceremony: String,
    #[serde(default)]
    assertion: String,
}

impl HasCsrf for RollbackForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /memory/rollback`: restore a record to an earlier version, as a new version,
/// through the same service as `airlock memory rollback ID --to VERSION`.
pub async fn rollback(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<RollbackForm>,
) -> Response {
    let who = Decider::web(&login.id);
    let home = web.host.home.clone();
    let back = format!("/memory/records/{}", form.id);
    if let Some(refused) = web.owner_rate_refused(&login, &back).await {
        return refused;
    }
    // Served remotely, a rollback is a passkey assertion over the record and the version
    // it restores (nothing to check on loopback). The form's hash must be that one.
    if form.hash != rollback_hash(&form.id, form.to) {
        return web
            .outcome_page(
                &login,
                "Refused",
                false,
                "the form's hash is not the one of this rollback\nhelp: reload the record's page",
                &back,
            )
            .await;
    }
    let subject = rollback_subject(&form.id, form.to);
    let signed = super::remote::Signed {
        subject: &subject,
        hash: &form.hash,
        decision: "rollback",
        scope: "",
        duration: "",
        ceremony: &form.ceremony,
        assertion: &form.assertion,
    };
    if let Some(refused) =
        super::remote::signed_or_refused(&web, &login, signed, "a memory rollback", &back).await
    {
        return refused;
    }
    let done = tokio::task::spawn_blocking(move || {
        service::act_as(
            &home,
            &MemoryAct::Rollback {
                id: form.id,
                to: Some(form.to),
            },
            &who,
        )
    })
    .await;
    let (ok, message) = match done {
        Ok(Ok(service::MemoryActed::RolledBack { now })) => (
            true,
            format!(
                "Rolled back: {} holds version {}'s content again, as version {} ({}).",
                now.record_id, form.to, now.version, now.summary
            ),
        ),
        Ok(Ok(other)) => (true, format!("{other:?}")),
        Ok(Err(e)) => (false, format!("{e:#}")),
        Err(e) => (false, e.to_string()),
    };
    web.outcome_page(
        &login,
        if ok { "Done" } else { "Refused" },
        ok,
        &message,
        &back,
    )
    .await
}

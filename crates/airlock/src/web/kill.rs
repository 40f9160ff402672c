//! The kill switch on every page: one session, or everything. It pulls the same switch as
//! `airlock kill` through the host ([`crate::host::Host::kill`]), recorded as the owner's
//! act through the web.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;

use super::guard::{Checked, HasCsrf};
use super::WebState;
use crate::service::decider::Decider;
use crate::service::kill::KillInput;

#[derive(Debug, Deserialize)]
pub struct KillForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    all: Option<String>,
}

impl HasCsrf for KillForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn kill(
    State(web): State<Arc<WebState>>,
    Checked(login, form): Checked<KillForm>,
) -> Response {
    let all = form.all.as_deref() == Some("true");
    let input = KillInput {
        session: if all {
            None
        } else {
            form.session.filter(|s| !s.is_empty())
        },
        all,
    };
    tracing::warn!(login = %login.id, session = ?input.session, all, "web: kill switch");
    let who = Decider::web(&login.id);
    let host = web.host.clone();
    // The kill switch is not rate-limited: stopping must always be possible.
    let done = tokio::task::spawn_blocking(move || host.kill(&input, &who)).await;
    let (ok, message) = match done {
        Ok(Ok(r)) => {
            let mut m = match r.grants_revoked {
                Some(n) => format!("Stopped everything: {n} standing grant(s) revoked.\n"),
                None => String::new(),
            };
            if r.killed.is_empty() {
                m.push_str("Nothing was running.");
            }
            for k in &r.killed {
                m.push_str(&format!(
                    "Killed session {}: {} approval(s) cancelled, {} grant(s) revoked, {} sandbox(es) stopped.\n",
                    k.id,
                    k.cancelled_approvals,
                    k.revoked_grants,
                    k.helpers_killed.len()
                ));
                if !k.helpers_left.is_empty() {
                    m.push_str(&format!(
                        "WARNING: {} sandbox process(es) of {} outlived the kill: {:?}\n",
                        k.helpers_left.len(),
                        k.id,
                        k.helpers_left
                    ));
                }
            }
            (true, m)
        }
        Ok(Err(e)) => (false, format!("{e:#}")),
        Err(e) => (false, e.to_string()),
    };
    web.outcome_page(
        &login,
        if ok { "Killed" } else { "Kill refused" },
        ok,
        &message,
        "/",
    )
    .await
}

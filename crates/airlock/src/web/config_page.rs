//! Settings, read-only: the policy profile and the policies loaded, the egress rules, the
//! names of the secrets with the hosts they are bound to (never a value), and the host's
//! limits. Each is changed at the command line, on the record.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use maud::html;

use super::guard::LoggedIn;
use super::layout;
use super::untrusted;
use super::WebState;

pub async fn page(State(web): State<Arc<WebState>>, LoggedIn(login): LoggedIn) -> Response {
    let cfg = web.host.warm.config();
    let policies = web.host.warm.policy_status();
    let config_dir = web.host.home.config.clone();
    let read = tokio::task::spawn_blocking(move || {
        let rules = airlock_proxy::NetRules::load(&config_dir)
            .map_err(|e| anyhow::anyhow!("cannot read the net rules: {e}"));
        let secrets = airlock_proxy::secrets::store::SecretStore::new(&config_dir)
            .list()
            .map_err(|e| anyhow::anyhow!("cannot list the secrets: {e}"));
        (rules, secrets)
    })
    .await;
    let chrome = web.chrome().await;
    let body = html! {
        p { "Read-only here; change these with " code { "airlock net" } ", " code { "airlock secret" } " and the files in the config dir." }
        h2 { "Policy" }
        p { "Profile: " code { (untrusted::line(&cfg.policy.profile)) } }
        ul {
            @for p in &policies {
                li {
                    code { (untrusted::line(&p.profile)) } " " code { (untrusted::line(&p.hash)) }
                    @if let Some(e) = &p.refused_edit { br; span class="error" { "Last edit refused: " (untrusted::line(e)) } }
                }
            }
        }
        @match &read {
            Ok((rules, secrets)) => {
                h2 { "Egress rules" }
                @match rules {
                    Ok(r) if r.rules.is_empty() && r.allow_private.is_empty() => p id="no-net-rules" { "None: every request is denied." },
                    Ok(r) => ul class="net-rules" {
                        @for rule in &r.rules { li { code { "net.rule." (rule.id) } " " (untrusted::line(&rule.describe())) } }
                        @for a in &r.allow_private { li { "allow-private " code { (a) } } }
                    },
                    Err(e) => p class="error" { (untrusted::line(&format!("{e:#}"))) },
                }
                h2 { "Secrets" }
                @match secrets {
                    Ok(list) if list.is_empty() => p { "None." },
                    Ok(list) => table class="secrets" {
                        thead { tr { th { "Name" } th { "Bound to" } th { "Sent as" } } }
                        tbody {
                            @for s in list {
                                tr {
                                    td { code { (untrusted::line(&s.name)) } }
                                    td { (untrusted::line(&s.binding.display())) }
                                    td { (untrusted::line(&s.header.display())) }
                                }
                            }
                        }
                    },
                    Err(e) => p class="error" { (untrusted::line(&format!("{e:#}"))) },
                }
            }
            Err(e) => p class="error" { (e.to_string()) },
        }
        h2 { "Host" }
        ul {
            li { "Sandboxes at once: " (cfg.host.max_sandboxes) ", queued: " (cfg.host.max_queued) }
            li { "Sessions at once: " (cfg.host.max_sessions) }
            li { "Requests per principal a minute: " (cfg.host.requests_per_minute) }
            li { "Approval requests per session at once: " (cfg.approvals.max_pending_per_session) }
        }
    };
    Html(layout::page("Settings", &login, &chrome, body).into_string()).into_response()
}

//! The frame of every page: the navigation, the kill switch (one session, or
//! everything), and the logout button. Every form in it carries the login's CSRF token.

use maud::{html, Markup, DOCTYPE};

use super::auth::WebLogin;
use super::untrusted;

/// What the frame shows besides the page: the sessions the kill switch can name.
#[derive(Debug, Clone, Default)]
pub struct Chrome {
    /// Active sessions in the store, and the host's live ones, each once.
    pub sessions: Vec<String>,
    pub approvals_pending: usize,
}

/// A whole page: `title`, then `body`, inside the frame.
pub fn page(title: &str, login: &WebLogin, chrome: &Chrome, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Airlock — " (title) }
                link rel="stylesheet" href="/static/web.css";
                script type="module" src="/static/web.js" {}
            }
            body {
                header {
                    nav {
                        a href="/" { "Sessions" }
                        a href="/approvals" id="nav-approvals" {
                            "Approvals"
                            @if chrome.approvals_pending > 0 {
                                " " span class="badge" { (chrome.approvals_pending) }
                            }
                        }
                        a href="/audit" { "Audit" }
                        a href="/budgets" { "Budgets" }
                        a href="/memory" { "Memory" }
                        a href="/settings" { "Settings" }
                        form method="post" action="/logout" class="inline" {
                            (csrf(login))
                            button type="submit" class="link" { "Log out" }
                        }
                    }
                    (kill_switch(login, chrome))
                }
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The CSRF field every form carries.
pub fn csrf(login: &WebLogin) -> Markup {
    html! { input type="hidden" name="csrf" value=(login.csrf); }
}

/// Stop one session, or everything.
fn kill_switch(login: &WebLogin, chrome: &Chrome) -> Markup {
    html! {
        div class="kill" id="kill-switch" {
            @if !chrome.sessions.is_empty() {
                form method="post" action="/kill" class="inline" {
                    (csrf(login))
                    label for="kill-session" { "Kill switch: " }
                    select name="session" id="kill-session" {
                        @for s in &chrome.sessions {
                            option value=(s) { (s) }
                        }
                    }
                    button type="submit" class="danger" id="kill-one" { "Kill session" }
                }
            }
            form method="post" action="/kill" class="inline" {
                (csrf(login))
                input type="hidden" name="all" value="true";
                button type="submit" class="danger" id="kill-all" { "Stop everything" }
            }
        }
    }
}

/// A page for someone not logged in: how to get a link. No frame, no forms.
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Airlock — " (title) }
                link rel="stylesheet" href="/static/web.css";
            }
            body {
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// A page for someone not logged in that needs the page's script (a passkey's button).
pub fn with_script(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Airlock — " (title) }
                link rel="stylesheet" href="/static/web.css";
                script type="module" src="/static/web.js" {}
            }
            body {
                main {
                    h1 { (title) }
                    (body)
                }
            }
        }
    }
}

/// The result of a change: what happened, and the way back.
pub fn outcome(ok: bool, message: &str, back: &str) -> Markup {
    html! {
        p class=(if ok { "ok" } else { "error" }) id="outcome" {
            (untrusted::block(message))
        }
        p { a href=(back) { "Back" } }
    }
}

//! Answering approval requests at the terminal that runs the session (`airlock chat`,
//! `airlock demo`), while the agent loop waits for them in the approvals queue.
//!
//! The loop holds an *ask* as a request in the store and polls it. [`InlineApprovals`]
//! watches the same queue for this session's pending requests, shows each one to an
//! [`Approver`], and records the answer exactly as `airlock approvals approve|deny` does:
//! in the store, bound to the payload hash the operator was shown, and in the audit log
//! with who decided. The person at the terminal is the local operator, the principal the
//! approvals queue trusts.

use std::collections::HashSet;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;

use airlock_audit::{AuditEvent, AuditLog};
use airlock_store::{
    ApprovalDecisions, ApprovalPreview, ApprovalRequest, ApprovalRequests, ApprovalStatus,
    ApproveRequest, Timestamp,
};

use airlock_core::terminal_text::escape_line;

use crate::home::Home;
use crate::service::approvals::open_store;
use crate::service::caller::{ClientLines, Notices};

/// How often the queue is read.
const POLL: Duration = Duration::from_millis(100);

/// The operator's answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Approve,
    /// Approved by a chat channel's admin, where the policy that held the action lets
    /// admins answer it (`@approvers("admin")`); the Gate checks that again.
    ApproveAs(airlock_core::Principal),
    /// Denied by a chat channel's admin who may answer it (as for [`Answer::ApproveAs`]).
    DenyAs(airlock_core::Principal, String),
    Deny {
        reason: String,
    },
    /// The request stopped waiting before an answer came (the session was killed, it was
    /// decided elsewhere, or the watcher is stopping): nothing is recorded.
    Withdrawn,
}

/// Whoever answers: a person at the terminal, or a fixed answer given on the command line.
pub trait Approver: Send {
    /// Answer `request`. Called on the watcher's thread while the loop waits. `waiting`
    /// says whether the request still waits for this answer; an approver that takes time
    /// asks it now and then and gives [`Answer::Withdrawn`] once it does not.
    fn answer(&mut self, request: &ApprovalRequest, waiting: &dyn Fn() -> bool) -> Answer;
    /// How the answer was given, for the audit record (`terminal`, `command line`).
    fn via(&self) -> &'static str;
}

/// A request this session answered inline, and how.
#[derive(Debug, Clone)]
pub struct Answered {
    pub id: String,
    pub approved: bool,
    /// Set when the answer could not be recorded (for example, the request expired first).
    pub error: Option<String>,
}

/// Watches the approvals queue of one session until stopped.
pub struct InlineApprovals {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Vec<Answered>>>,
}

impl InlineApprovals {
    /// Start watching `session_id`'s requests; answers are recorded in `audit`.
    pub fn start(
        home: &Home,
        session_id: &str,
        audit: Arc<Mutex<AuditLog>>,
        mut approver: Box<dyn Approver>,
    ) -> anyhow::Result<InlineApprovals> {
        let store = open_store(home)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let session = session_id.to_string();
        let handle = std::thread::Builder::new()
            .name("airlock-inline-approvals".into())
            .spawn(move || {
                let mut seen = HashSet::new();
                let mut answered = Vec::new();
                while !stop2.load(Ordering::Acquire) {
                    let pending = match store.pending_approvals(Timestamp::now()) {
                        Ok(l) => l.items,
                        Err(e) => {
                            eprintln!("warning: cannot read the approvals queue: {e}");
                            Vec::new()
                        }
                    };
                    for req in pending {
                        if req.session_id != session || !seen.insert(req.id.clone()) {
                            continue;
                        }
                        // Still pending and still watched: a kill cancels the request, and
                        // the prompt for it must end rather than outlive the turn. A read
                        // that fails otherwise (a busy database) proves nothing: keep asking.
                        let waiting = || {
                            !stop2.load(Ordering::Acquire)
                                && match store.get_approval(&req.id) {
                                    Ok(r) => r.status == ApprovalStatus::Pending,
                                    Err(airlock_store::StoreError::NotFound { .. }) => false,
                                    Err(_) => true,
                                }
                        };
                        if !waiting() {
                            continue;
                        }
                        let answer = approver.answer(&req, &waiting);
                        if matches!(answer, Answer::Withdrawn) {
                            continue;
                        }
                        let via = approver.via();
                        answered.push(record(&store, &audit, &req, &answer, via));
                    }
                    std::thread::sleep(POLL);
                }
                answered
            })?;
        Ok(InlineApprovals {
            stop,
            handle: Some(handle),
        })
    }

    /// Stop watching; returns what was answered.
    pub fn stop(mut self) -> Vec<Answered> {
        self.stop.store(true, Ordering::Release);
        self.handle
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for InlineApprovals {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Record `answer` for `req` in the store and the audit log, as the approvals CLI does.
fn record(
    store: &airlock_store::SqliteStore,
    audit: &Mutex<AuditLog>,
    req: &ApprovalRequest,
    answer: &Answer,
    via: &str,
) -> Answered {
    let now = Timestamp::now();
    let payload: serde_json::Value =
        serde_json::from_str(&req.payload).unwrap_or(serde_json::Value::Null);
    let approver = match answer {
        Answer::ApproveAs(p) | Answer::DenyAs(p, _) => p.clone(),
        _ => airlock_core::Principal::Owner,
    };
    let approver_name = approver.to_string();
    let decided_by = json!({
        "principal": approver_name,
        "via": via,
        "uid": nix::unistd::getuid().as_raw(),
    });
    // The store's decision releases the call that waits for it, which records its use
    // of the answer: the log (this handle, and its directory lock against every other)
    // is held from before the decision until the answer's record is written, so that the
    // use never comes first.
    let mut log = audit.lock().unwrap_or_else(|p| p.into_inner());
    let held = log.holding_lock(|log| {
        decide_and_record(
            store, log, req, answer, approver, decided_by, payload, via, now,
        )
    });
    drop(log);
    let (approved, error) = match held {
        Ok(done) => done,
        Err(e) => (
            false,
            Some(format!(
                "the audit log could not be held for the answer: {e}"
            )),
        ),
    };
    Answered {
        id: req.id.clone(),
        approved,
        error,
    }
}

/// The store's decision on `req` and the answer's audit record, through `log`. Returns
/// whether it approved, and what went wrong.
#[allow(clippy::too_many_arguments)]
fn decide_and_record(
    store: &airlock_store::SqliteStore,
    log: &mut AuditLog,
    req: &ApprovalRequest,
    answer: &Answer,
    approver: airlock_core::Principal,
    decided_by: serde_json::Value,
    payload: serde_json::Value,
    via: &str,
    now: Timestamp,
) -> (bool, Option<String>) {
    let approver_name = approver.to_string();
    let (approved, result, kind, reason) = match answer {
        Answer::Approve | Answer::ApproveAs(_) => (
            true,
            store
                .approve(
                    &req.id,
                    &ApproveRequest {
                        approver: &approver_name,
                        payload_hash: &req.payload_hash,
                        grant: None,
                    },
                    now,
                )
                .map(|_| ()),
            "approval-granted",
            None,
        ),
        Answer::Deny { reason } | Answer::DenyAs(_, reason) => (
            false,
            store
                .deny(&req.id, &approver_name, Some(reason), now)
                .map(|_| ()),
            "approval-denied",
            Some(reason.clone()),
        ),
        Answer::Withdrawn => {
            return (
                false,
                Some("the request was withdrawn before an answer".into()),
            )
        }
    };
    let error = match result {
        Ok(()) => {
            // The owner answered, through the client or channel the approver speaks for
            // (a name that is not a channel's, such as `command line`, is the CLI).
            let who = airlock_core::Attribution {
                principal: approver.clone(),
                via: via.parse().unwrap_or_else(|_| airlock_core::Via::cli()),
                ..crate::service::approvals::operator()
            };
            let ev = AuditEvent::by(kind, req.session_id.as_str(), &who)
                .with_action(payload, req.payload_hash.clone())
                .with_detail(json!({
                    "approval_id": req.id,
                    "decided_by": decided_by,
                    "reason": reason,
                }));
            log.append(ev)
                .err()
                .map(|e| format!("the answer was recorded, but its audit record failed: {e}"))
        }
        Err(e) => Some(e.to_string()),
    };
    (approved, error)
}

/// What the operator is shown: the action, its preview, why it is held, and the hash of
/// the exact payload that runs if approved. Every line is escaped (no terminal control
/// characters from the payload reach the screen).
pub fn describe(req: &ApprovalRequest) -> Vec<String> {
    let mut lines = vec![format!(
        "approval needed ({}): {}",
        escape_line(&req.action_kind),
        escape_line(&req.id)
    )];
    match &req.preview {
        ApprovalPreview::Command { command, cwd } => {
            lines.push(format!("  command: {}", escape_line(command)));
            if !cwd.is_empty() {
                lines.push(format!("  cwd:     {}", escape_line(cwd)));
            }
        }
        ApprovalPreview::Http {
            method,
            url,
            body_preview,
            headers,
        } => {
            lines.push(format!("  {} {}", escape_line(method), escape_line(url)));
            for (name, value) in headers {
                lines.push(format!("  {}: {}", escape_line(name), escape_line(value)));
            }
            if let Some(b) = body_preview {
                lines.push(format!("  body:    {}", escape_line(b)));
            }
        }
        ApprovalPreview::FileDiff { path, diff } => {
            lines.push(format!("  write {}", escape_line(path)));
            lines.extend(
                diff.lines()
                    .take(20)
                    .map(|l| format!("    {}", escape_line(l))),
            );
        }
        ApprovalPreview::Message {
            channel,
            recipient,
            text,
        } => {
            lines.push(format!(
                "  to:      {} (channel {})",
                escape_line(recipient),
                escape_line(channel)
            ));
            lines.push(format!("  text:    {}", escape_line(text)));
        }
        ApprovalPreview::Other { summary } => lines.push(format!("  {}", escape_line(summary))),
    }
    for r in &req.reasons {
        lines.push(format!("  why held: {}", escape_line(r)));
    }
    if !req.policies.is_empty() {
        lines.push(format!(
            "  policy:  {}",
            escape_line(&req.policies.join(", "))
        ));
    }
    lines
}

/// Lines from stdin, read on their own thread so that the chat loop and the approval
/// prompt can share them.
pub struct StdinLines {
    rx: Mutex<Receiver<String>>,
    /// Piped input is echoed after the prompt, so the transcript reads like a session.
    echo: bool,
}

impl StdinLines {
    /// Start reading stdin.
    pub fn start() -> Arc<StdinLines> {
        let (tx, rx) = std::sync::mpsc::channel();
        let _ = std::thread::Builder::new()
            .name("airlock-stdin".into())
            .spawn(move || {
                for line in std::io::stdin().lock().lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        use std::io::IsTerminal;
        Arc::new(StdinLines {
            rx: Mutex::new(rx),
            echo: !std::io::stdin().is_terminal(),
        })
    }

    /// The next line, or `None` at end of input.
    pub fn next_line(&self) -> Option<String> {
        match self.next_line_before(None) {
            Line::Text(l) => Some(l),
            Line::End | Line::TimedOut | Line::Gone => None,
        }
    }

    /// The next line, waiting at most until `deadline`.
    pub fn next_line_before(&self, deadline: Option<Instant>) -> Line {
        let rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) => left,
                    None => return Line::TimedOut,
                },
                None => Duration::from_secs(3600),
            };
            match rx.recv_timeout(wait) {
                Ok(l) => {
                    if self.echo {
                        say(&escape_line(&l));
                    }
                    return Line::Text(l);
                }
                Err(RecvTimeoutError::Timeout) if deadline.is_some() => return Line::TimedOut,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => return Line::End,
            }
        }
    }
}

pub use crate::service::caller::Line;

/// Where a person's lines come from: this process's stdin, or a client attached to a
/// session in the host ([`ClientLines`]).
pub trait Lines: Send + Sync {
    /// The next line, waiting at most until `deadline`.
    fn next_line_before(&self, deadline: Option<Instant>) -> Line;
}

impl Lines for StdinLines {
    fn next_line_before(&self, deadline: Option<Instant>) -> Line {
        StdinLines::next_line_before(self, deadline)
    }
}

impl Lines for ClientLines {
    fn next_line_before(&self, deadline: Option<Instant>) -> Line {
        ClientLines::next_line_before(self, deadline)
    }
}

/// Asks the person at the terminal: `y` approves, `n` denies, `d` shows the exact payload.
/// End of input denies.
pub struct TerminalApprover {
    pub lines: Arc<dyn Lines>,
    /// Where the prompt is shown.
    pub out: Notices,
}

impl Approver for TerminalApprover {
    fn answer(&mut self, req: &ApprovalRequest, waiting: &dyn Fn() -> bool) -> Answer {
        let say = |l: &str| self.out.line(l);
        for l in describe(req) {
            say(&l);
        }
        loop {
            self.out.write("approve? [y]es / [n]o / [d]etails: ");
            // Wait no longer than the request lives: the loop stops waiting then, and a late
            // line must not be taken for an answer to something else.
            let deadline = Instant::now()
                + Duration::from_millis(
                    (req.expires_at.as_unix_ms() - Timestamp::now().as_unix_ms()).max(0) as u64,
                );
            let line = match self.next_line_while(deadline, waiting) {
                None => {
                    say("");
                    say("  (no longer waiting for an answer)");
                    return Answer::Withdrawn;
                }
                Some(Line::Text(l)) => l,
                Some(Line::End) => {
                    return Answer::Deny {
                        reason: "no answer: the terminal input ended".into(),
                    };
                }
                // The client left a session that goes on in the host: the request stays
                // in the queue for another client (`airlock approvals`, or the next one
                // to attach) until it is answered or expires.
                Some(Line::Gone) => {
                    return Answer::Withdrawn;
                }
                Some(Line::TimedOut) => {
                    say("");
                    return Answer::Deny {
                        reason: "no answer before the request expired".into(),
                    };
                }
            };
            match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Answer::Approve,
                "n" | "no" => {
                    return Answer::Deny {
                        reason: "denied at the terminal".into(),
                    }
                }
                "d" | "details" => {
                    say(&format!(
                        "  payload (exact; this is what runs): {}",
                        escape_line(&req.payload)
                    ));
                    say(&format!(
                        "  payload hash: {}",
                        escape_line(&req.payload_hash)
                    ));
                }
                other => say(&format!(
                    "  `{}` is not an answer: type y, n or d",
                    escape_line(other)
                )),
            }
        }
    }

    fn via(&self) -> &'static str {
        "terminal"
    }
}

impl TerminalApprover {
    /// How often a prompt checks that its request still waits.
    const RECHECK: Duration = Duration::from_millis(200);

    /// The next line before `deadline`, or `None` as soon as `waiting` says the request
    /// no longer waits.
    fn next_line_while(&self, deadline: Instant, waiting: &dyn Fn() -> bool) -> Option<Line> {
        loop {
            let slice = (Instant::now() + Self::RECHECK).min(deadline);
            match self.lines.next_line_before(Some(slice)) {
                Line::TimedOut if slice < deadline => {
                    if !waiting() {
                        return None;
                    }
                }
                line => return Some(line),
            }
        }
    }
}

/// One line on stdout. A closed stdout (`airlock chat | head`) must not stop the watcher
/// mid-answer, so write errors are ignored here; the main thread reports them.
fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// A fixed answer for every request (`airlock demo --yes|--no`, or a non-interactive run).
pub struct FixedApprover {
    pub approve: bool,
    pub why: String,
}

impl Approver for FixedApprover {
    fn answer(&mut self, req: &ApprovalRequest, _waiting: &dyn Fn() -> bool) -> Answer {
        for l in describe(req) {
            say(&l);
        }
        if self.approve {
            say(&format!("approve? yes ({})", self.why));
            Answer::Approve
        } else {
            say(&format!("approve? no ({})", self.why));
            Answer::Deny {
                reason: format!("denied: {}", self.why),
            }
        }
    }

    fn via(&self) -> &'static str {
        "command line"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(expires_in_ms: i64) -> ApprovalRequest {
        ApprovalRequest {
            id: "a-1".into(),
            session_id: "s-1".into(),
            action_kind: "message.send".into(),
            payload: "{}".into(),
            payload_hash: "sha256:00".into(),
            preview: ApprovalPreview::Message {
                channel: "terminal".into(),
                recipient: "mallory\u{1b}[2K\rowner".into(),
                text: "line one\nline two\u{202e}".into(),
            },
            reasons: vec!["after untrusted content".into()],
            policies: vec!["default.message.untraced-after-taint".into()],
            created_at: Timestamp::from_unix_ms(0),
            expires_at: Timestamp::from_unix_ms(Timestamp::now().as_unix_ms() + expires_in_ms),
            status: airlock_store::ApprovalStatus::Pending,
            decided_by: None,
            decided_at: None,
            note: None,
        }
    }

    #[test]
    fn what_the_operator_sees_cannot_carry_terminal_controls() {
        let req = request(1000);
        let lines = describe(&req);
        let all = lines.join("\n");
        assert!(!all.contains('\u{1b}') && !all.contains('\r') && !all.contains('\u{202e}'));
        assert!(all.contains("to:      mallory\\u{1b}[2K\\rowner"), "{all}");
        assert!(all.contains("text:    line one\\nline two"), "{all}");
        assert!(all.contains("why held: after untrusted content"), "{all}");
    }

    /// A terminal with no answer coming, and the lines to feed one.
    fn terminal() -> (TerminalApprover, std::sync::mpsc::Sender<String>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = Arc::new(StdinLines {
            rx: Mutex::new(rx),
            echo: false,
        });
        (
            TerminalApprover {
                lines,
                out: Notices::Stdout,
            },
            tx,
        )
    }

    /// A kill (or any other end of the wait) ends the prompt at once, without an answer,
    /// instead of holding the watcher until the request would have expired.
    #[test]
    fn a_prompt_ends_when_its_request_stops_waiting() {
        let (mut approver, _keep_open) = terminal();
        let req = request(60_000);
        let withdrawn_at = Instant::now() + Duration::from_millis(300);
        let started = Instant::now();
        let answer = approver.answer(&req, &|| Instant::now() < withdrawn_at);
        assert!(matches!(answer, Answer::Withdrawn));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_prompt_still_waiting_takes_the_answer_typed() {
        let (mut approver, tx) = terminal();
        let req = request(60_000);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(450));
            let _ = tx.send("y".into());
        });
        assert!(matches!(approver.answer(&req, &|| true), Answer::Approve));
    }
}

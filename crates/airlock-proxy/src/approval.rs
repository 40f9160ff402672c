//! The approval hook: how a request that a rule marks *ask* reaches a human. The binary
//! implements it with its approval channel; tests use [`ChannelApprovals`].

use airlock_core::action::{HeaderField, NetRequestAction};
use airlock_core::gate::Approval;
use tokio::sync::{mpsc, oneshot};

use crate::net::BoxFuture;

/// What an approver is shown: the exact payload and its hash.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    pub session: String,
    pub action: NetRequestAction,
    /// `sha256:` hash the approval must name.
    pub action_hash: String,
    /// Why the policy asks.
    pub reasons: Vec<String>,
    pub policies: Vec<String>,
    /// The start of the request body as text (lossy UTF-8, at most
    /// [`BODY_PREVIEW_BYTES`] bytes), for the approver; `None` without a body. The body
    /// comes from the sandbox, which never holds a secret's real value.
    pub body_preview: Option<String>,
}

/// How much of a held request's body an approver is shown.
pub const BODY_PREVIEW_BYTES: usize = 2048;

/// The approver's view of `body`: its start, and how much more there is.
pub fn body_preview(body: &[u8]) -> Option<String> {
    if body.is_empty() {
        return None;
    }
    let shown = &body[..body.len().min(BODY_PREVIEW_BYTES)];
    let mut text = String::from_utf8_lossy(shown).into_owned();
    if body.len() > shown.len() {
        text.push_str(&format!("… ({} bytes in all)", body.len()));
    }
    Some(text)
}

/// How much of each header value an approver is shown.
pub const HEADER_PREVIEW_CHARS: usize = 200;

/// The approver's view of a request's headers: each name with the start of its value (a
/// header carries data as a URL does), and which secret a placeholder stands for.
pub fn header_preview(headers: &[HeaderField]) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|h| {
            let mut shown: String = h.value.chars().take(HEADER_PREVIEW_CHARS).collect();
            if shown.len() < h.value.len() {
                shown.push_str(&format!("… ({} bytes in all)", h.value.len()));
            }
            if let Some(secret) = &h.secret {
                shown.push_str(&format!(" (placeholder of secret {secret})"));
            }
            (h.name.clone(), shown)
        })
        .collect()
}

/// Delivers approval requests. Resolve to `None` to refuse; the proxy also gives up at its
/// ask timeout, which denies.
pub trait ApprovalHook: Send + Sync {
    fn request(&self, req: ApprovalRequest) -> BoxFuture<'static, Option<Approval>>;
}

/// No approver: every ask is denied at once.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoApprovals;

impl ApprovalHook for NoApprovals {
    fn request(&self, _req: ApprovalRequest) -> BoxFuture<'static, Option<Approval>> {
        Box::pin(async { None })
    }
}

/// One pending approval as [`ChannelApprovals`] delivers it: answer through `reply`
/// (dropping it refuses).
#[derive(Debug)]
pub struct PendingApproval {
    pub request: ApprovalRequest,
    pub reply: oneshot::Sender<Approval>,
}

/// Approval requests sent over a channel to whoever approves.
#[derive(Debug, Clone)]
pub struct ChannelApprovals {
    tx: mpsc::Sender<PendingApproval>,
}

impl ChannelApprovals {
    /// The hook and the receiving end of its requests.
    pub fn new(buffer: usize) -> (ChannelApprovals, mpsc::Receiver<PendingApproval>) {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        (ChannelApprovals { tx }, rx)
    }
}

impl ApprovalHook for ChannelApprovals {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'static, Option<Approval>> {
        let tx = self.tx.clone();
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            tx.send(PendingApproval { request, reply }).await.ok()?;
            rx.await.ok()
        })
    }
}

#[cfg(test)]
mod body_preview_tests {
    use super::*;

    #[test]
    fn a_long_header_value_is_cut_and_says_how_long_it_was() {
        let long = "y".repeat(HEADER_PREVIEW_CHARS + 5);
        let shown = header_preview(&[HeaderField::new("x-d", long.as_str())]);
        assert_eq!(shown[0].0, "x-d");
        assert!(shown[0].1.starts_with(&"y".repeat(HEADER_PREVIEW_CHARS)));
        assert!(shown[0]
            .1
            .ends_with(&format!("({} bytes in all)", long.len())));
    }

    #[test]
    fn a_long_body_is_cut_and_says_how_long_it_was() {
        assert_eq!(body_preview(b""), None);
        assert_eq!(body_preview(b"a=1").as_deref(), Some("a=1"));
        let long = vec![b'x'; BODY_PREVIEW_BYTES + 10];
        let shown = body_preview(&long).unwrap();
        assert!(shown.starts_with(&"x".repeat(BODY_PREVIEW_BYTES)));
        assert!(
            shown.ends_with(&format!("({} bytes in all)", BODY_PREVIEW_BYTES + 10)),
            "{shown}"
        );
    }
}

//! Local stand-ins for the platforms, for tests: each speaks its platform's real wire
//! format (HTTP JSON, and for Slack and Discord the WebSocket handshakes, heartbeats and
//! reconnects) on a loopback port, and keeps a log of what the adapter did.

pub mod discord;
pub mod slack;
pub mod telegram;
pub mod tls;

pub use telegram::FakeTelegram;

use serde_json::Value;

/// One field of a `multipart/form-data` body: its name, file name and bytes.
pub(crate) struct FormField {
    pub name: String,
    pub file_name: Option<String>,
    pub bytes: Vec<u8>,
}

/// The fields of a `multipart/form-data` request body, or `None` when it is not one (or
/// is malformed), as a platform would refuse it.
pub(crate) async fn form_fields(
    headers: &axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> Option<Vec<FormField>> {
    use axum::extract::FromRequest;
    let content_type = headers.get(axum::http::header::CONTENT_TYPE)?.clone();
    let request = axum::http::Request::builder()
        .header(axum::http::header::CONTENT_TYPE, content_type)
        .body(axum::body::Body::from(body))
        .ok()?;
    let mut form = axum::extract::Multipart::from_request(request, &())
        .await
        .ok()?;
    let mut fields = Vec::new();
    while let Some(field) = form.next_field().await.ok()? {
        let name = field.name()?.to_string();
        let file_name = field.file_name().map(str::to_string);
        let bytes = field.bytes().await.ok()?.to_vec();
        fields.push(FormField {
            name,
            file_name,
            bytes,
        });
    }
    Some(fields)
}

/// Wait up to a minute for a call in `calls()` that `matches` (by its method or route)
/// and whose body satisfies `pred`: its body. Panics with every call listed otherwise.
pub(crate) fn wait_for_call(
    what: &str,
    calls: impl Fn() -> Vec<(String, Value)>,
    matches: impl Fn(&str) -> bool,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let all = calls();
        if let Some((_, b)) = all.iter().find(|(m, b)| matches(m) && pred(b)) {
            return b.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {what} call as wanted; the calls were: {all:#?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

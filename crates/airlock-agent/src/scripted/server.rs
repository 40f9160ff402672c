//! The scripted model's HTTP server: accepts both APIs on 127.0.0.1, records every request,
//! and answers each with the next step of the script.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::encode;
use super::script::{Fault, Reply, Step, StreamCut};
use crate::provider::{ProviderConfig, ProviderKind};

/// Header on every scripted response, so a captured exchange cannot pass for a real model's.
pub const SCRIPTED_HEADER: &str = "x-airlock-scripted-model";

/// Largest request body the server accepts (far above any test conversation).
const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;

type Body = BoxBody<Bytes, std::io::Error>;

/// Which API a request was addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `…/v1/messages`.
    Anthropic,
    /// `…/chat/completions`.
    OpenAi,
}

/// A request as the scripted server received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// The API it was addressed to (`None` for an unknown path).
    pub protocol: Option<Protocol>,
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Headers, names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The raw body.
    pub body: Vec<u8>,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON, if it is.
    pub fn json(&self) -> Option<Value> {
        serde_json::from_slice(&self.body).ok()
    }

    /// Whether the request asked for a streamed answer.
    pub fn wants_stream(&self) -> bool {
        self.json()
            .and_then(|v| v.get("stream").and_then(Value::as_bool))
            .unwrap_or(false)
    }
}

#[derive(Default)]
struct State {
    script: VecDeque<Step>,
    /// Scripts of their own for conversations whose first user message holds a marker
    /// (see [`ScriptedModel::route`]), checked in the order they were added.
    routes: Vec<(String, VecDeque<Step>)>,
    requests: Vec<RecordedRequest>,
    turns: usize,
}

/// A **scripted** language model: a real HTTP server on 127.0.0.1 that speaks the Anthropic
/// Messages API and the OpenAI Chat Completions API (streamed and not) and answers each
/// request with the next step of a fixed script. It is not a language model; it stands in for
/// one in tests and in `airlock demo`.
///
/// The server stops when this value is dropped.
pub struct ScriptedModel {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    accept_task: JoinHandle<()>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedModel")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl ScriptedModel {
    /// Starts the server on an ephemeral loopback port. Needs a tokio runtime.
    pub async fn start(script: impl IntoIterator<Item = Step>) -> std::io::Result<ScriptedModel> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            script: script.into_iter().collect(),
            ..State::default()
        }));
        let shared = state.clone();
        let accept_task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = shared.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    // A client that hangs up mid-answer is an expected event in fault tests.
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(ScriptedModel {
            addr,
            state,
            accept_task,
        })
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to configure for `kind` (the OpenAI one includes `/v1`).
    pub fn base_url(&self, kind: ProviderKind) -> String {
        match kind {
            ProviderKind::Anthropic => format!("http://{}", self.addr),
            ProviderKind::Openai => format!("http://{}/v1", self.addr),
        }
    }

    /// A provider configuration pointing at this server, with short timeouts and retry
    /// delays suited to tests. No API key is set.
    pub fn config(&self, kind: ProviderKind, stream: bool) -> ProviderConfig {
        let mut config = ProviderConfig::new(kind, encode::SCRIPTED_MODEL_NAME);
        config.base_url = self.base_url(kind);
        config.stream = stream;
        config.timeout = Duration::from_secs(10);
        config.retry.base_delay = Duration::from_millis(10);
        config.retry.max_delay = Duration::from_millis(50);
        config.retry.max_retry_after = Duration::from_secs(5);
        config
    }

    /// Appends steps to the script.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        lock(&self.state).script.extend(steps);
    }

    /// Answers every request whose first user message contains `marker` from `steps`
    /// instead of the main script. Several conversations sharing one server at once (a
    /// session and the sub-agents it started) each get their own script this way, however
    /// their requests interleave.
    pub fn route(&self, marker: impl Into<String>, steps: impl IntoIterator<Item = Step>) {
        let marker = marker.into();
        let mut s = lock(&self.state);
        match s.routes.iter_mut().find(|(m, _)| *m == marker) {
            Some((_, script)) => script.extend(steps),
            None => s.routes.push((marker, steps.into_iter().collect())),
        }
    }

    /// Steps not yet played, in the main script and every route.
    pub fn remaining(&self) -> usize {
        let s = lock(&self.state);
        s.script.len() + s.routes.iter().map(|(_, r)| r.len()).sum::<usize>()
    }

    /// Every request received so far, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic elsewhere while holding the lock leaves plain data behind; keep serving it.
    state.lock().unwrap_or_else(|e| e.into_inner())
}

async fn handle(
    state: Arc<Mutex<State>>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let protocol = if path.ends_with("/v1/messages") {
        Some(Protocol::Anthropic)
    } else if path.ends_with("/chat/completions") {
        Some(Protocol::OpenAi)
    } else {
        None
    };
    let body = match http_body_util::Limited::new(body, MAX_REQUEST_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes().to_vec(),
        Err(_) => {
            return Ok(plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "request body too large",
            ))
        }
    };
    let recorded = RecordedRequest {
        protocol,
        method: parts.method.to_string(),
        path: path.clone(),
        headers: parts
            .headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
    };
    let stream = recorded.wants_stream();
    let include_usage = recorded
        .json()
        .and_then(|v| {
            v.pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
        })
        .unwrap_or(false);
    let (step, turn) = {
        let mut s = lock(&state);
        let first_user = recorded
            .json()
            .map(|v| first_user_text(&v))
            .unwrap_or_default();
        s.requests.push(recorded);
        s.turns += 1;
        let route = s
            .routes
            .iter_mut()
            .find(|(marker, _)| first_user.contains(marker.as_str()));
        let step = match route {
            Some((_, script)) => script.pop_front(),
            None => s.script.pop_front(),
        };
        (step, s.turns)
    };
    let Some(protocol) = protocol else {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "the scripted model serves POST /v1/messages and POST /v1/chat/completions",
        ));
    };
    let anthropic = protocol == Protocol::Anthropic;
    let Some(step) = step else {
        return Ok(json_response(
            StatusCode::BAD_REQUEST,
            &encode::error_body(
                anthropic,
                400,
                "the scripted model has no turns left in its script",
            ),
        ));
    };
    let ctx = Ctx {
        anthropic,
        stream,
        include_usage,
        turn,
    };
    Ok(play(ctx, step).await)
}

/// The text of the first user message of a request in either wire format: a string, or
/// the text blocks of a content array.
fn first_user_text(request: &Value) -> String {
    let Some(messages) = request.get("messages").and_then(Value::as_array) else {
        return String::new();
    };
    let Some(first) = messages
        .iter()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return String::new();
    };
    match first.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[derive(Clone, Copy)]
struct Ctx {
    anthropic: bool,
    stream: bool,
    include_usage: bool,
    turn: usize,
}

async fn play(ctx: Ctx, mut step: Step) -> Response<Body> {
    // `Slow` may wrap another step; unwrap iteratively.
    loop {
        match step {
            Step::Fault(Fault::Slow { delay, then }) => {
                tokio::time::sleep(delay).await;
                step = *then;
            }
            Step::Reply(reply) => return reply_response(ctx, &reply, None),
            Step::Fault(Fault::Truncated {
                reply,
                after_events,
                cut,
            }) => return reply_response(ctx, &reply, Some((after_events, cut))),
            Step::Fault(Fault::Garbage(bytes)) => {
                let content_type = if ctx.stream {
                    "text/event-stream"
                } else {
                    "application/json"
                };
                return respond(StatusCode::OK, content_type, full(bytes), None);
            }
            Step::Fault(Fault::Status {
                status,
                message,
                retry_after,
            }) => {
                let code =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = encode::error_body(ctx.anthropic, status, &message);
                return respond(
                    code,
                    "application/json",
                    full(body.to_string().into_bytes()),
                    retry_after,
                );
            }
        }
    }
}

fn reply_response(ctx: Ctx, reply: &Reply, cut: Option<(usize, StreamCut)>) -> Response<Body> {
    if !ctx.stream {
        let body = if ctx.anthropic {
            encode::anthropic_body(reply, ctx.turn)
        } else {
            encode::openai_body(reply, ctx.turn)
        };
        let mut bytes = body.to_string().into_bytes();
        return match cut {
            None => respond(StatusCode::OK, "application/json", full(bytes), None),
            Some((n, how)) => {
                bytes.truncate(n);
                let body = stream_body(vec![bytes], how);
                respond(StatusCode::OK, "application/json", body, None)
            }
        };
    }
    let mut events = if ctx.anthropic {
        encode::anthropic_events(reply, ctx.turn)
    } else {
        encode::openai_events(reply, ctx.turn, ctx.include_usage)
    };
    let how = match cut {
        Some((n, how)) => {
            events.truncate(n);
            how
        }
        None => StreamCut::Close,
    };
    let chunks = events.into_iter().map(String::into_bytes).collect();
    respond(
        StatusCode::OK,
        "text/event-stream",
        stream_body(chunks, how),
        None,
    )
}

/// A chunked body sending each element as its own chunk, then ending as `how` says.
fn stream_body(chunks: Vec<Vec<u8>>, how: StreamCut) -> Body {
    let (tx, rx) = mpsc::channel::<Result<Frame<Bytes>, std::io::Error>>(4);
    tokio::spawn(async move {
        for chunk in chunks {
            if tx.send(Ok(Frame::data(Bytes::from(chunk)))).await.is_err() {
                return;
            }
            // Separate writes, so the client really receives the events piecewise.
            tokio::task::yield_now().await;
        }
        match how {
            StreamCut::Close => {}
            StreamCut::Abort => {
                let _ = tx
                    .send(Err(std::io::Error::other("scripted connection abort")))
                    .await;
            }
            StreamCut::Hang => {
                // Hold the body open until the client gives up.
                tx.closed().await;
            }
        }
    });
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|frame| (frame, rx))
    });
    BodyExt::boxed(StreamBody::new(frames))
}

fn full(bytes: Vec<u8>) -> Body {
    Full::new(Bytes::from(bytes))
        .map_err(|never| match never {})
        .boxed()
}

fn respond(
    status: StatusCode,
    content_type: &str,
    body: Body,
    retry_after: Option<String>,
) -> Response<Body> {
    let mut builder = Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(SCRIPTED_HEADER, "true");
    if let Some(r) = retry_after {
        builder = builder.header(header::RETRY_AFTER, r);
    }
    builder
        .body(body)
        .unwrap_or_else(|_| Response::new(full(b"scripted model: bad response".to_vec())))
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    respond(
        status,
        "application/json",
        full(body.to_string().into_bytes()),
        None,
    )
}

fn plain(status: StatusCode, text: &str) -> Response<Body> {
    respond(status, "text/plain", full(text.as_bytes().to_vec()), None)
}

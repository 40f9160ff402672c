//! Shared helpers for the provider tests: every test talks to a real scripted server on
//! 127.0.0.1 through the real provider clients.
#![allow(dead_code)]

use airlock_agent::provider::{
    connect, ChatRequest, ChatResponse, Message, ProviderConfig, ProviderError, ProviderKind,
    StreamEvent, ToolDefinition,
};
use airlock_agent::scripted::ScriptedModel;
use serde_json::json;

/// Both protocols, streamed and not.
pub const MODES: [(ProviderKind, bool); 4] = [
    (ProviderKind::Anthropic, false),
    (ProviderKind::Anthropic, true),
    (ProviderKind::Openai, false),
    (ProviderKind::Openai, true),
];

pub fn tools() -> Vec<ToolDefinition> {
    vec![ToolDefinition {
        name: "read_file".into(),
        description: "Read a file from the workspace".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        }),
    }]
}

pub fn request(config: &ProviderConfig, messages: Vec<Message>) -> ChatRequest {
    config.request("You are a careful assistant.", messages, tools())
}

pub fn hello(config: &ProviderConfig) -> ChatRequest {
    request(
        config,
        vec![Message::User {
            text: "hello".into(),
        }],
    )
}

/// Runs one completion against `config`, collecting the streamed events.
pub async fn complete(
    config: &ProviderConfig,
    req: &ChatRequest,
) -> (Result<ChatResponse, ProviderError>, Vec<StreamEvent>) {
    let provider = connect(config).expect("provider builds");
    let mut events = Vec::new();
    let result = provider.complete(req, &mut |e| events.push(e)).await;
    (result, events)
}

/// Starts a scripted model and returns it with a config for `kind`/`stream`.
pub async fn serve(
    steps: Vec<airlock_agent::scripted::Step>,
    kind: ProviderKind,
    stream: bool,
) -> (ScriptedModel, ProviderConfig) {
    let model = ScriptedModel::start(steps).await.expect("server starts");
    let config = model.config(kind, stream);
    (model, config)
}

pub fn label(kind: ProviderKind, stream: bool) -> String {
    format!("{kind} stream={stream}")
}

//! Turns a scripted [`Reply`] into the bytes each real API would send: a JSON body, or a
//! list of server-sent events.

use serde_json::{json, Value};

use super::script::Reply;

/// The model name the scripted server reports, so no transcript mistakes it for a real one.
pub const SCRIPTED_MODEL_NAME: &str = "airlock-scripted-model";

/// Splits `s` into pieces of `n` characters (never inside a UTF-8 sequence).
fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    chars.chunks(n.max(1)).map(|c| c.iter().collect()).collect()
}

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// Anthropic `input`: the arguments object, or — when the script deliberately holds broken
/// JSON — the raw text as a string, which a client must reject.
fn anthropic_input(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

/// A non-streamed Messages API response.
pub(crate) fn anthropic_body(reply: &Reply, turn: usize) -> Value {
    let mut content = Vec::new();
    if !reply.text.is_empty() {
        content.push(json!({"type": "text", "text": reply.text}));
    }
    for call in &reply.tool_calls {
        content.push(json!({
            "type": "tool_use", "id": call.id, "name": call.name,
            "input": anthropic_input(&call.arguments),
        }));
    }
    let mut body = json!({
        "id": format!("msg_scripted_{turn}"),
        "type": "message",
        "role": "assistant",
        "model": SCRIPTED_MODEL_NAME,
        "content": content,
        "stop_reason": reply.wire_stop_reason("end_turn", "tool_use"),
        "stop_sequence": null,
    });
    if !reply.omit_usage {
        body["usage"] =
            json!({"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens});
    }
    body
}

/// A streamed Messages API response, one string per event.
pub(crate) fn anthropic_events(reply: &Reply, turn: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = json!({
        "type": "message_start",
        "message": {
            "id": format!("msg_scripted_{turn}"), "type": "message", "role": "assistant",
            "model": SCRIPTED_MODEL_NAME, "content": [], "stop_reason": null,
        }
    });
    if !reply.omit_usage {
        start["message"]["usage"] = json!({"input_tokens": reply.input_tokens, "output_tokens": 1});
    }
    out.push(sse(Some("message_start"), &start));
    out.push(sse(Some("ping"), &json!({"type": "ping"})));
    let mut index = 0;
    if !reply.text.is_empty() {
        out.push(sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        ));
        for piece in pieces(&reply.text, reply.chunk_chars) {
            out.push(sse(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for call in &reply.tool_calls {
        out.push(sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
        ));
        for piece in pieces(&call.arguments, reply.chunk_chars) {
            out.push(sse(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let mut delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": reply.wire_stop_reason("end_turn", "tool_use"), "stop_sequence": null},
    });
    if !reply.omit_usage {
        delta["usage"] = json!({"output_tokens": reply.output_tokens});
    }
    out.push(sse(Some("message_delta"), &delta));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}

fn openai_call_id(reply: &Reply, id: &str) -> Value {
    if reply.omit_tool_call_ids {
        Value::Null
    } else {
        Value::String(id.to_string())
    }
}

/// A non-streamed chat completion.
pub(crate) fn openai_body(reply: &Reply, turn: usize) -> Value {
    let calls: Vec<Value> = reply
        .tool_calls
        .iter()
        .map(|c| {
            let mut call =
                json!({"type": "function", "function": {"name": c.name, "arguments": c.arguments}});
            if !reply.omit_tool_call_ids {
                call["id"] = json!(c.id);
            }
            call
        })
        .collect();
    let mut message = json!({
        "role": "assistant",
        "content": if reply.text.is_empty() { Value::Null } else { json!(reply.text) },
    });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let mut body = json!({
        "id": format!("chatcmpl-scripted-{turn}"),
        "object": "chat.completion",
        "created": 0,
        "model": SCRIPTED_MODEL_NAME,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.wire_stop_reason("stop", "tool_calls")}],
    });
    if !reply.omit_usage {
        body["usage"] = json!({
            "prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        });
    }
    body
}

/// A streamed chat completion, one string per `data:` line, ending with `[DONE]`. Usage is
/// sent only when the request asked for it with `stream_options.include_usage`.
pub(crate) fn openai_events(reply: &Reply, turn: usize, include_usage: bool) -> Vec<String> {
    let chunk = |choices: Value| {
        json!({
            "id": format!("chatcmpl-scripted-{turn}"), "object": "chat.completion.chunk",
            "created": 0, "model": SCRIPTED_MODEL_NAME, "choices": choices,
        })
    };
    let mut out = vec![sse(
        None,
        &chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
        ),
    )];
    for piece in pieces(&reply.text, reply.chunk_chars) {
        out.push(sse(
            None,
            &chunk(json!([{"index": 0, "delta": {"content": piece}, "finish_reason": null}])),
        ));
    }
    for (i, call) in reply.tool_calls.iter().enumerate() {
        let mut first = json!({"index": i, "type": "function", "function": {"name": call.name, "arguments": ""}});
        let id = openai_call_id(reply, &call.id);
        if !id.is_null() {
            first["id"] = id;
        }
        out.push(sse(
            None,
            &chunk(json!([{"index": 0, "delta": {"tool_calls": [first]}, "finish_reason": null}])),
        ));
        for piece in pieces(&call.arguments, reply.chunk_chars) {
            out.push(sse(
                None,
                &chunk(json!([{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": piece}}]}, "finish_reason": null}])),
            ));
        }
    }
    out.push(sse(
        None,
        &chunk(json!([{"index": 0, "delta": {}, "finish_reason": reply.wire_stop_reason("stop", "tool_calls")}])),
    ));
    if include_usage && !reply.omit_usage {
        let mut last = chunk(json!([]));
        last["usage"] = json!({
            "prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
            "total_tokens": reply.input_tokens + reply.output_tokens,
        });
        out.push(sse(None, &last));
    }
    out.push("data: [DONE]\n\n".to_string());
    out
}

/// An error body shaped like the protocol's own.
pub(crate) fn error_body(anthropic: bool, status: u16, message: &str) -> Value {
    if anthropic {
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        };
        json!({"type": "error", "error": {"type": kind, "message": message}})
    } else {
        let kind = match status {
            401 | 403 => "invalid_api_key",
            404 => "model_not_found",
            429 => "rate_limit_exceeded",
            500..=599 => "server_error",
            _ => "invalid_request_error",
        };
        json!({"error": {"message": message, "type": kind, "param": null, "code": kind}})
    }
}

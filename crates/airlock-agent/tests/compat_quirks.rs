//! Quirks of real servers the clients must tolerate: OpenAI-compatible servers without tool
//! call ids, other finish reasons, no usage, no `[DONE]`, argument objects, content parts;
//! Anthropic block and event types this client does not use.

mod common;

use airlock_agent::provider::{ProviderKind, StopReason, StreamEvent, ToolArguments};
use airlock_agent::scripted::{Fault, Reply, Step};
use common::*;
use serde_json::json;

#[tokio::test]
async fn missing_tool_call_ids_are_synthesized_and_unique() {
    for stream in [false, true] {
        let mut reply = Reply::default()
            .with_tool_call("ignored-1", "read_file", r#"{"path":"a"}"#)
            .with_tool_call("ignored-2", "read_file", r#"{"path":"b"}"#);
        reply.omit_tool_call_ids = true;
        let (_model, config) = serve(
            vec![Step::Reply(reply.clone()), Step::Reply(reply)],
            ProviderKind::Openai,
            stream,
        )
        .await;
        let (first, events) = complete(&config, &hello(&config)).await;
        let first = first.unwrap();
        let second = complete(&config, &hello(&config)).await.0.unwrap();
        let mut ids: Vec<String> = first
            .tool_calls
            .iter()
            .chain(&second.tool_calls)
            .map(|c| c.id.clone())
            .collect();
        assert!(
            ids.iter()
                .all(|id| id.starts_with("call_") && id.len() > 10),
            "{ids:?}"
        );
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), 4, "ids unique across calls and turns");
        let announced: Vec<String> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallStarted { id, .. } => Some(id.clone()),
                _ => None,
            })
            .collect();
        let returned: Vec<String> = first.tool_calls.iter().map(|c| c.id.clone()).collect();
        assert_eq!(
            announced, returned,
            "stream={stream}: streamed ids match the response"
        );
        assert_eq!(
            first.tool_calls[1].arguments.as_json(),
            Some(&json!({"path": "b"}))
        );
    }
}

#[tokio::test]
async fn finish_reason_variants_are_mapped() {
    let cases = [
        ("stop", false, StopReason::EndTurn),
        ("eos", false, StopReason::EndTurn),
        ("length", false, StopReason::MaxTokens),
        ("content_filter", false, StopReason::ContentFilter),
        ("function_call", true, StopReason::ToolUse),
        // Ollama says `stop` even when the turn ends in tool calls.
        ("stop", true, StopReason::ToolUse),
        (
            "weird_new_reason",
            false,
            StopReason::Other("weird_new_reason".into()),
        ),
    ];
    for stream in [false, true] {
        for (wire, with_tool, expected) in &cases {
            let mut reply = Reply::text("t");
            if *with_tool {
                reply = reply.with_tool_call("c", "read_file", "{}");
            }
            reply.stop_reason = Some(wire.to_string());
            let (_model, config) =
                serve(vec![Step::Reply(reply)], ProviderKind::Openai, stream).await;
            let response = complete(&config, &hello(&config)).await.0.unwrap();
            assert_eq!(
                &response.stop_reason, expected,
                "{wire} tool={with_tool} stream={stream}"
            );
        }
    }
    let mut reply = Reply::text("t");
    reply.stop_reason = Some("max_tokens".into());
    let (_model, config) = serve(vec![Step::Reply(reply)], ProviderKind::Anthropic, true).await;
    assert_eq!(
        complete(&config, &hello(&config))
            .await
            .0
            .unwrap()
            .stop_reason,
        StopReason::MaxTokens
    );
}

#[tokio::test]
async fn missing_usage_is_tolerated_and_flagged() {
    for (kind, stream) in MODES {
        let mut reply = Reply::text("no usage here");
        reply.omit_usage = true;
        let (_model, config) = serve(vec![Step::Reply(reply)], kind, stream).await;
        let response = complete(&config, &hello(&config)).await.0.unwrap();
        assert_eq!(response.text, "no usage here");
        assert!(!response.usage_reported, "{}", label(kind, stream));
        assert_eq!(
            response.usage.input_tokens + response.usage.output_tokens,
            0
        );
    }
}

#[tokio::test]
async fn openai_stream_without_done_but_with_a_finish_reason_is_complete() {
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n\
                data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tial\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n";
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(body.into()))],
        ProviderKind::Openai,
        true,
    )
    .await;
    let response = complete(&config, &hello(&config)).await.0.unwrap();
    assert_eq!(response.text, "partial");
    assert_eq!(response.usage.output_tokens, 2);
    // The same without a finish reason is a truncated stream.
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"par\"}}]}\n\n";
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(body.into()))],
        ProviderKind::Openai,
        true,
    )
    .await;
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(
        matches!(
            e,
            airlock_agent::provider::ProviderError::TruncatedStream { .. }
        ),
        "{e:?}"
    );
}

#[tokio::test]
async fn openai_lenient_shapes_are_read() {
    // Arguments as an object, content as parts, no ids, extra fields, tool calls without index.
    let body = json!({
        "object": "chat.completion", "system_fingerprint": "x", "extra": {"a": 1},
        "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "reasoning_content": "thinking…",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "tool_calls": [{"function": {"name": "read_file", "arguments": {"path": "x"}}}]
        }}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 0}}
    });
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(body.to_string().into()))],
        ProviderKind::Openai,
        false,
    )
    .await;
    let response = complete(&config, &hello(&config)).await.0.unwrap();
    assert_eq!(response.text, "ab");
    assert_eq!(
        response.tool_calls[0].arguments,
        ToolArguments::Json {
            value: json!({"path": "x"})
        }
    );
    assert_eq!(response.usage.input_tokens, 3);

    // Streamed tool calls without `index`, name repeated in every fragment.
    let stream = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a1\",\"function\":{\"name\":\"read_file\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n\
                  data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"read_file\",\"arguments\":\"th\\\":1}\"}}]}}]}\n\n\
                  data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"a2\",\"function\":{\"name\":\"list_dir\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n\
                  data: [DONE]\n\n";
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(stream.into()))],
        ProviderKind::Openai,
        true,
    )
    .await;
    let response = complete(&config, &hello(&config)).await.0.unwrap();
    let calls: Vec<(String, String, Option<serde_json::Value>)> = response
        .tool_calls
        .iter()
        .map(|c| (c.id.clone(), c.name.clone(), c.arguments.as_json().cloned()))
        .collect();
    assert_eq!(
        calls,
        vec![
            ("a1".into(), "read_file".into(), Some(json!({"path": 1}))),
            ("a2".into(), "list_dir".into(), Some(json!({}))),
        ]
    );
    assert!(!response.usage_reported);
}

#[tokio::test]
async fn anthropic_unknown_blocks_and_events_are_skipped() {
    let events = [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "x"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "some_future_event", "data": 1}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": "Hi"}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": " there"}}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "noargs", "input": {}}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
        json!({"type": "message_stop"}),
    ];
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
        .collect();
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(body.into()))],
        ProviderKind::Anthropic,
        true,
    )
    .await;
    let response = complete(&config, &hello(&config)).await.0.unwrap();
    assert_eq!(response.text, "Hi there");
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(
        response.tool_calls[0].arguments.as_json(),
        Some(&json!({})),
        "empty partial_json means no arguments"
    );
    assert_eq!(
        response.usage.input_tokens, 100,
        "cached prompt tokens count as input"
    );
    assert_eq!(response.usage.output_tokens, 12);
    assert_eq!(response.stop_reason, StopReason::ToolUse);
}

#[tokio::test]
async fn anthropic_deltas_for_unstarted_blocks_are_malformed_not_a_panic() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{}}\n\n\
                event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":5,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n";
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(body.into()))],
        ProviderKind::Anthropic,
        true,
    )
    .await;
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(
        e.to_string()
            .contains("content block 5, which never started"),
        "{e}"
    );
}

//! Normal turns over both protocols, streamed and not: text, tool calls whose arguments
//! arrive in many fragments, usage, and the exact requests the client sends.

mod common;

use airlock_agent::provider::{
    Message, ProviderKind, StopReason, StreamEvent, ToolArguments, ToolCall, Usage,
};
use airlock_agent::scripted::{Protocol, Reply, Step};
use common::*;
use serde_json::json;

#[tokio::test]
async fn text_turn_streams_deltas_and_reports_usage() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let text = "Hello — the workspace has three files. ünïcödé ✓";
        let (model, config) = serve(
            vec![Step::Reply(Reply::text(text).with_usage(120, 33))],
            kind,
            stream,
        )
        .await;
        let (result, events) = complete(&config, &hello(&config)).await;
        let response = result.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(response.text, text, "{what}");
        assert!(response.tool_calls.is_empty(), "{what}");
        assert_eq!(response.stop_reason, StopReason::EndTurn, "{what}");
        assert_eq!(
            response.usage,
            Usage {
                input_tokens: 120,
                output_tokens: 33
            },
            "{what}"
        );
        assert!(response.usage_reported, "{what}");
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas.concat(), text, "{what}");
        if stream {
            assert!(
                deltas.len() > 5,
                "{what}: expected many deltas, got {}",
                deltas.len()
            );
        } else {
            assert_eq!(deltas.len(), 1, "{what}");
        }
        let requests = model.requests();
        assert_eq!(requests.len(), 1, "{what}");
        assert_eq!(requests[0].wants_stream(), stream, "{what}");
        assert_eq!(
            requests[0].protocol,
            Some(if kind == ProviderKind::Anthropic {
                Protocol::Anthropic
            } else {
                Protocol::OpenAi
            }),
            "{what}"
        );
    }
}

#[tokio::test]
async fn tool_call_arguments_split_across_many_deltas_are_reassembled() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let args =
            r#"{"path": "notes/plan.md", "max_bytes": 4096, "nested": {"a": [1, 2, "x\"y"]}}"#;
        let mut reply = Reply::text("Let me look.")
            .with_tool_call("call_1", "read_file", args)
            .with_tool_call("call_2", "list_dir", "{}");
        reply.chunk_chars = 2;
        let (model, config) = serve(vec![Step::Reply(reply)], kind, stream).await;
        let (result, events) = complete(&config, &hello(&config)).await;
        let response = result.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(response.text, "Let me look.", "{what}");
        assert_eq!(response.stop_reason, StopReason::ToolUse, "{what}");
        assert_eq!(
            response.tool_calls,
            vec![
                ToolCall {
                    id: "call_1".into(),
                    name: "read_file".into(),
                    arguments: ToolArguments::Json {
                        value: serde_json::from_str(args).unwrap()
                    },
                },
                ToolCall {
                    id: "call_2".into(),
                    name: "list_dir".into(),
                    arguments: ToolArguments::Json { value: json!({}) },
                },
            ],
            "{what}"
        );
        let starts: Vec<(usize, String, String)> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallStarted { index, id, name } => {
                    Some((*index, id.clone(), name.clone()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            starts,
            vec![
                (0, "call_1".into(), "read_file".into()),
                (1, "call_2".into(), "list_dir".into())
            ],
            "{what}"
        );
        assert_eq!(model.requests().len(), 1, "{what}");
    }
}

#[tokio::test]
async fn tool_results_and_history_are_sent_in_each_protocols_shape() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let (model, config) = serve(vec![Step::text("done")], kind, stream).await;
        let call = ToolCall {
            id: "call_7".into(),
            name: "read_file".into(),
            arguments: ToolArguments::Json {
                value: json!({"path": "a.txt"}),
            },
        };
        let req = request(
            &config,
            vec![
                Message::User {
                    text: "read a.txt and b.txt".into(),
                },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![call.clone()],
                },
                Message::ToolResult {
                    call_id: "call_7".into(),
                    text: "contents of a".into(),
                    is_error: false,
                },
                Message::ToolResult {
                    call_id: "call_8".into(),
                    text: "denied by policy".into(),
                    is_error: true,
                },
            ],
        );
        let (result, _) = complete(&config, &req).await;
        result.unwrap_or_else(|e| panic!("{what}: {e}"));
        let sent = model.requests()[0].json().expect("JSON body");
        assert_eq!(sent["model"], config.model, "{what}");
        assert_eq!(sent["max_tokens"], config.max_tokens, "{what}");
        match kind {
            ProviderKind::Anthropic => {
                assert_eq!(sent["system"], "You are a careful assistant.", "{what}");
                assert_eq!(
                    sent["tools"][0]["input_schema"]["required"][0], "path",
                    "{what}"
                );
                let messages = sent["messages"].as_array().unwrap();
                // The two tool results are merged into one user turn (roles must alternate).
                assert_eq!(messages.len(), 3, "{what}: {sent}");
                assert_eq!(messages[1]["role"], "assistant");
                assert_eq!(
                    messages[1]["content"][0],
                    json!({"type": "tool_use", "id": "call_7", "name": "read_file", "input": {"path": "a.txt"}})
                );
                assert_eq!(messages[2]["role"], "user");
                assert_eq!(
                    messages[2]["content"][0],
                    json!({"type": "tool_result", "tool_use_id": "call_7", "content": "contents of a", "is_error": false})
                );
                assert_eq!(
                    messages[2]["content"][1],
                    json!({"type": "tool_result", "tool_use_id": "call_8", "content": "denied by policy", "is_error": true})
                );
            }
            ProviderKind::Openai => {
                let messages = sent["messages"].as_array().unwrap();
                assert_eq!(messages.len(), 5, "{what}: {sent}");
                assert_eq!(
                    messages[0],
                    json!({"role": "system", "content": "You are a careful assistant."})
                );
                assert_eq!(messages[2]["content"], serde_json::Value::Null);
                assert_eq!(
                    messages[2]["tool_calls"][0]["function"]["arguments"],
                    r#"{"path":"a.txt"}"#
                );
                assert_eq!(
                    messages[3],
                    json!({"role": "tool", "tool_call_id": "call_7", "content": "contents of a"})
                );
                assert_eq!(
                    messages[4],
                    json!({"role": "tool", "tool_call_id": "call_8", "content": "Error: denied by policy"})
                );
                assert_eq!(
                    sent["tools"][0]["function"]["parameters"]["required"][0],
                    "path"
                );
                if stream {
                    assert_eq!(sent["stream_options"]["include_usage"], true);
                }
            }
        }
    }
}

#[tokio::test]
async fn a_multi_turn_exchange_replays_the_script_in_order() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let (model, config) = serve(
            vec![
                Step::tool_call("c1", "read_file", r#"{"path":"x"}"#),
                Step::text("x holds 3 lines"),
            ],
            kind,
            stream,
        )
        .await;
        let provider = airlock_agent::provider::connect(&config).unwrap();
        let mut history = vec![Message::User {
            text: "what is in x?".into(),
        }];
        let first = provider
            .complete(&request(&config, history.clone()), &mut |_| {})
            .await
            .unwrap();
        history.push(Message::Assistant {
            text: first.text,
            tool_calls: first.tool_calls,
        });
        history.push(Message::ToolResult {
            call_id: "c1".into(),
            text: "1\n2\n3".into(),
            is_error: false,
        });
        let second = provider
            .complete(&request(&config, history), &mut |_| {})
            .await
            .unwrap();
        assert_eq!(second.text, "x holds 3 lines", "{what}");
        assert_eq!(model.remaining(), 0, "{what}");
        let last = model.requests()[1].json().unwrap();
        assert!(
            last.to_string().contains("1\\n2\\n3"),
            "{what}: the tool result went back: {last}"
        );
    }
}

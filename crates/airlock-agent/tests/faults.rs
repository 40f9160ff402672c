//! Every kind of provider failure gives the right typed error with a `help:` line, over both
//! protocols, streamed and not; transient failures are retried.

mod common;

use std::time::{Duration, Instant};

use airlock_agent::provider::{ProviderError, ProviderKind, StopReason, ToolArguments};
use airlock_agent::scripted::{Fault, Reply, Step, StreamCut};
use common::*;

fn status(code: u16, message: &str) -> Step {
    Step::status(code, message)
}

fn assert_help(e: &ProviderError) {
    let text = e.to_string();
    if !matches!(
        e,
        ProviderError::Reported { .. } | ProviderError::Client { .. }
    ) {
        assert!(text.contains("\nhelp: "), "no help line in: {text}");
    }
}

#[tokio::test]
async fn bad_key_is_an_auth_error_and_is_not_retried() {
    for (kind, stream) in MODES {
        for code in [401, 403] {
            let what = label(kind, stream);
            let (model, config) = serve(
                vec![status(code, "invalid x-api-key"), Step::text("never")],
                kind,
                stream,
            )
            .await;
            let (result, events) = complete(&config, &hello(&config)).await;
            let e = result.expect_err(&what);
            assert!(
                matches!(e, ProviderError::Auth { status, .. } if status == code),
                "{what}: {e:?}"
            );
            assert!(e.to_string().contains("invalid x-api-key"), "{what}: {e}");
            assert!(e.to_string().contains("AIRLOCK_API_KEY"), "{what}: {e}");
            assert_help(&e);
            assert!(events.is_empty());
            assert_eq!(
                model.requests().len(),
                1,
                "{what}: auth errors are not retried"
            );
        }
    }
}

#[tokio::test]
async fn unknown_model_is_named() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let (_model, config) =
            serve(vec![status(404, "model: nope-1 not found")], kind, stream).await;
        let e = complete(&config, &hello(&config)).await.0.expect_err(&what);
        match &e {
            ProviderError::UnknownModel {
                model, status: 404, ..
            } => assert_eq!(model, &config.model),
            other => panic!("{what}: {other:?}"),
        }
        assert!(e.to_string().contains("AIRLOCK_MODEL"), "{e}");
        assert_help(&e);
    }
    // Servers that answer an unknown model with 400 and a message (vLLM, LM Studio).
    let (_model, config) = serve(
        vec![status(400, "The model `nope` does not exist.")],
        ProviderKind::Openai,
        false,
    )
    .await;
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(
        matches!(e, ProviderError::UnknownModel { status: 400, .. }),
        "{e:?}"
    );
    // Any other 400 is a rejection, not an unknown model.
    let (_model, config) = serve(
        vec![status(400, "max_tokens: must be at most 8192")],
        ProviderKind::Anthropic,
        true,
    )
    .await;
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(
        matches!(e, ProviderError::Rejected { status: 400, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("must be at most 8192"), "{e}");
}

#[tokio::test]
async fn rate_limit_and_server_errors_are_retried_then_succeed() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let (model, config) = serve(
            vec![
                status(429, "slow down"),
                status(500, "boom"),
                status(503, "overloaded"),
                Step::text("finally"),
            ],
            kind,
            stream,
        )
        .await;
        let response = complete(&config, &hello(&config))
            .await
            .0
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(response.text, "finally", "{what}");
        assert_eq!(model.requests().len(), 4, "{what}");
        // Every attempt sent the same body.
        let bodies: Vec<Vec<u8>> = model.requests().into_iter().map(|r| r.body).collect();
        assert!(bodies.windows(2).all(|w| w[0] == w[1]), "{what}");
    }
}

#[tokio::test]
async fn retries_are_bounded_and_end_in_a_typed_error() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let steps = (0..10)
            .map(|_| status(429, "rate limit exceeded"))
            .collect();
        let (model, mut config) = serve(steps, kind, stream).await;
        config.retry.max_attempts = 3;
        let e = complete(&config, &hello(&config)).await.0.expect_err(&what);
        assert!(
            matches!(e, ProviderError::RateLimited { attempts: 3, .. }),
            "{what}: {e:?}"
        );
        assert_help(&e);
        assert_eq!(model.requests().len(), 3, "{what}");

        let steps = (0..10).map(|_| status(502, "bad gateway")).collect();
        let (model, mut config) = serve(steps, kind, stream).await;
        config.retry.max_attempts = 2;
        let e = complete(&config, &hello(&config)).await.0.expect_err(&what);
        assert!(
            matches!(
                e,
                ProviderError::Server {
                    status: 502,
                    attempts: 2,
                    ..
                }
            ),
            "{what}: {e:?}"
        );
        assert_eq!(model.requests().len(), 2, "{what}");
    }
}

#[tokio::test]
async fn retry_after_is_respected_and_an_excessive_one_stops_retrying() {
    let limited = |after: &str| {
        Step::Fault(Fault::Status {
            status: 429,
            message: "wait".into(),
            retry_after: Some(after.into()),
        })
    };
    let (model, config) = serve(
        vec![limited("1"), Step::text("ok")],
        ProviderKind::Anthropic,
        true,
    )
    .await;
    let started = Instant::now();
    let response = complete(&config, &hello(&config)).await.0.unwrap();
    assert_eq!(response.text, "ok");
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited {:?}",
        started.elapsed()
    );
    assert_eq!(model.requests().len(), 2);

    // Longer than the client will wait: give up at once and say how long the provider asked for.
    let (model, config) = serve(
        vec![limited("3600"), Step::text("never")],
        ProviderKind::Openai,
        false,
    )
    .await;
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(
        matches!(e, ProviderError::RateLimited { attempts: 1, retry_after: Some(d), .. } if d == Duration::from_secs(3600)),
        "{e:?}"
    );
    assert!(e.to_string().contains("retry-after 3600s"), "{e}");
    assert_eq!(model.requests().len(), 1);
}

#[tokio::test]
async fn garbage_bodies_are_malformed_responses() {
    let garbage: Vec<Vec<u8>> = vec![
        b"<html><body>502 Bad Gateway</body></html>".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x13, 0x80, 0x81, b'\n', b'\n'],
        b"data: {not json\n\n".to_vec(),
        b"{\"unexpected\": true}".to_vec(),
        Vec::new(),
    ];
    for (kind, stream) in MODES {
        for bytes in &garbage {
            let what = format!(
                "{} body={:?}",
                label(kind, stream),
                String::from_utf8_lossy(bytes)
            );
            let (model, config) = serve(
                vec![Step::Fault(Fault::Garbage(bytes.clone()))],
                kind,
                stream,
            )
            .await;
            let e = complete(&config, &hello(&config)).await.0.expect_err(&what);
            assert!(
                matches!(e, ProviderError::Malformed { .. }),
                "{what}: {e:?}"
            );
            assert!(
                e.to_string().contains("help: check that `kind`"),
                "{what}: {e}"
            );
            assert_eq!(
                model.requests().len(),
                1,
                "{what}: malformed answers are not retried"
            );
        }
    }
}

#[tokio::test]
async fn a_stream_cut_before_its_final_event_is_truncated() {
    let reply = Reply::text("a long answer that will not finish").with_tool_call(
        "c",
        "read_file",
        r#"{"path":"p"}"#,
    );
    for (kind, stream) in MODES {
        for cut in [StreamCut::Close, StreamCut::Abort] {
            let what = format!("{} {cut:?}", label(kind, stream));
            let fault = Fault::Truncated {
                reply: reply.clone(),
                after_events: if stream { 6 } else { 40 },
                cut,
            };
            let (_model, config) = serve(vec![Step::Fault(fault)], kind, stream).await;
            let (result, events) = complete(&config, &hello(&config)).await;
            let e = result.expect_err(&what);
            match (stream, cut) {
                // A cleanly ended but incomplete JSON body cannot be told from garbage.
                (false, StreamCut::Close) => assert!(
                    matches!(e, ProviderError::Malformed { .. }),
                    "{what}: {e:?}"
                ),
                _ => assert!(
                    matches!(e, ProviderError::TruncatedStream { .. }),
                    "{what}: {e:?}"
                ),
            }
            assert_help(&e);
            if stream {
                assert!(
                    !events.is_empty(),
                    "{what}: part of the answer streamed before the cut"
                );
            }
        }
    }
}

#[tokio::test]
async fn slow_and_stalled_providers_time_out() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let slow = Step::Fault(Fault::Slow {
            delay: Duration::from_secs(5),
            then: Box::new(Step::text("late")),
        });
        let (model, mut config) = serve(vec![slow], kind, stream).await;
        config.timeout = Duration::from_millis(300);
        let started = Instant::now();
        let e = complete(&config, &hello(&config)).await.0.expect_err(&what);
        assert!(
            matches!(
                e,
                ProviderError::Timeout {
                    phase: "waiting for the response headers",
                    ..
                }
            ),
            "{what}: {e:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(3), "{what}");
        assert_help(&e);
        assert_eq!(model.requests().len(), 1, "{what}");
    }
    for kind in [ProviderKind::Anthropic, ProviderKind::Openai] {
        let hang = Fault::Truncated {
            reply: Reply::text("stalls midway"),
            after_events: 3,
            cut: StreamCut::Hang,
        };
        let (_model, mut config) = serve(vec![Step::Fault(hang)], kind, true).await;
        config.timeout = Duration::from_millis(300);
        let e = complete(&config, &hello(&config)).await.0.unwrap_err();
        assert!(
            matches!(
                e,
                ProviderError::Timeout {
                    phase: "waiting for the next part of the stream",
                    ..
                }
            ),
            "{kind}: {e:?}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_is_a_connect_error_after_retries() {
    // Bind then drop a listener so the port is (almost certainly) closed.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    for kind in [ProviderKind::Anthropic, ProviderKind::Openai] {
        let mut config = airlock_agent::provider::ProviderConfig::new(kind, "m");
        config.base_url = format!("http://127.0.0.1:{port}");
        config.retry.max_attempts = 2;
        config.retry.base_delay = Duration::from_millis(5);
        let e = complete(&config, &hello(&config)).await.0.unwrap_err();
        assert!(
            matches!(e, ProviderError::Connect { attempts: 2, .. }),
            "{kind}: {e:?}"
        );
        assert!(e.to_string().contains("AIRLOCK_BASE_URL"), "{e}");
    }
}

#[tokio::test]
async fn broken_tool_arguments_are_an_error_for_that_call_only() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let reply = Reply::default()
            .with_tool_call("good", "read_file", r#"{"path":"a"}"#)
            .with_tool_call("bad", "read_file", r#"{"path": "a", oops"#)
            .with_tool_call("array", "read_file", "[1, 2]");
        let (_model, config) = serve(vec![Step::Reply(reply)], kind, stream).await;
        let response = complete(&config, &hello(&config))
            .await
            .0
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(response.tool_calls.len(), 3, "{what}");
        assert!(
            response.tool_calls[0].arguments.as_json().is_some(),
            "{what}"
        );
        match &response.tool_calls[1].arguments {
            ToolArguments::Invalid { raw, error } => {
                assert_eq!(raw, r#"{"path": "a", oops"#, "{what}");
                // Non-streamed Anthropic can only carry the broken text as a JSON string.
                assert!(
                    error.contains("not valid JSON") || error.contains("must be a JSON object"),
                    "{what}: {error}"
                );
            }
            other => panic!("{what}: {other:?}"),
        }
        match &response.tool_calls[2].arguments {
            ToolArguments::Invalid { error, .. } => {
                assert!(error.contains("an array"), "{what}: {error}")
            }
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(response.stop_reason, StopReason::ToolUse, "{what}");
    }
}

#[tokio::test]
async fn an_error_event_inside_a_stream_is_reported() {
    let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1}}}\n\n\
                     event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let (_m, config) = serve(
        vec![Step::Fault(Fault::Garbage(anthropic.into()))],
        ProviderKind::Anthropic,
        true,
    )
    .await;
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Reported { kind, message, .. } if kind == "overloaded_error" && message == "Overloaded"),
        "{e:?}"
    );

    // OpenRouter sends errors as a chunk mid-stream.
    let openai = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n\
                  data: {\"error\":{\"code\":502,\"message\":\"upstream provider failed\"}}\n\n";
    let (_m, config) = serve(
        vec![Step::Fault(Fault::Garbage(openai.into()))],
        ProviderKind::Openai,
        true,
    )
    .await;
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(
        matches!(&e, ProviderError::Reported { kind, message, .. } if kind == "502" && message == "upstream provider failed"),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_failed_call_leaves_the_request_untouched_for_a_retry() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let cut = Fault::Truncated {
            reply: Reply::text("partial"),
            after_events: 2,
            cut: StreamCut::Abort,
        };
        let (_model, mut config) =
            serve(vec![Step::Fault(cut), Step::text("whole")], kind, stream).await;
        config.retry.max_attempts = 1;
        let req = hello(&config);
        let before = req.clone();
        let provider = airlock_agent::provider::connect(&config).unwrap();
        assert!(
            provider.complete(&req, &mut |_| {}).await.is_err(),
            "{what}"
        );
        assert_eq!(req, before, "{what}");
        let again = provider
            .complete(&req, &mut |_| {})
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(again.text, "whole", "{what}");
    }
}

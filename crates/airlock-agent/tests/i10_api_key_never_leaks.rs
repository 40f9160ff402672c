//! I10: the model API key travels only in its auth header to the configured endpoint. It never
//! appears in an error's text or Debug output, in the config's Debug output, or anywhere else
//! in the request — even when a hostile endpoint echoes it back.

mod common;

use airlock_agent::provider::{connect, ProviderConfig, ProviderError, ProviderKind};
use airlock_agent::scripted::{Fault, Step};
use common::*;
use secrecy::SecretString;

const KEY: &str = "sk-ant-TEST-9f8e7d6c5b4a39281706f5e4d3c2b1a0";

fn with_key(mut config: ProviderConfig) -> ProviderConfig {
    config.api_key = Some(SecretString::from(KEY));
    config
}

fn assert_no_key(what: &str, e: &ProviderError) {
    let display = e.to_string();
    let debug = format!("{e:?}");
    assert!(!display.contains(KEY), "{what}: key in Display: {display}");
    assert!(!debug.contains(KEY), "{what}: key in Debug: {debug}");
    // Not even a long fragment of it.
    assert!(
        !display.contains(&KEY[8..30]),
        "{what}: key fragment in: {display}"
    );
}

#[tokio::test]
async fn the_key_is_sent_only_in_the_protocols_auth_header() {
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let (model, config) = serve(vec![Step::text("hi")], kind, stream).await;
        let config = with_key(config);
        complete(&config, &hello(&config))
            .await
            .0
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let req = &model.requests()[0];
        match kind {
            ProviderKind::Anthropic => {
                assert_eq!(req.header("x-api-key"), Some(KEY), "{what}");
                assert_eq!(req.header("authorization"), None, "{what}");
                assert_eq!(
                    req.header("anthropic-version"),
                    Some("2023-06-01"),
                    "{what}"
                );
                assert_eq!(req.path, "/v1/messages", "{what}");
            }
            ProviderKind::Openai => {
                assert_eq!(
                    req.header("authorization"),
                    Some(format!("Bearer {KEY}").as_str()),
                    "{what}"
                );
                assert_eq!(req.header("x-api-key"), None, "{what}");
                assert_eq!(req.path, "/v1/chat/completions", "{what}");
            }
        }
        assert_eq!(
            req.header("content-type"),
            Some("application/json"),
            "{what}"
        );
        let auth_header = if kind == ProviderKind::Anthropic {
            "x-api-key"
        } else {
            "authorization"
        };
        for (name, value) in &req.headers {
            if name != auth_header {
                assert!(!value.contains(KEY), "{what}: key in header {name}");
            }
        }
        assert!(
            !String::from_utf8_lossy(&req.body).contains(KEY),
            "{what}: key in body"
        );
        assert!(!req.path.contains(KEY), "{what}: key in path");
    }
}

#[tokio::test]
async fn without_a_key_no_auth_header_is_sent() {
    for (kind, stream) in MODES {
        let (model, config) = serve(vec![Step::text("hi")], kind, stream).await;
        assert!(config.api_key.is_none());
        complete(&config, &hello(&config)).await.0.unwrap();
        let req = &model.requests()[0];
        assert_eq!(req.header("x-api-key"), None);
        assert_eq!(req.header("authorization"), None);
    }
}

#[tokio::test]
async fn an_echoed_key_is_scrubbed_from_every_error() {
    let echo = format!("Incorrect API key provided: {KEY}. You can find your API key at …");
    for (kind, stream) in MODES {
        for code in [401, 403, 404, 400, 429, 500] {
            let what = format!("{} HTTP {code}", label(kind, stream));
            let steps = (0..4).map(|_| Step::status(code, echo.clone())).collect();
            let (_model, config) = serve(steps, kind, stream).await;
            let config = with_key(config);
            let e = complete(&config, &hello(&config)).await.0.expect_err(&what);
            assert_no_key(&what, &e);
            assert!(
                e.to_string()
                    .contains("Incorrect API key provided: [REDACTED]"),
                "{what}: {e}"
            );
        }
    }
    // An error event in the stream that quotes the key.
    let sse = format!(
        "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{}}}}\n\n\
         event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"{KEY}\",\"message\":\"key {KEY} revoked\"}}}}\n\n"
    );
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(sse.into_bytes()))],
        ProviderKind::Anthropic,
        true,
    )
    .await;
    let config = with_key(config);
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert!(matches!(e, ProviderError::Reported { .. }), "{e:?}");
    assert_no_key("stream error event", &e);
    let chunk = format!("data: {{\"error\":{{\"message\":\"bad key {KEY}\"}}}}\n\n");
    let (_model, config) = serve(
        vec![Step::Fault(Fault::Garbage(chunk.into_bytes()))],
        ProviderKind::Openai,
        true,
    )
    .await;
    let config = with_key(config);
    let e = complete(&config, &hello(&config)).await.0.unwrap_err();
    assert_no_key("openai stream error chunk", &e);
}

#[test]
fn config_and_provider_debug_output_hide_the_key() {
    let config = with_key(ProviderConfig::new(ProviderKind::Openai, "gpt-test"));
    let debug = format!("{config:?}");
    assert!(!debug.contains(KEY), "{debug}");
    assert!(debug.contains("REDACTED"), "{debug}");
    let provider = airlock_agent::provider::OpenAiProvider::new(&config).unwrap();
    assert!(!format!("{provider:?}").contains(KEY));
    let provider = airlock_agent::provider::AnthropicProvider::new(&config).unwrap();
    assert!(!format!("{provider:?}").contains(KEY));
}

#[test]
fn a_key_that_cannot_be_a_header_is_refused_without_echoing_it() {
    let mut config = ProviderConfig::new(ProviderKind::Anthropic, "m");
    config.api_key = Some(SecretString::from(format!("{KEY}\r\nx-evil: 1")));
    let e = connect(&config).map(|_| ()).unwrap_err();
    assert!(matches!(e, ProviderError::Client { .. }), "{e:?}");
    assert_no_key("bad header", &e);
    assert!(e.to_string().contains("cannot go in an HTTP header"), "{e}");
}

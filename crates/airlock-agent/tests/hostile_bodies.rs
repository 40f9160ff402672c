//! Random and mutated provider bodies never panic the client: each ends in a response or a
//! typed error.

mod common;

use airlock_agent::provider::ProviderError;
use airlock_agent::scripted::{Fault, Reply, Step};
use common::*;

/// A real body for `kind`/`stream`, fetched from the scripted server itself.
async fn real_body(kind: airlock_agent::provider::ProviderKind, stream: bool) -> Vec<u8> {
    let reply =
        Reply::text("some text here").with_tool_call("c1", "read_file", r#"{"path":"a/b"}"#);
    let (model, config) = serve(vec![Step::Reply(reply)], kind, stream).await;
    let url = match kind {
        airlock_agent::provider::ProviderKind::Anthropic => {
            format!("{}/v1/messages", config.base_url)
        }
        airlock_agent::provider::ProviderKind::Openai => {
            format!("{}/chat/completions", config.base_url)
        }
    };
    let body = serde_json::json!({"model": "m", "stream": stream, "stream_options": {"include_usage": true}});
    let bytes = reqwest::Client::new()
        .post(url)
        .json(&body)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    drop(model);
    bytes.to_vec()
}

#[tokio::test]
async fn random_and_mutated_bodies_never_panic() {
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    for (kind, stream) in MODES {
        let what = label(kind, stream);
        let original = real_body(kind, stream).await;
        let mut bodies = Vec::new();
        for _ in 0..30 {
            // Pure noise.
            let n = rng.usize(0..300);
            bodies.push((0..n).map(|_| rng.u8(..)).collect::<Vec<u8>>());
            // The real body with a few bytes flipped, or cut short, or with a slice repeated.
            let mut m = original.clone();
            for _ in 0..rng.usize(1..5) {
                let i = rng.usize(..m.len());
                m[i] = rng.u8(..);
            }
            bodies.push(m);
            bodies.push(original[..rng.usize(..original.len())].to_vec());
            let (a, b) = (rng.usize(..original.len()), rng.usize(..original.len()));
            let (a, b) = (a.min(b), a.max(b));
            let mut dup = original[..b].to_vec();
            dup.extend_from_slice(&original[a..]);
            bodies.push(dup);
        }
        let steps: Vec<Step> = bodies
            .iter()
            .cloned()
            .map(|b| Step::Fault(Fault::Garbage(b)))
            .collect();
        let count = steps.len();
        let (_model, mut config) = serve(steps, kind, stream).await;
        config.retry.max_attempts = 1;
        let provider = airlock_agent::provider::connect(&config).unwrap();
        let req = hello(&config);
        let (mut ok, mut failed) = (0, 0);
        for _ in 0..count {
            match provider.complete(&req, &mut |_| {}).await {
                Ok(_) => ok += 1,
                Err(e) => {
                    assert!(
                        matches!(
                            e,
                            ProviderError::Malformed { .. }
                                | ProviderError::TruncatedStream { .. }
                                | ProviderError::Reported { .. }
                        ),
                        "{what}: unexpected error kind {e:?}"
                    );
                    failed += 1;
                }
            }
        }
        assert_eq!(ok + failed, count);
        assert!(
            failed > count / 2,
            "{what}: most garbage must be refused ({failed}/{count})"
        );
    }
}

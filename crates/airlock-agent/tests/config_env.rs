//! Provider configuration and its environment overrides.

use std::collections::HashMap;

use airlock_agent::provider::{ConfigError, EnvOverrides, ProviderConfig, ProviderKind};
use secrecy::{ExposeSecret, SecretString};

fn env(pairs: &[(&str, &str)]) -> EnvOverrides {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    EnvOverrides::from_lookup(|name| map.get(name).cloned())
}

#[test]
fn environment_overrides_the_file() {
    let mut base = ProviderConfig::new(ProviderKind::Anthropic, "claude-x");
    base.api_key = Some(SecretString::from("file-key-123456"));
    base.max_tokens = 1000;
    let config = ProviderConfig::from_env_overrides(
        Some(base),
        env(&[
            ("AIRLOCK_PROVIDER", "openai"),
            ("AIRLOCK_MODEL", "llama3.1"),
            ("AIRLOCK_BASE_URL", "http://127.0.0.1:11434/v1"),
            ("AIRLOCK_API_KEY", "env-key-abcdef"),
        ]),
    )
    .unwrap();
    assert_eq!(config.kind, ProviderKind::Openai);
    assert_eq!(config.model, "llama3.1");
    assert_eq!(config.base_url, "http://127.0.0.1:11434/v1");
    assert_eq!(
        config.api_key.as_ref().unwrap().expose_secret(),
        "env-key-abcdef"
    );
    assert_eq!(
        config.max_tokens, 1000,
        "settings the environment does not name are kept"
    );
    assert!(!format!("{config:?}").contains("env-key-abcdef"));
}

#[test]
fn switching_protocol_without_a_url_uses_the_new_protocols_default() {
    let base = ProviderConfig::new(ProviderKind::Anthropic, "claude-x");
    let config =
        ProviderConfig::from_env_overrides(Some(base), env(&[("AIRLOCK_PROVIDER", "OpenAI")]))
            .unwrap();
    assert_eq!(config.base_url, "https://api.openai.com/v1");
}

#[test]
fn empty_variables_count_as_unset() {
    let base = ProviderConfig::new(ProviderKind::Openai, "gpt-x");
    let config = ProviderConfig::from_env_overrides(
        Some(base),
        env(&[("AIRLOCK_MODEL", ""), ("AIRLOCK_API_KEY", "  ")]),
    )
    .unwrap();
    assert_eq!(config.model, "gpt-x");
    assert!(config.api_key.is_none());
}

#[test]
fn environment_alone_needs_provider_and_model() {
    let e = ProviderConfig::from_env_overrides(None, env(&[("AIRLOCK_MODEL", "m")])).unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Missing {
                env: "AIRLOCK_PROVIDER",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("help: set `kind` under `[provider]`"),
        "{e}"
    );
    let e = ProviderConfig::from_env_overrides(None, env(&[("AIRLOCK_PROVIDER", "anthropic")]))
        .unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Missing {
                env: "AIRLOCK_MODEL",
                ..
            }
        ),
        "{e:?}"
    );
    let ok = ProviderConfig::from_env_overrides(
        None,
        env(&[
            ("AIRLOCK_PROVIDER", "anthropic"),
            ("AIRLOCK_MODEL", "claude-y"),
        ]),
    )
    .unwrap();
    assert_eq!(ok.base_url, "https://api.anthropic.com");
}

#[test]
fn bad_values_are_named_with_a_fix() {
    let e = ProviderConfig::from_env_overrides(
        None,
        env(&[("AIRLOCK_PROVIDER", "gemini"), ("AIRLOCK_MODEL", "m")]),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("unknown provider kind `gemini`"),
        "{e}"
    );
    assert!(e.to_string().contains("help:"), "{e}");

    let base = ProviderConfig::new(ProviderKind::Openai, "m");
    let e = ProviderConfig::from_env_overrides(
        Some(base.clone()),
        env(&[("AIRLOCK_BASE_URL", "ftp://x")]),
    )
    .unwrap_err();
    assert!(matches!(e, ConfigError::BadBaseUrl { .. }), "{e:?}");
    let e = ProviderConfig::from_env_overrides(
        Some(base.clone()),
        env(&[(
            "AIRLOCK_BASE_URL",
            "https://user:hunter2-secret@example.test/v1",
        )]),
    )
    .unwrap_err();
    assert!(!e.to_string().contains("hunter2-secret"), "{e}");
    let mut zero = base;
    zero.max_tokens = 0;
    assert!(matches!(zero.validate(), Err(ConfigError::ZeroMaxTokens)));
}

#[test]
fn the_provider_section_of_airlock_toml_is_read_strictly() {
    use airlock_agent::provider::ProviderSection;
    #[derive(serde::Deserialize)]
    struct File {
        provider: ProviderSection,
    }
    let file: File = toml::from_str(
        "[provider]\nkind = \"openai\"\nmodel = \"llama3.1\"\nbase_url = \"http://127.0.0.1:11434/v1\"\n\
         api_key_secret = \"ollama\"\nmax_tokens = 2048\n",
    )
    .unwrap();
    assert_eq!(file.provider.api_key_secret.as_deref(), Some("ollama"));
    let config = file.provider.into_config(None).unwrap();
    assert_eq!(
        (config.kind, config.max_tokens),
        (ProviderKind::Openai, 2048)
    );
    assert!(config.stream);

    // A key pasted into the file instead of a secret name is refused, not silently ignored.
    let e = toml::from_str::<File>(
        "[provider]\nkind = \"anthropic\"\nmodel = \"m\"\napi_key = \"sk-x\"\n",
    )
    .err()
    .expect("unknown key refused");
    assert!(e.to_string().contains("unknown field `api_key`"), "{e}");
    let e = toml::from_str::<File>("[provider]\nkind = \"gemini\"\nmodel = \"m\"\n")
        .err()
        .unwrap();
    assert!(e.to_string().contains("unknown variant `gemini`"), "{e}");
}

//! Bodies of the airlock-core fuzz targets, as plain functions so that the libFuzzer
//! binaries (`scripts/fuzz-ci`, stable toolchain) and the smoke test (`tests/smoke.rs`) run the same code.

/// Normalize any string; the facts must be self-consistent.
pub fn shell_normalize(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let facts = airlock_core::shell::normalize(text);
    assert_eq!(
        facts.runs_arbitrary_code,
        !facts.arbitrary_code_reasons.is_empty(),
        "runs_arbitrary_code must come with a reason"
    );
    for command in &facts.commands {
        assert!(
            !command.dynamic_program || command.runs_arbitrary_code.is_some(),
            "a dynamic program must be marked as running arbitrary code"
        );
    }
    // The shell and the Gate read control characters differently: never parsed.
    if text
        .chars()
        .any(|c| c.is_control() && c != '\t' && c != '\n')
    {
        assert!(
            facts.unparsed.is_some(),
            "a command holding a control character must be unparsed"
        );
    }
}

/// Parse any bytes as an action; errors are fine, panics are not.
pub fn action_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = airlock_core::Action::from_json(text);
}

/// Parse any text as a URL and as `host[:port]`, with the properties the proxy relies on:
/// normalization is idempotent (the decided URL parses to the same facts), a parsed host
/// re-parses to itself, and errors name the input.
pub fn url_parse(data: &[u8]) {
    use airlock_core::url_facts::{parse_host_port, parse_url};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_url(text) {
        Ok(facts) => {
            let host = if facts.host.contains(':') {
                format!("[{}]", facts.host)
            } else {
                facts.host.clone()
            };
            let decided = format!("{}://{host}:{}{}", facts.scheme, facts.port, facts.target);
            let again = parse_url(&decided)
                .unwrap_or_else(|e| panic!("the decided URL {decided:?} does not parse: {e}"));
            assert_eq!(again, facts, "normalizing {text:?} is not idempotent");
            let hp = parse_host_port(&format!("{host}:{}", facts.port))
                .unwrap_or_else(|e| panic!("host {host:?} of {text:?} does not re-parse: {e}"));
            assert_eq!(hp.host, facts.host, "host of {text:?} re-parses to another");
            assert_eq!(hp.ip_literal, facts.ip_literal);
        }
        Err(e) => assert!(
            e.to_string().contains(&format!("{text:?}")),
            "the error for {text:?} does not name it: {e}"
        ),
    }
    if let Ok(hp) = parse_host_port(text) {
        let host = if hp.host.contains(':') {
            format!("[{}]", hp.host)
        } else {
            hp.host.clone()
        };
        let again = parse_host_port(&host)
            .unwrap_or_else(|e| panic!("host {host:?} of {text:?} does not re-parse: {e}"));
        assert_eq!(again.host, hp.host, "host of {text:?} re-parses to another");
    }
}

/// Load any text as an operator's policy file next to the shipped default profile:
/// errors are fine, panics are not, and an error names the file.
pub fn policy_text(data: &[u8]) {
    use airlock_core::policy::{builtin_sources, PolicyEngine, PolicySource, Profile};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut sources = builtin_sources(Profile::Default);
    sources.push(PolicySource {
        name: "policy/local/fuzz.cedar".into(),
        text: text.to_string(),
    });
    if let Err(e) = PolicyEngine::load(&sources) {
        let message = e.to_string();
        assert!(
            message.contains("policy/local/fuzz.cedar"),
            "a policy error does not name the file: {message}"
        );
    }
}

/// Read any text as untrusted content after an owner's message (the input's first NUL
/// splits the two): decoding its escapes and disguises, finding what it asks for and
/// mentions, and tracing against it (a declared option among its words too). Nothing may
/// panic, and a decoded form is given only when it differs from the text.
pub fn untrusted_text(data: &[u8]) {
    use airlock_core::provenance::{escapes, TaintState};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (owner, content) = text.split_once('\0').unwrap_or(("", text));
    let mut state = TaintState::new();
    state.observe_trusted(owner);
    state.observe_untrusted("fuzz", content);
    let _ = state.trace_intent("delete_file");
    let _ = state.untraced_url_parts(content);
    // The owner's words for a declared option, with the content's first word as the
    // value and its words as the options (codes of any length and script).
    let words: Vec<String> = content.split_whitespace().map(str::to_string).collect();
    if let Some(value) = words.first() {
        let _ = state.trace_choice(value, &words, "access_level");
    }
    if let Some(plain) = escapes::decoded(content) {
        assert_ne!(plain, content, "a decoded form that changes nothing");
    }
}

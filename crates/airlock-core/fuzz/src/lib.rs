//! Bodies of the airlock-core fuzz targets, as plain functions so that the libFuzzer
//! binaries (nightly) and the stable smoke test (`tests/smoke.rs`) run the same code.

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

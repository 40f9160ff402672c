//! Bodies of the airlock fuzz targets, as plain functions so that the libFuzzer binary
//! (nightly) and the stable smoke tests run the same code.

/// Parse any bytes as a replay trace line; errors are fine, panics are not. A trace that
/// parses must name only tools it declares.
pub fn trace_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(trace) = airlock::replay::trace::parse_trace(text, 1) {
        for e in &trace.events {
            if let airlock::replay::trace::Event::Call { tool, .. } = e {
                assert!(
                    trace.tools.iter().any(|t| &t.name == tool),
                    "undeclared tool accepted"
                );
            }
        }
    }
}

//! Bodies of the airlock fuzz targets, as plain functions so that the libFuzzer binary
//! (`cargo fuzz run --sanitizer none --features libfuzzer TARGET`, stable) and the smoke
//! tests run the same code.

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

/// A scratch directory of this process, for decoders that read a file by path.
fn scratch() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("airlock-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("audit")).expect("scratch directory");
        dir
    })
}

/// Write `data` to `name` in the scratch directory and return its path.
fn put(name: &str, data: &[u8]) -> std::path::PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, data).expect("scratch file");
    path
}

fn assert_names(err: &str, path: &std::path::Path, what: &str) {
    assert!(
        err.contains(&path.display().to_string()),
        "the {what} error does not name the file: {err}"
    );
}

/// `airlock.toml`, read as the CLI reads it (through `operator_file`): never a panic, and
/// an error names the file.
pub fn config_file(data: &[u8]) {
    let path = put("airlock.toml", data);
    if let Err(e) = airlock::config::load(&path) {
        assert_names(&format!("{e:#}"), &path, "config");
    }
}

/// `net-rules.toml`: an error names the file, and rules that load write out and load
/// back to themselves.
pub fn net_rules(data: &[u8]) {
    use airlock_proxy::NetRules;
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = std::path::Path::new("/fuzz/net-rules.toml");
    match NetRules::parse(text, path) {
        Ok(rules) => {
            let written = toml::to_string(&rules).expect("loaded rules serialize");
            let again = NetRules::parse(&written, path)
                .unwrap_or_else(|e| panic!("rules written as {written:?} do not load: {e}"));
            assert_eq!(again, rules, "rules change when written and loaded");
        }
        Err(e) => assert_names(&e.to_string(), path, "net rules"),
    }
}

/// The secrets file's metadata (names, bindings; the values are encrypted): listing a
/// damaged file is an error that names it, never a panic.
pub fn secrets_file(data: &[u8]) {
    let path = put(airlock_proxy::secrets::SECRETS_FILE, data);
    let store = airlock_proxy::SecretStore::new(scratch());
    if let Err(e) = store.list() {
        assert_names(&e.to_string(), &path, "secrets");
    }
}

/// The sandbox helper's pin file.
pub fn helper_pin(data: &[u8]) {
    let path = put(airlock::sandbox_helper::PIN_FILE, data);
    if let Err(e) = airlock::sandbox_helper::read_pin(&path) {
        assert_names(&format!("{e:#}"), &path, "helper pin");
    }
}

/// Audit log lines and the high-water mark, split from one input at the first NUL:
/// verification reports a damaged log or mark; it never panics.
pub fn audit_files(data: &[u8]) {
    let (log, mark) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &b""[..]),
    };
    let dir = scratch().join("audit");
    std::fs::write(dir.join(airlock_audit::LOG_FILE), log).expect("scratch log");
    let _ = std::fs::remove_file(dir.join(airlock_audit::CHECKPOINT_FILE));
    let mark_path = put("audit-high-water.mark", mark);
    let key = airlock_audit::VerifyingKey::from_bytes(&[0x3b; 32])
        .or_else(|_| airlock_audit::VerifyingKey::from_bytes(&[0; 32]))
        .expect("a verifying key");
    let trust = airlock_audit::Trust {
        key: &key,
        mark: (!mark.is_empty()).then_some(mark_path.as_path()),
    };
    let _ = airlock_audit::verify_with(&dir, &trust);
}

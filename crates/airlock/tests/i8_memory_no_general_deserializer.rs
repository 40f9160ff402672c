//! I8: no code path can turn stored memory into anything but the declared record types.
//!
//! A grep-style check over the workspace's own source, with the forbidden patterns
//! spelled out:
//! - no crate of the workspace depends on a pickle-like or code-carrying format, or on an
//!   embedded interpreter (`FORBIDDEN_CRATES`);
//! - in the code that stores, reads, shows or hands memory to the model (`memory_files`):
//!   no serde attribute that makes serde guess a type or swallow fields (`untagged`,
//!   `flatten`), no process spawning or evaluation, and every `serde_json::from_*` call is
//!   one of the reviewed few in `ALLOWED_JSON_READS` (each reads into a struct that
//!   refuses unknown fields, or reads the operator's own schema document);
//! - every struct that derives `Deserialize` there refuses unknown fields.
//!
//! The checks run on a bad sample first, so a check that can no longer see a violation
//! fails the test.

use std::path::{Path, PathBuf};

/// Crates that deserialize pickle-like or self-describing object formats, run scripts,
/// or deserialize trait objects by name.
const FORBIDDEN_CRATES: &[&str] = &[
    "serde-pickle",
    "serde_pickle",
    "pyo3",
    "cpython",
    "rustpython-vm",
    "rhai",
    "mlua",
    "rlua",
    "boa_engine",
    "deno_core",
    "v8",
    "typetag",
    "serde_yaml",
    "serde_yml",
];

/// Source patterns refused in memory code (comments and `#[cfg(test)]` modules aside),
/// besides serde's `flatten`, which is refused in any serde attribute.
const FORBIDDEN_PATTERNS: &[&str] = &[
    "untagged",
    "process::Command",
    "Command::new",
    "libloading",
    "eval(",
    "pickle",
    "from_reader",
    "bincode",
];

/// The `serde_json::from_*` calls memory code may make, per file, and why each is safe.
const ALLOWED_JSON_READS: &[(&str, usize, &str)] = &[
    (
        "crates/airlock-store/src/memory/record.rs",
        1,
        "a body into the struct its kind column names, which refuses unknown fields",
    ),
    (
        "crates/airlock-store/src/memory/schemas.rs",
        1,
        "the operator's JSON Schema document",
    ),
    (
        "crates/airlock-store/src/memory/sqlite/decode.rs",
        1,
        "the operator's stored JSON Schema document",
    ),
    (
        "crates/airlock-agent/src/agent/memory_tools.rs",
        1,
        "tool arguments into argument structs that refuse unknown fields",
    ),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every file that stores, reads, shows or hands memory to the model.
fn memory_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    rs_files(&root.join("crates/airlock-store/src/memory"), &mut files);
    let mut agent = Vec::new();
    rs_files(&root.join("crates/airlock-agent/src/agent"), &mut agent);
    files.extend(agent.into_iter().filter(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("memory"))
    }));
    files.push(root.join("crates/airlock/src/cmd/memory.rs"));
    files.push(root.join("crates/airlock/src/memory_executor.rs"));
    files
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code_lines(text: &str) -> Vec<&str> {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect()
}

/// Violations of the pattern rules in one file's source.
fn pattern_violations(name: &str, text: &str, allowed_reads: usize) -> Vec<String> {
    let mut out = Vec::new();
    let lines = code_lines(text);
    for (i, line) in lines.iter().enumerate() {
        for p in FORBIDDEN_PATTERNS {
            if line.contains(p) {
                out.push(format!("{name}:{}: `{p}` in `{}`", i + 1, line.trim()));
            }
        }
        // `flatten` turns `deny_unknown_fields` off for the whole struct.
        if line.contains("serde(") && line.contains("flatten") {
            out.push(format!(
                "{name}:{}: serde `flatten` in `{}`",
                i + 1,
                line.trim()
            ));
        }
    }
    let reads = lines
        .iter()
        .map(|l| l.matches("serde_json::from_").count())
        .sum::<usize>();
    if reads != allowed_reads {
        out.push(format!(
            "{name}: {reads} serde_json::from_* calls, {allowed_reads} reviewed"
        ));
    }
    // Every struct deriving Deserialize refuses unknown fields.
    for (i, line) in lines.iter().enumerate() {
        if !(line.contains("#[derive(") && line.contains("Deserialize")) {
            continue;
        }
        let mut attrs = String::new();
        for next in &lines[i + 1..] {
            let t = next.trim();
            if t.starts_with("#[") {
                attrs.push_str(t);
                continue;
            }
            if (t.starts_with("pub struct") || t.starts_with("struct"))
                && !attrs.contains("deny_unknown_fields")
            {
                out.push(format!("{name}:{}: `{t}` accepts unknown fields", i + 1));
            }
            break;
        }
    }
    out
}

fn forbidden_dependencies(name: &str, manifest: &str) -> Vec<String> {
    let doc: toml::Table = match manifest.parse() {
        Ok(d) => d,
        Err(e) => return vec![format!("{name}: not TOML: {e}")],
    };
    let mut tables = Vec::new();
    for key in ["dependencies", "dev-dependencies", "build-dependencies"] {
        if let Some(t) = doc.get(key).and_then(|v| v.as_table()) {
            tables.push(t.clone());
        }
    }
    if let Some(t) = doc
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|v| v.as_table())
    {
        tables.push(t.clone());
    }
    let mut out = Vec::new();
    for t in tables {
        for (dep, spec) in t {
            let package = spec
                .get("package")
                .and_then(|p| p.as_str())
                .unwrap_or(&dep)
                .to_string();
            if FORBIDDEN_CRATES.contains(&package.as_str()) {
                out.push(format!("{name}: depends on `{package}`"));
            }
            // A format crate may still pull an interpreter in through a feature.
            if let Some(features) = spec.get("features").and_then(|f| f.as_array()) {
                for f in features.iter().filter_map(|f| f.as_str()) {
                    if FORBIDDEN_CRATES.contains(&f) || f == "magnus" {
                        out.push(format!("{name}: `{package}` with feature `{f}`"));
                    }
                }
            }
        }
    }
    out
}

#[test]
fn the_checks_see_a_violation() {
    let bad = r#"
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub struct Loose { #[serde(default, flatten)] a: String }
fn load(s: &str) { let v: Value = serde_json::from_str(s).unwrap(); std::process::Command::new("python3"); }
"#;
    let v = pattern_violations("sample.rs", bad, 0);
    for expected in [
        "`untagged`",
        "serde `flatten`",
        "Command::new",
        "1 serde_json::from_* calls",
        "accepts unknown fields",
    ] {
        assert!(
            v.iter().any(|m| m.contains(expected)),
            "{expected} not seen in {v:?}"
        );
    }
    let manifest = "[dependencies]\nserde-pickle = \"1\"\nfoo = { package = \"pyo3\", version = \"0.2\" }\njsonschema = { version = \"0.61\", features = [\"pyo3\"] }\n";
    assert_eq!(forbidden_dependencies("Cargo.toml", manifest).len(), 3);
    // Comments and tests are not code paths.
    assert!(pattern_violations(
        "ok.rs",
        "// no pickle here\n#[cfg(test)]\nfn t() { eval(1) }",
        0
    )
    .is_empty());
}

#[test]
fn no_workspace_crate_depends_on_a_general_purpose_deserializer() {
    let root = workspace();
    let mut manifests = vec![root.join("Cargo.toml")];
    for e in std::fs::read_dir(root.join("crates")).unwrap().flatten() {
        let m = e.path().join("Cargo.toml");
        if m.exists() {
            manifests.push(m);
        }
    }
    assert!(
        manifests.len() > 5,
        "the workspace was not found at {}",
        root.display()
    );
    let mut bad = Vec::new();
    for m in &manifests {
        let text = std::fs::read_to_string(m).unwrap();
        bad.extend(forbidden_dependencies(&m.display().to_string(), &text));
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

#[test]
fn memory_code_reads_stored_values_only_into_declared_types() {
    let root = workspace();
    let files = memory_files(&root);
    assert!(files.len() >= 10, "memory code not found: {files:?}");
    let mut bad = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap().display().to_string();
        let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let allowed = ALLOWED_JSON_READS
            .iter()
            .find(|(p, _, _)| *p == rel)
            .map_or(0, |(_, n, _)| *n);
        bad.extend(pattern_violations(&rel, &text, allowed));
    }
    assert!(bad.is_empty(), "{bad:#?}");
    // The allowlist names files that exist: a moved file must be reviewed again.
    for (path, _, why) in ALLOWED_JSON_READS {
        assert!(root.join(path).exists(), "{path} ({why}) is gone");
    }
}

//! I4 by construction: the agent crate cannot name the store's operator-side capabilities
//! (deciding approvals, making and revoking grants, resetting budgets, reviewing memory).
//! The compile-fail doctests on `airlock_store::Store` and `Agent::store` show that a
//! `&dyn Store` has no such method; this tidy check holds the rest: no source of
//! `crates/airlock-agent` names those traits, imports the store by glob (which would bring
//! them into scope unnamed) or under another name, and no dependency or feature gives the
//! agent another way to reach them.

use std::path::{Path, PathBuf};

/// The store's operator-side traits. A Rust method of a trait can be called only with the
/// trait in scope or named, so code that never names these cannot call them.
const OPERATOR_CAPABILITIES: &[&str] = &[
    "ApprovalDecisions",
    "GrantAdmin",
    "OperatorControls",
    "MemoryOperator",
];

/// The crate names the agent's sources may spell the store by.
const STORE_CRATE: &str = "airlock_store";

fn agent_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../airlock-agent")
}

#[test]
fn i4_the_agent_crate_cannot_name_the_operators_store_capabilities() {
    let mut files = Vec::new();
    rust_files(&agent_dir().join("src"), &mut files);
    let build = agent_dir().join("build.rs");
    if build.exists() {
        files.push(build);
    }
    assert!(files.len() > 10, "found only {files:?}: wrong directory?");
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for problem in problems(&text) {
            found.push(format!("{}: {problem}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "the agent crate reaches operator-side store capabilities:\n{}\nhelp: the agent loop asks (ApprovalRequests) and looks up (GrantQueries); deciding is the operator's, in the binary",
        found.join("\n")
    );
}

#[test]
fn i4_the_agent_crate_has_no_other_road_to_the_store() {
    let manifest: toml::Table = std::fs::read_to_string(agent_dir().join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(manifest_problems(&manifest), Vec::<String>::new());

    // Resolved: only the agent itself depends on the store among its normal dependencies
    // (nothing could re-export the store's traits to it), and no store feature is on
    // beyond the default.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let o = std::process::Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "tree",
            "--offline",
            "-p",
            "airlock-agent",
            "-e",
            "normal,features",
            "-i",
            "airlock-store",
            "--prefix",
            "none",
        ])
        .output()
        .expect("cargo tree runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("airlock-agent"), "unexpected output: {out}");
    assert_eq!(tree_problems(&out), Vec::<String>::new(), "{out}");
}

/// The check itself finds what it is for: each way of reaching a capability is flagged,
/// and comments, strings and the agent's own side are not.
#[test]
fn the_name_check_flags_every_spelling_and_nothing_else() {
    for bad in [
        "use airlock_store::{ApprovalDecisions, Timestamp};",
        "fn f(s: &dyn airlock_store::GrantAdmin) {}",
        "use airlock_store::OperatorControls as Ops;",
        "let _ = <S as airlock_store::MemoryOperator>::approve_review(&s);",
        "use airlock_store::*;",
        "use airlock_store::{self as st, Timestamp};",
        "use airlock_store as st;",
        "extern crate airlock_store as st;",
        "use airlock_store::{Store, *};",
        "pub use ::airlock_store::*;",
    ] {
        assert!(!problems(bad).is_empty(), "not flagged: {bad}");
    }
    for good in [
        "use airlock_store::{ApprovalRequests, GrantQueries, Store};",
        "// ApprovalDecisions are the operator's\nuse airlock_store::Store;",
        "/// ```compile_fail\n/// use airlock_store::GrantAdmin;\n/// ```\nfn f() {}",
        "/* GrantAdmin /* nested */ OperatorControls */ fn g() {}",
        "let s = \"ApprovalDecisions\"; let r = r#\"GrantAdmin\"#;",
        "fn h<'a>(x: &'a str) -> char { 'G' }",
        "use std::io::*;",
    ] {
        assert_eq!(problems(good), Vec::<String>::new(), "flagged: {good}");
    }
    let bad_manifest: toml::Table = r#"
        [dependencies]
        airlock-store = { path = "../airlock-store", features = ["operator"] }
        store2 = { package = "airlock-store", path = "../airlock-store" }
        [features]
        ops = ["airlock-store/operator"]
    "#
    .parse()
    .unwrap();
    assert_eq!(manifest_problems(&bad_manifest).len(), 3);
    let bad_tree = "airlock-store v0.1.0 (/x)\nairlock-store feature \"default\"\nairlock-store feature \"operator\"\nairlock-audit v0.1.0 (/y)\nairlock-agent v0.1.0 (/z)\n";
    assert_eq!(tree_problems(bad_tree).len(), 2, "{bad_tree}");
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// What in `source` names an operator capability or brings the store in unnamed.
fn problems(source: &str) -> Vec<String> {
    let tokens = tokens(source);
    let mut found = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if OPERATOR_CAPABILITIES.contains(&t.as_str()) {
            found.push(format!("names `{t}`"));
        }
        if t == "extern" && tokens.get(i + 1).is_some_and(|n| n == "crate") {
            found.push("an `extern crate` (a second name for a crate)".into());
        }
    }
    // `use` statements: a glob, or a rename of the crate itself, under the store.
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] != "use" {
            i += 1;
            continue;
        }
        let end = tokens[i..]
            .iter()
            .position(|t| t == ";")
            .map_or(tokens.len(), |p| i + p);
        // `use ::airlock_store::…` names the same crate.
        let mut start = i + 1;
        while tokens.get(start).is_some_and(|t| t == ":") {
            start += 1;
        }
        let stmt = &tokens[start.min(end)..end];
        if stmt.first().is_some_and(|t| t == STORE_CRATE) {
            if stmt.iter().any(|t| t == "*") {
                found.push(format!("a glob import of `{STORE_CRATE}`"));
            }
            let renamed = stmt
                .windows(2)
                .any(|w| (w[0] == STORE_CRATE || w[0] == "self") && w[1] == "as");
            if renamed {
                found.push(format!("`{STORE_CRATE}` under another name"));
            }
        }
        i = end + 1;
    }
    found
}

/// Identifiers and punctuation of Rust `source`, without comments, strings and chars.
fn tokens(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('#') || next == Some('"')) {
            // A raw string: r"…", r#"…"#, …
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push("r".into());
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (0..hashes).all(|k| chars.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(chars[start..i].iter().collect());
        } else if c.is_whitespace() {
            i += 1;
        } else {
            out.push(c.to_string());
            i += 1;
        }
    }
    out
}

/// What in the agent's manifest gives it another road to the store: a renamed
/// dependency on it, store features turned on, or agent features that turn them on.
fn manifest_problems(manifest: &toml::Table) -> Vec<String> {
    let mut found = Vec::new();
    for section in ["dependencies", "build-dependencies"] {
        let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) else {
            continue;
        };
        for (name, spec) in deps {
            let package = spec.get("package").and_then(|p| p.as_str());
            if package == Some("airlock-store") && name != "airlock-store" {
                found.push(format!(
                    "[{section}] {name} is airlock-store under another name"
                ));
            }
            if name == "airlock-store" || package == Some("airlock-store") {
                let features = spec
                    .get("features")
                    .and_then(|f| f.as_array())
                    .map_or(0, Vec::len);
                if features > 0 {
                    found.push(format!("[{section}] {name} turns on store features"));
                }
            }
        }
    }
    if let Some(features) = manifest.get("features").and_then(|f| f.as_table()) {
        for (name, list) in features {
            let reaches = list.as_array().is_some_and(|l| {
                l.iter().filter_map(|v| v.as_str()).any(|v| {
                    v.starts_with("airlock-store/")
                        || v.starts_with("airlock-store?/")
                        || v == "dep:airlock-store"
                })
            });
            if reaches {
                found.push(format!("feature {name} turns on store features"));
            }
        }
    }
    found
}

/// What in `cargo tree -i airlock-store` of the agent shows another road to the store.
fn tree_problems(tree: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in tree.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(feature) = line.strip_prefix("airlock-store feature ") {
            if feature != "\"default\"" {
                found.push(format!("store feature {feature} is on"));
            }
            continue;
        }
        let package = line.split_whitespace().next().unwrap_or("");
        if !matches!(package, "airlock-store" | "airlock-agent") {
            found.push(format!(
                "{package} depends on the store and could re-export it"
            ));
        }
    }
    found
}

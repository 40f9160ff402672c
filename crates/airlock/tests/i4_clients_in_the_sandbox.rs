//! The package and HTTP clients people run (git, Python urllib and requests, pip, npm,
//! cargo) work inside the real sandbox with only the environment the run gets: through the
//! relay and the run's own proxy, trusting Airlock's CA, against loopback HTTPS servers
//! that use a test CA. The operator allows each server for GET only. Each test checks that
//! the client's requests really went through the proxy (its audit records and what the
//! upstream saw) and that the same client fails against a host the policy does not allow.

mod i3_common;

use std::path::PathBuf;

use i3_common::clients::{is_ci_value, missing_client, require_executable, require_tool};
use i3_common::packages::*;
use i3_common::*;

/// The hosts the clients use, each allowed for GET only on the upstream's port.
const CLIENT_HOSTS: &[&str] = &["git.test", "pypi.test", "npm.test", "crates.test"];

fn client_fixture() -> Fixture {
    fixture_with(|rules, port| {
        for host in CLIENT_HOSTS {
            rules.add(rule(host, port, &["GET"])).unwrap();
        }
    })
}

/// A scratch directory on the host (outside the workspace) for building what is served.
fn host_work(f: &Fixture) -> PathBuf {
    let dir = f.tmp.path().join("host-work");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// What a run printed.
struct Ran {
    status: i32,
    stdout: String,
    stderr: String,
}

impl std::fmt::Display for Ran {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Run `command` in the sandbox with the run's environment plus `env`.
fn run(f: &Fixture, command: &str, env: &[(&str, &str)]) -> Ran {
    let opts = RunOptions {
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        timeout_secs: Some(90),
        ..RunOptions::default()
    };
    let out = f.run_with(command, &[], &opts);
    Ran {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The proxy allowed a GET of `path` on `host` and the upstream answered 200, and the
/// upstream saw that GET with `host:port` as its Host.
fn assert_proxied_get(f: &Fixture, host: &str, path: &str) {
    let ex = f.exchanges(path);
    assert!(
        ex.iter().any(|r| r["detail"]["host"] == host
            && r["detail"]["method"] == "GET"
            && r["detail"]["decision"] == "allow"
            && r["detail"]["status"] == 200),
        "no allowed GET {host}{path} in the proxy's audit records: {ex:#?}"
    );
    let want_host = format!("{host}:{}", f.upstream.port);
    assert!(
        f.seen()
            .iter()
            .any(|s| s.method == "GET" && s.path == path && s.host == want_host),
        "the upstream did not see GET {want_host}{path}: {:#?}",
        f.seen()
    );
}

/// The proxy denied a request to `host`, and the upstream never saw one.
fn assert_denied_host(f: &Fixture, host: &str) {
    let records = f.audit_records();
    assert!(
        records.iter().any(|r| r["kind"] == "net.exchange"
            && r["detail"]["host"] == host
            && r["detail"]["decision"] == "deny"),
        "no deny record for {host}: {records:#?}"
    );
    assert!(
        f.seen().iter().all(|s| !s.host.starts_with(host)),
        "the upstream saw a request for {host}: {:#?}",
        f.seen()
    );
}

/// Every request the upstream saw was a GET (the operator allowed nothing else).
fn assert_only_gets(f: &Fixture) {
    let seen = f.seen();
    assert!(!seen.is_empty());
    assert!(
        seen.iter().all(|s| s.method == "GET"),
        "the upstream saw more than GETs: {seen:#?}"
    );
}

#[test]
fn git_clones_over_https_through_the_proxy() {
    if !require_tool("git", "git") {
        return;
    }
    let f = client_fixture();
    let port = f.upstream.port;
    serve_git_repo(
        &f.upstream,
        &host_work(&f),
        "/repo.git",
        "README",
        "cloned through the proxy\n",
    );
    let r = run(
        &f,
        &format!(
            "git clone -q https://git.test:{port}/repo.git clone && git -C clone log --format=%s"
        ),
        &[],
    );
    assert_eq!(r.status, 0, "{r}");
    assert_eq!(r.stdout, "first\n", "{r}");
    let readme = std::fs::read_to_string(f.ws.join("clone/README")).unwrap();
    assert_eq!(readme, "cloned through the proxy\n");
    assert_proxied_get(&f, "git.test", "/repo.git/info/refs");
    assert_proxied_get(&f, "git.test", "/repo.git/HEAD");
    assert_only_gets(&f);

    // A push needs more than GET (WebDAV's PROPFIND over dumb HTTP): the proxy denies it
    // before the upstream sees it, and git fails.
    let r = run(
        &f,
        "cd clone && echo more > more && git add more && \
         git -c user.name=Agent -c user.email=agent@example.test commit -q -m second && \
         git push -q origin main",
        &[],
    );
    assert_ne!(r.status, 0, "{r}");
    assert!(r.stderr.contains("failed to push"), "{r}");
    let denied: Vec<_> = f
        .audit_records()
        .into_iter()
        .filter(|x| {
            x["kind"] == "net.exchange"
                && x["detail"]["host"] == "git.test"
                && x["detail"]["decision"] == "deny"
        })
        .collect();
    assert!(
        !denied.is_empty() && denied.iter().all(|x| x["detail"]["method"] != "GET"),
        "the push was not denied by method: {denied:#?}"
    );
    assert_only_gets(&f);

    // The same clone from a host the operator never allowed: the proxy's 403 stops git.
    let r = run(
        &f,
        &format!("git clone -q https://nope.test:{port}/repo.git denied"),
        &[],
    );
    assert_ne!(r.status, 0, "{r}");
    assert!(r.stderr.contains("403"), "{r}");
    assert!(!f.ws.join("denied/README").exists());
    assert_denied_host(&f, "nope.test");
    f.assert_audit_verifies();
}

/// Smart HTTP, as real git hosts speak it: cloning POSTs to `git-upload-pack`, pushing
/// POSTs to `git-receive-pack`. The operator allows GET, and POST only to the first.
#[test]
fn git_clones_over_smart_http_and_a_push_is_denied_by_path() {
    if !require_tool("git", "git") {
        return;
    }
    let f = fixture_with(|rules, port| {
        rules.add(rule("git.test", port, &["GET"])).unwrap();
        let mut upload = rule("git.test", port, &["POST"]);
        upload.path_prefix = Some("/smart/repo.git/git-upload-pack".into());
        rules.add(upload).unwrap();
    });
    let port = f.upstream.port;
    let bare = serve_smart_git_repo(
        &f.upstream,
        &host_work(&f),
        "/smart",
        "README",
        "cloned by smart HTTP\n",
    );
    let r = run(
        &f,
        &format!("git clone -q https://git.test:{port}/smart/repo.git clone"),
        &[],
    );
    assert_eq!(r.status, 0, "{r}");
    let readme = std::fs::read_to_string(f.ws.join("clone/README")).unwrap();
    assert_eq!(readme, "cloned by smart HTTP\n");
    assert_proxied_get(&f, "git.test", "/smart/repo.git/info/refs");
    let upload = f.exchanges("/smart/repo.git/git-upload-pack");
    assert!(
        upload.iter().any(|x| x["detail"]["method"] == "POST"
            && x["detail"]["decision"] == "allow"
            && x["detail"]["status"] == 200),
        "{upload:#?}"
    );

    // The push's POST to git-receive-pack has no rule: the proxy denies it and the
    // repository is unchanged.
    let commits = |bare: &std::path::Path| {
        host(std::process::Command::new("git").arg("-C").arg(bare).args([
            "-c",
            "safe.directory=*",
            "rev-list",
            "--count",
            "main",
        ]))
    };
    let commit = "cd clone && echo more > more && git add more && \
         git -c user.name=Agent -c user.email=agent@example.test commit -q -m second";
    let r = run(&f, &format!("{commit} && git push -q origin main"), &[]);
    assert_ne!(r.status, 0, "{r}");
    assert!(r.stderr.contains("403"), "{r}");
    let pushes = f.exchanges("/smart/repo.git/git-receive-pack");
    assert!(
        !pushes.is_empty()
            && pushes
                .iter()
                .all(|x| x["detail"]["method"] == "POST" && x["detail"]["decision"] == "deny"),
        "{pushes:#?}"
    );
    assert!(
        f.seen()
            .iter()
            .all(|s| !(s.method == "POST" && s.path.ends_with("git-receive-pack"))),
        "the push reached the upstream: {:#?}",
        f.seen()
    );
    assert_eq!(commits(&bare), "1\n");

    // Control: the same push to a host allowed for every method goes through, so the
    // refusal above was the policy's, not the server's.
    let r = run(
        &f,
        &format!("cd clone && git push -q https://other.test:{port}/smart/repo.git main"),
        &[],
    );
    assert_eq!(r.status, 0, "{r}");
    assert_eq!(commits(&bare), "2\n");
    f.assert_audit_verifies();
}

#[test]
fn python_urllib_and_requests_get_through_the_proxy() {
    if !require_tool("python3", "python3") {
        return;
    }
    let f = client_fixture();
    let port = f.upstream.port;
    // Only the standard library here: requests is checked on its own below, so a missing
    // module names itself.
    let script = format!(
        r#"
import urllib.request, urllib.error
print(urllib.request.urlopen("https://api.test:{port}/py/urllib", timeout=30).read().decode(), end="")
try:
    urllib.request.urlopen("https://nope.test:{port}/py/urllib-denied", timeout=30)
except urllib.error.HTTPError as e:
    print("denied", e.code)
"#
    );
    let r = run(&f, &format!("python3 -c '{script}'"), &[]);
    assert_eq!(r.status, 0, "{r}");
    assert_eq!(
        r.stdout,
        format!("hello from api.test:{port} GET /py/urllib\ndenied 403\n"),
        "{r}"
    );
    assert_proxied_get(&f, "api.test", "/py/urllib");
    assert_denied_host(&f, "nope.test");

    let has_requests = run(&f, "python3 -c 'import requests'", &[]).status == 0;
    if !has_requests
        && !missing_client(
            "Python's requests is not installed for /usr/bin/python3\nhelp: apt-get install -y python3-requests (scripts/test-env installs it)",
        )
    {
        return;
    }
    let script = format!(
        r#"
import requests
print(requests.get("https://api.test:{port}/py/requests", timeout=30).text, end="")
r = requests.post("https://api.test:{port}/py/requests-post", data="x", timeout=30)
print("post", r.status_code)
"#
    );
    let r = run(&f, &format!("python3 -c '{script}'"), &[]);
    assert_eq!(r.status, 0, "{r}");
    assert_eq!(
        r.stdout,
        format!("hello from api.test:{port} GET /py/requests\npost 403\n"),
        "{r}"
    );
    assert_proxied_get(&f, "api.test", "/py/requests");
    assert!(
        f.seen().iter().all(|s| s.path != "/py/requests-post"),
        "the POST reached the upstream: {:#?}",
        f.seen()
    );
    f.assert_audit_verifies();
}

#[test]
fn pip_downloads_and_installs_a_wheel_from_a_simple_index_through_the_proxy() {
    if !require_tool("pip3", "python3-pip") || !require_tool("python3", "python3") {
        return;
    }
    let f = client_fixture();
    let port = f.upstream.port;
    let (file, wheel) = build_wheel(&host_work(&f), "airdemo", "1.0");
    serve_simple_index(&f.upstream, "pypi.test", "airdemo", &file, &wheel);
    let opts = "--no-deps --no-cache-dir --disable-pip-version-check --retries 0 --timeout 30";
    let index = format!("--index-url https://pypi.test:{port}/simple/");
    // Download, then install into a target directory and import what was installed.
    let r = run(
        &f,
        &format!(
            "pip3 download {opts} {index} airdemo -d dl && \
             pip3 install -q {opts} {index} --target site airdemo && \
             PYTHONPATH=site python3 -c 'import airdemo; print(airdemo.VALUE)'"
        ),
        &[],
    );
    assert_eq!(r.status, 0, "{r}");
    let got = std::fs::read(f.ws.join("dl").join(&file))
        .unwrap_or_else(|e| panic!("{file} did not arrive: {e}\n{r}"));
    assert_eq!(got, wheel);
    assert!(r.stdout.ends_with("from the test index\n"), "{r}");
    assert_eq!(
        f.seen()
            .iter()
            .filter(|s| s.path == format!("/files/{file}"))
            .count(),
        2,
        "download and install each fetch the wheel: {:#?}",
        f.seen()
    );
    assert_proxied_get(&f, "pypi.test", "/simple/airdemo/");
    assert_proxied_get(&f, "pypi.test", &format!("/files/{file}"));
    assert_only_gets(&f);

    let r = run(
        &f,
        &format!(
            "pip3 download {opts} --index-url https://nope.test:{port}/simple/ airdemo -d denied"
        ),
        &[],
    );
    assert_ne!(r.status, 0, "{r}");
    assert!(!f.ws.join("denied").join(&file).exists());
    assert_denied_host(&f, "nope.test");
}

#[test]
fn npm_views_packs_and_installs_a_package_through_the_proxy() {
    if !require_tool("npm", "npm") || !require_tool("node", "nodejs") {
        return;
    }
    let f = client_fixture();
    let port = f.upstream.port;
    let tgz = serve_npm_package(&f.upstream, &host_work(&f), "npm.test", "airdemo", "1.0.0");
    // The cache in the workspace (absolute: one command changes directory).
    let npm = format!(
        "npm --cache {}/npm-cache --no-audit --no-fund --fetch-retries=0 --update-notifier=false",
        f.ws.display()
    );
    let registry = format!("--registry https://npm.test:{port}/");
    // A project that installs the package and requires it; `npm pack` of the same spec
    // fetches the tarball itself.
    std::fs::create_dir_all(f.ws.join("proj")).unwrap();
    std::fs::write(
        f.ws.join("proj/package.json"),
        r#"{"name": "proj", "version": "1.0.0", "private": true}"#,
    )
    .unwrap();
    host(
        std::process::Command::new("chmod")
            .args(["-R", "a+rwX"])
            .arg(f.ws.join("proj")),
    );
    let r = run(
        &f,
        &format!(
            "{npm} {registry} view airdemo version && \
             mkdir dl && {npm} {registry} pack airdemo --pack-destination dl && \
             cd proj && {npm} {registry} install airdemo && node -p 'require(\"airdemo\")'"
        ),
        &[],
    );
    assert_eq!(r.status, 0, "{r}");
    assert!(r.stdout.starts_with("1.0.0\n"), "{r}");
    assert!(r.stdout.ends_with("from the test registry\n"), "{r}");
    let got = std::fs::read(f.ws.join("dl/airdemo-1.0.0.tgz"))
        .unwrap_or_else(|e| panic!("the tarball did not arrive: {e}\n{r}"));
    assert_eq!(got, tgz);
    let lock = std::fs::read_to_string(f.ws.join("proj/package-lock.json")).unwrap();
    assert!(
        lock.contains(&format!(
            "https://npm.test:{port}/airdemo/-/airdemo-1.0.0.tgz"
        )),
        "{lock}"
    );
    assert_proxied_get(&f, "npm.test", "/airdemo");
    assert_proxied_get(&f, "npm.test", "/airdemo/-/airdemo-1.0.0.tgz");
    assert_only_gets(&f);

    let r = run(
        &f,
        &format!("{npm} --registry https://nope.test:{port}/ view airdemo version"),
        &[],
    );
    assert_ne!(r.status, 0, "{r}");
    assert!(r.stderr.contains("403"), "{r}");
    assert_denied_host(&f, "nope.test");
}

/// A crate depending on `airdep` from a sparse registry that replaces crates.io, with
/// `CARGO_HOME` in the workspace.
fn cargo_project(f: &Fixture, name: &str, registry: &str) {
    let dir = f.ws.join(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nairdep = \"0.1\"\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), "pub use airdep::FROM;\n").unwrap();
    let home = dir.join("cargo-home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "[source.crates-io]\nreplace-with = \"test-registry\"\n\n[source.test-registry]\nregistry = \"sparse+{registry}\"\n\n[net]\nretry = 0\n"
        ),
    )
    .unwrap();
    // The sandbox's uid writes the lock file and the registry cache.
    host(
        std::process::Command::new("chmod")
            .arg("-R")
            .arg("a+rwX")
            .arg(&dir),
    );
}

#[test]
fn cargo_fetches_a_crate_from_a_sparse_registry_through_the_proxy() {
    // `/usr/bin/cargo` explicitly: a toolchain under ~/.cargo is not visible in the sandbox.
    if !require_executable("/usr/bin/cargo", "cargo-web") {
        return;
    }
    let f = client_fixture();
    let port = f.upstream.port;
    let krate = serve_sparse_registry(
        &f.upstream,
        &host_work(&f),
        "crates.test",
        "airdep",
        "0.1.0",
    );
    cargo_project(
        &f,
        "uses-airdep",
        &format!("https://crates.test:{port}/index/"),
    );
    let r = run(
        &f,
        // Then build offline: what was fetched is the crate, and it compiles.
        "cd uses-airdep && /usr/bin/cargo generate-lockfile && /usr/bin/cargo fetch && \
         /usr/bin/cargo build --offline -q && echo built",
        &[(
            "CARGO_HOME",
            &format!("{}/uses-airdep/cargo-home", f.ws.display()),
        )],
    );
    assert_eq!(r.status, 0, "{r}");
    assert_eq!(r.stdout, "built\n", "{r}");
    let lock = std::fs::read_to_string(f.ws.join("uses-airdep/Cargo.lock")).unwrap();
    assert!(
        lock.contains("name = \"airdep\"\nversion = \"0.1.0\""),
        "{lock}"
    );
    assert!(lock.contains(&sha256_hex(&krate)), "{lock}");
    let cache = f.ws.join("uses-airdep/cargo-home/registry/cache");
    let fetched = files_named(&cache, "airdep-0.1.0.crate");
    assert_eq!(
        fetched.len(),
        1,
        "the crate was not fetched into {cache:?}\n{r}"
    );
    assert_eq!(std::fs::read(&fetched[0]).unwrap(), krate);
    assert_proxied_get(&f, "crates.test", "/index/config.json");
    assert_proxied_get(&f, "crates.test", "/index/ai/rd/airdep");
    assert_proxied_get(&f, "crates.test", "/dl/airdep/0.1.0/download");
    assert_only_gets(&f);

    cargo_project(&f, "denied", &format!("https://nope.test:{port}/index/"));
    let r = run(
        &f,
        "cd denied && /usr/bin/cargo generate-lockfile",
        &[(
            "CARGO_HOME",
            &format!("{}/denied/cargo-home", f.ws.display()),
        )],
    );
    assert_ne!(r.status, 0, "{r}");
    assert!(!f.ws.join("denied/Cargo.lock").exists());
    assert_denied_host(&f, "nope.test");
}

/// Files named `name` anywhere below `dir`.
fn files_named(dir: &std::path::Path, name: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == name) {
                hits.push(p);
            }
        }
    }
    hits
}

/// Every value CI services give `CI` forbids skipping a client test; only an unset, empty
/// or false `CI` lets a developer's machine skip one (and the skip is counted and printed).
#[test]
fn a_missing_client_fails_every_ci_run() {
    for v in ["true", "1", "yes", "TRUE", "on"] {
        assert!(is_ci_value(Some(v)), "CI={v}");
    }
    for v in [None, Some(""), Some("0"), Some("false"), Some("FALSE")] {
        assert!(!is_ci_value(v), "CI={v:?}");
    }
}

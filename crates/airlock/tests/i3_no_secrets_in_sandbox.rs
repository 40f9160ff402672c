//! I3: the sandbox holds no secrets. It gets a placeholder; the proxy swaps in the real
//! value only in the bound header of requests to the bound host and path, scrubs echoes of
//! it from responses, and keeps it out of the audit log.

mod i3_common;

use i3_common::*;

fn echo_with_placeholder(f: &Fixture, host: &str, path: &str) -> (String, String) {
    let out = f.run(
        &format!(
            "curl -sS --max-time 30 -D - -H \"Authorization: Bearer ${SECRET_VAR}\" {}",
            f.url(host, path)
        ),
        &[SECRET_NAME],
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Where the payload searches for the value: every directory it can write or that holds
/// run-time files, the system config, and the workspace (its working directory).
const SEARCHED: &str = "/run /tmp /var /etc /home /root /dev/shm .";
const HITS_BEGIN: &str = "secret-hits-begin";
const HITS_END: &str = "secret-hits-end";
const PH_BEGIN: &str = "placeholder-hits-begin";
const PH_END: &str = "placeholder-hits-end";

/// The lines of `text` between the lines `begin` and `end`; panics when either is missing,
/// so a search that did not run never reads as a search that found nothing.
fn between<'a>(text: &'a str, begin: &str, end: &str) -> Vec<&'a str> {
    let mut lines = text.lines();
    assert!(
        lines.by_ref().any(|l| l == begin),
        "{begin} missing from the output: {text}"
    );
    let inner: Vec<&str> = lines.by_ref().take_while(|l| *l != end).collect();
    assert!(
        text.lines().any(|l| l == end),
        "{end} missing from the output: {text}"
    );
    inner
}

fn placeholder(f: &Fixture) -> String {
    airlock_proxy::SecretStore::new(&f.home.config)
        .placeholder(SECRET_NAME)
        .unwrap()
}

/// The proxy's `net.placeholder_misuse` records for requests to `path`.
fn misuse_records(f: &Fixture, path: &str) -> Vec<serde_json::Value> {
    f.audit_records()
        .into_iter()
        .filter(|r| r["kind"] == "net.placeholder_misuse" && r["detail"]["path"] == path)
        .collect()
}

/// The misuse record of the one request to `path` names the secret, where it was sent and
/// the host it went to; a record written for any other request does not count.
fn assert_flagged_once(f: &Fixture, path: &str, host: &str) {
    let flagged = misuse_records(f, path);
    assert_eq!(
        flagged.len(),
        1,
        "the placeholder sent to {host}{path} is not flagged exactly once: {:#?}",
        f.audit_records()
    );
    let d = &flagged[0]["detail"];
    assert_eq!(d["secret"], SECRET_NAME, "{d}");
    assert_eq!(d["location"], "header:authorization", "{d}");
    assert_eq!(d["host"], host, "{d}");
}

#[test]
fn the_secret_is_injected_for_its_bound_host_and_path_only() {
    let f = fixture();
    let ph = placeholder(&f);
    // Each request has a path of its own, so each audit check below can only be met by
    // the record of that one request.
    let (bound, off_path, other_host) =
        ("/v1/bound/echo", "/v2/off-path/echo", "/v1/other-host/echo");
    // Bound host and path: the upstream gets the real value; the echo the sandbox reads
    // (body and header) carries only the placeholder.
    let (text, err) = echo_with_placeholder(&f, "api.test", bound);
    let seen = f.seen();
    let last = seen.last().expect("the upstream saw the request");
    assert_eq!(last.path, bound);
    assert_eq!(
        last.authorization.as_deref(),
        Some(format!("Bearer {SECRET_VALUE}").as_str())
    );
    assert!(
        !text.contains(SECRET_VALUE),
        "the real value reached the sandbox: {text}"
    );
    assert!(
        text.contains(&format!("you sent authorization: Bearer {ph}")),
        "{text}\n{err}"
    );
    assert!(
        text.to_ascii_lowercase()
            .contains(&format!("x-echo-auth: bearer {}", ph.to_ascii_lowercase())),
        "{text}"
    );
    // Where the secret belongs, its placeholder is used, not misused.
    assert_eq!(misuse_records(&f, bound), Vec::<serde_json::Value>::new());

    // Same host, outside the bound path: passes unchanged and is flagged.
    let (text, _) = echo_with_placeholder(&f, "api.test", off_path);
    assert_eq!(f.seen().last().unwrap().path, off_path);
    assert_eq!(
        f.seen().last().unwrap().authorization.as_deref(),
        Some(format!("Bearer {ph}").as_str())
    );
    assert!(!text.contains(SECRET_VALUE));
    assert_flagged_once(&f, off_path, "api.test");

    // Another allowed host: passes unchanged and is flagged in the audit log.
    let (text, _) = echo_with_placeholder(&f, "other.test", other_host);
    assert_eq!(
        f.seen().last().unwrap().host,
        format!("other.test:{}", f.upstream.port)
    );
    assert_eq!(f.seen().last().unwrap().path, other_host);
    assert_eq!(
        f.seen().last().unwrap().authorization.as_deref(),
        Some(format!("Bearer {ph}").as_str())
    );
    assert!(!text.contains(SECRET_VALUE));
    assert_flagged_once(&f, other_host, "other.test");
    let audit = f.audit_text();
    assert!(
        !audit.contains(SECRET_VALUE),
        "the audit log holds the real value"
    );
    let records = f.audit_records();
    let injected: Vec<_> = records
        .iter()
        .filter(|r| r["kind"] == "net.exchange")
        .filter(|r| {
            r["detail"]["secrets_injected"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        })
        .map(|r| r["detail"]["path"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(injected, vec![bound.to_string()], "{records:#?}");
    f.assert_audit_verifies();
}

#[test]
fn the_sandbox_environment_and_files_never_hold_the_real_value() {
    let f = fixture();
    let ph = placeholder(&f);
    // Look everywhere the payload can: its environment (two ways), every process's
    // environ it may read, the files under every writable or run-time directory and the
    // workspace; and keep a copy of each. The file search lists its hits between two
    // markers, and the same search for the placeholder shows it really looks.
    // `cat` reads its own environ: a `< /proc/self/environ` redirect would be opened by
    // the forked shell, whose memory is gone once it execs, and read as empty.
    let out = f.run(
        &format!(
            "env > env.txt; cat /proc/self/environ | tr '\\0' '\\n' > environ.txt; \
             cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' > all-environ.txt; \
             curl -sS --max-time 30 -H \"Authorization: Bearer ${SECRET_VAR}\" {} > echo.txt; \
             cat env.txt environ.txt all-environ.txt echo.txt; \
             a='{head}'; b='{tail}'; \
             echo {HITS_BEGIN}; grep -rlF -- \"$a$b\" {SEARCHED} 2>/dev/null; echo {HITS_END}; \
             echo {PH_BEGIN}; grep -rlF -- \"${SECRET_VAR}\" {SEARCHED} 2>/dev/null; echo {PH_END}; \
             echo grep-done",
            f.url("api.test", "/v1/echo"),
            // Split so the command (which the audit log records) never holds the value.
            head = &SECRET_VALUE[..6],
            tail = &SECRET_VALUE[6..],
        ),
        &[SECRET_NAME],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    // No file the payload can read holds the real value.
    assert_eq!(
        between(&text, HITS_BEGIN, HITS_END),
        Vec::<&str>::new(),
        "files in the sandbox hold the real value"
    );
    // The same search finds the placeholder in the copies the payload made.
    let ph_hits = between(&text, PH_BEGIN, PH_END);
    for copy in ["./env.txt", "./environ.txt", "./echo.txt"] {
        assert!(
            ph_hits.contains(&copy),
            "{copy} not found: {ph_hits:?}\n{err}"
        );
    }
    // The checks look at the right place: the placeholder is there.
    assert!(
        text.contains(&format!("{SECRET_VAR}={ph}\n")),
        "{text}\n{err}"
    );
    assert!(
        text.contains(&format!("you sent authorization: Bearer {ph}")),
        "{text}\n{err}"
    );
    assert!(text.ends_with("grep-done\n"), "{text}");
    assert!(
        !text.contains(SECRET_VALUE),
        "the real value reached the sandbox: {text}"
    );
    assert!(!err.contains(SECRET_VALUE));
    // The upstream did get the real value: it was injected at the boundary.
    assert!(f
        .seen()
        .iter()
        .any(|s| s.authorization.as_deref() == Some(&format!("Bearer {SECRET_VALUE}"))));
    // On the host: nothing in the workspace, nothing in the state dir (audit, run dirs).
    assert!(f.ws.join("env.txt").exists());
    assert_eq!(
        files_containing(&f.ws, SECRET_VALUE),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(
        files_containing(&f.home.state, SECRET_VALUE),
        Vec::<std::path::PathBuf>::new()
    );
    f.assert_audit_verifies();
}

#[test]
fn without_secret_the_run_gets_no_placeholder_and_nothing_is_injected() {
    let f = fixture();
    let ph = placeholder(&f);
    // A placeholder known from an earlier run is not swapped in a run that did not ask.
    let out = f.run(
        &format!(
            "env; curl -sS --max-time 30 -H 'Authorization: Bearer {ph}' {}",
            f.url("api.test", "/v1/echo")
        ),
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains(&format!("{SECRET_VAR}=")), "{text}");
    assert_eq!(
        f.seen().last().unwrap().authorization.as_deref(),
        Some(format!("Bearer {ph}").as_str())
    );
    assert!(!text.contains(SECRET_VALUE));
}

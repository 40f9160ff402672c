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

fn placeholder(f: &Fixture) -> String {
    airlock_proxy::SecretStore::new(&f.home.config)
        .placeholder(SECRET_NAME)
        .unwrap()
}

#[test]
fn the_secret_is_injected_for_its_bound_host_and_path_only() {
    let f = fixture();
    let ph = placeholder(&f);
    // Bound host and path: the upstream gets the real value; the echo the sandbox reads
    // (body and header) carries only the placeholder.
    let (text, err) = echo_with_placeholder(&f, "api.test", "/v1/echo");
    let seen = f.seen();
    let last = seen.last().expect("the upstream saw the request");
    assert_eq!(last.path, "/v1/echo");
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

    // Same host, outside the bound path: passes unchanged.
    let (text, _) = echo_with_placeholder(&f, "api.test", "/v2/echo");
    assert_eq!(f.seen().last().unwrap().path, "/v2/echo");
    assert_eq!(
        f.seen().last().unwrap().authorization.as_deref(),
        Some(format!("Bearer {ph}").as_str())
    );
    assert!(!text.contains(SECRET_VALUE));

    // Another allowed host: passes unchanged and is flagged in the audit log.
    let (text, _) = echo_with_placeholder(&f, "other.test", "/v1/echo");
    assert_eq!(
        f.seen().last().unwrap().host,
        format!("other.test:{}", f.upstream.port)
    );
    assert_eq!(
        f.seen().last().unwrap().authorization.as_deref(),
        Some(format!("Bearer {ph}").as_str())
    );
    assert!(!text.contains(SECRET_VALUE));
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
    assert_eq!(injected, vec!["/v1/echo".to_string()], "{records:#?}");
    assert!(
        audit.contains("exfiltration") || audit.contains("misuse") || audit.contains("placeholder"),
        "the placeholder sent to other.test is not flagged"
    );
    f.assert_audit_verifies();
}

#[test]
fn the_sandbox_environment_and_files_never_hold_the_real_value() {
    let f = fixture();
    let ph = placeholder(&f);
    // Look everywhere the payload can: its environment (two ways), every process's
    // environ it may read, /run/airlock, /tmp, the workspace; and keep a copy of each.
    let out = f.run(
        &format!(
            "env > env.txt; tr '\\0' '\\n' < /proc/self/environ > environ.txt; \
             cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' > all-environ.txt; \
             curl -sS --max-time 30 -H \"Authorization: Bearer ${SECRET_VAR}\" {} > echo.txt; \
             cat env.txt environ.txt all-environ.txt echo.txt; \
             a='{head}'; b='{tail}'; grep -rl \"$a$b\" /run /tmp /etc . 2>/dev/null; echo grep-done",
            f.url("api.test", "/v1/echo"),
            // Split so the command (which the audit log records) never holds the value.
            head = &SECRET_VALUE[..6],
            tail = &SECRET_VALUE[6..],
        ),
        &[SECRET_NAME],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
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

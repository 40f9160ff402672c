//! I3 (sandbox side): with a relay, the sandbox reaches the host's proxy socket through
//! `127.0.0.1:<port>` and nothing else; the relay is attested; only the CA certificate is
//! copied in. A real UNIX socket server on the host stands in for the proxy.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use airlock_sandbox::profile::{NetworkPolicy, ProxyRelay, RELAY_CA_CERT};
use airlock_sandbox::{SandboxError, SandboxProfile};
use common::*;

/// A UNIX socket server answering each line with `echo: <line>`, in a 0700 directory the
/// sandbox uid cannot traverse (only the socket itself is handed to it).
struct EchoProxy {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    cert: PathBuf,
}

fn echo_proxy() -> EchoProxy {
    let dir = tempfile::Builder::new()
        .prefix("airlock-proxy-")
        .tempdir_in("/tmp")
        .unwrap();
    let socket = dir.path().join("proxy.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    if is_root() {
        std::os::unix::fs::chown(&socket, Some(sandbox_uid()), Some(sandbox_uid())).unwrap();
    }
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut out = conn.try_clone().unwrap();
                for line in BufReader::new(conn).lines() {
                    let Ok(line) = line else { return };
                    if writeln!(out, "echo: {line}").is_err() {
                        return;
                    }
                }
            });
        }
    });
    let cert = dir.path().join("ca.pem");
    std::fs::write(
        &cert,
        "-----BEGIN CERTIFICATE-----\nTUlJQnRlc3Q=\n-----END CERTIFICATE-----\n",
    )
    .unwrap();
    EchoProxy {
        _dir: dir,
        socket,
        cert,
    }
}

fn relay_profile(ws: &Path, proxy: &EchoProxy) -> SandboxProfile {
    let mut profile = SandboxProfile::new(ws);
    let mut relay = ProxyRelay::new(&proxy.socket);
    relay.port = 3128;
    relay.ca_cert = Some(proxy.cert.clone());
    profile.network = NetworkPolicy::ProxyRelay(relay);
    profile
}

/// bash's /dev/tcp: prints the reply line, or bash's error (with the errno text).
fn tcp_round_trip(port: u16) -> String {
    format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} || exit 3; echo 'hello relay' >&3; read -r line <&3; echo \"$line\""
    )
}

/// A pooled sandbox is built before any proxy socket exists; the run's own socket is
/// attached with the run, and the relay's attestation names that very socket.
#[test]
fn i3_a_pooled_sandbox_gets_the_runs_own_proxy_socket() {
    let (_d, ws) = workspace();
    let built_for = echo_proxy();
    let pooled = sandbox()
        .build_pooled(&relay_profile(&ws, &built_for))
        .expect("pooled");
    // Another proxy (another socket, the same CA) for the run itself.
    let proxy = echo_proxy();
    let mut profile = relay_profile(&ws, &proxy);
    if let NetworkPolicy::ProxyRelay(relay) = &mut profile.network {
        relay.ca_cert = Some(built_for.cert.clone());
    }
    let prepared = pooled
        .attach(&profile, "", airlock_sandbox::OutputMode::Capture, |_| {})
        .expect("attach");
    let out = prepared
        .run(&airlock_core::testing::authorize_for_tests(
            airlock_core::action::ExecAction {
                command: format!(
                    "/bin/bash -c '{}'",
                    tcp_round_trip(3128).replace('\'', "'\\''")
                ),
                cwd: String::new(),
                env: vec![],
            },
        ))
        .expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "echo: hello relay\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    use std::os::unix::fs::MetadataExt;
    let relay = out.attestation.relay.expect("the relay is attested");
    let meta = std::fs::metadata(&proxy.socket).unwrap();
    assert_eq!(
        (relay.socket_dev, relay.socket_ino),
        (meta.dev(), meta.ino())
    );
    let other = std::fs::metadata(&built_for.socket).unwrap();
    assert_ne!(
        (relay.socket_dev, relay.socket_ino),
        (other.dev(), other.ino())
    );
}

#[test]
fn the_relay_reaches_the_proxy_socket_and_is_attested() {
    let (_d, ws) = workspace();
    let proxy = echo_proxy();
    let profile = relay_profile(&ws, &proxy);
    let cmd = format!(
        "/bin/bash -c '{}'",
        tcp_round_trip(3128).replace('\'', "'\\''")
    );
    let out = run_in(&ws, &profile, &cmd).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "echo: hello relay\n",
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status, 0);
    let relay = out.attestation.relay.expect("the relay is attested");
    assert_eq!(relay.listen, "127.0.0.1:3128");
    assert_eq!(relay.upstream_error, None);
    assert!(relay.no_new_privs && relay.cap_effective == 0 && relay.seccomp_filters > 0);
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&proxy.socket).unwrap();
    assert_eq!(
        (relay.socket_dev, relay.socket_ino),
        (meta.dev(), meta.ino())
    );
}

#[test]
fn no_other_tcp_port_is_reachable_and_the_relay_is_out_of_reach() {
    let (_d, ws) = workspace();
    let proxy = echo_proxy();
    let profile = relay_profile(&ws, &proxy);
    // Another port: Landlock refuses the connect (EACCES), before any routing happens.
    let cmd = format!(
        "/bin/bash -c '{}'",
        tcp_round_trip(3129).replace('\'', "'\\''")
    );
    let out = run_in(&ws, &profile, &cmd).unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status,
        3,
        "stdout {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains("Permission denied"), "{err}");
    // The relay is not dumpable and sits in another Landlock domain: the payload can
    // neither read its descriptors nor signal it.
    let cmd = "for p in /proc/[0-9]*; do \
               if [ \"$(cat $p/comm 2>/dev/null)\" = airlock-relay ]; then \
                 ls $p/fd >/dev/null 2>&1 && echo fds-readable; \
                 kill -0 ${p#/proc/} 2>/dev/null && echo signalable; \
                 echo found; \
               fi; done";
    let out = run_in(&ws, &profile, cmd).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("found"), "relay process not seen: {text}");
    assert!(!text.contains("fds-readable"), "{text}");
    assert!(!text.contains("signalable"), "{text}");
}

#[test]
fn only_the_certificate_is_copied_in_read_only() {
    let (_d, ws) = workspace();
    let proxy = echo_proxy();
    let profile = relay_profile(&ws, &proxy);
    let cmd =
        format!("cat {RELAY_CA_CERT}; echo x >> {RELAY_CA_CERT} && echo WROTE; ls /run/airlock");
    let out = run_in(&ws, &profile, &cmd).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // Byte for byte what the host checked (it travels in a sealed memory file).
    let host = std::fs::read_to_string(&proxy.cert).unwrap();
    assert!(text.starts_with(&host), "{text}");
    assert!(!text.contains("WROTE"), "{text}");
    assert!(text.trim_end().ends_with("ca.pem"), "{text}");
    // A file with a private key is refused before anything runs.
    std::fs::write(
        &proxy.cert,
        "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n-----BEGIN PRIVATE KEY-----\nx\n",
    )
    .unwrap();
    match run_in(&ws, &profile, "true") {
        Err(SandboxError::Profile { field, message, .. }) => {
            assert_eq!(field, "network.ca_cert");
            assert!(message.contains("private key"), "{message}");
        }
        other => panic!("expected a profile error, got {other:?}"),
    }
}

/// The proxy socket (fd 5) and the sealed file holding the CA bundle (fd 6) reach the
/// relay and PID 1 only: the payload of a run that has both holds nothing but 0-2.
#[test]
fn the_payload_inherits_neither_the_proxy_socket_nor_the_ca_file() {
    let (_d, ws) = workspace();
    let proxy = echo_proxy();
    let profile = relay_profile(&ws, &proxy);
    // A plain command runs directly (no shell in between): `ls` lists its own descriptors,
    // where the only one above 2 is the directory it is reading.
    let out = run_in(&ws, &profile, "ls -l /proc/self/fd").unwrap();
    assert_eq!(out.status, 0, "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let fds: Vec<(u32, &str)> = text
        .lines()
        .filter_map(|l| {
            let (name, target) = l.split_once(" -> ")?;
            Some((name.rsplit(' ').next()?.parse().ok()?, target))
        })
        .collect();
    assert!(fds.len() >= 3, "{text}");
    for (fd, target) in &fds {
        if *fd > 2 {
            assert!(
                target.starts_with("/proc/"),
                "descriptor {fd} ({target}) leaked into the payload: {text}"
            );
        }
        assert!(
            !target.contains("memfd") && !target.contains("socket"),
            "{fd} -> {target}: {text}"
        );
    }
}

#[test]
fn a_socket_inside_the_workspace_or_missing_is_refused() {
    let (_d, ws) = workspace();
    let mut profile = SandboxProfile::new(&ws);
    profile.network = NetworkPolicy::ProxyRelay(ProxyRelay::new(ws.join("proxy.sock")));
    match run_in(&ws, &profile, "true") {
        Err(SandboxError::Profile { field, .. }) => assert_eq!(field, "network.socket"),
        other => panic!("expected a profile error, got {other:?}"),
    }
    profile.network = NetworkPolicy::ProxyRelay(ProxyRelay::new("/tmp/no-such-airlock.sock"));
    match run_in(&ws, &profile, "true") {
        Err(SandboxError::Profile { field, message, .. }) => {
            assert_eq!(field, "network.socket");
            assert!(message.contains("No such file"), "{message}");
        }
        other => panic!("expected a profile error, got {other:?}"),
    }
}

#[test]
fn a_socket_the_sandbox_uid_cannot_write_is_a_shortfall() {
    if !is_root() {
        return; // an unprivileged caller owns its socket: nothing to get wrong
    }
    let (_d, ws) = workspace();
    let proxy = echo_proxy();
    std::os::unix::fs::chown(&proxy.socket, Some(0), Some(0)).unwrap();
    let profile = relay_profile(&ws, &proxy);
    match run_in(&ws, &profile, "echo RAN") {
        Err(SandboxError::Shortfall(s)) => {
            assert!(
                s.iter()
                    .any(|s| s.feature == "egress relay" && s.detail.contains("ermission denied")),
                "{s:?}"
            );
        }
        other => panic!("expected a shortfall, got {other:?}"),
    }
}

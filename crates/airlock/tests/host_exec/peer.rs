//! A client checks who listens on the host's sockets before it sends anything: a
//! listener of another uid (here root's, planted where an unprivileged operator's host
//! would listen) gets no request, no descriptors and no API call, and the command says
//! whose the socket is. Needs root to listen as one uid and call as another.

use std::io::Read;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::super::exec_fixture::{airlock_bin, fixture};

/// Listen on `path` (as this process's uid) until `stop`, reading what each connection
/// sends; the byte count of each connection.
fn record_connections(
    path: &std::path::Path,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<usize>> {
    use std::os::unix::fs::PermissionsExt;
    let listener = UnixListener::bind(path).unwrap();
    // Reachable by the operator, as a socket planted there would make sure to be.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        loop {
            // Stopped only once no connection is pending.
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
                    let mut got = Vec::new();
                    let _ = s.read_to_end(&mut got);
                    seen.push(got.len());
                }
                Err(_) if stop.load(Ordering::Acquire) => break,
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
        seen
    })
}

#[test]
fn clients_send_nothing_to_a_host_socket_of_another_uid() {
    use std::os::unix::process::CommandExt;
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: needs root to listen as one uid and call as another (the decision itself is unit-tested in airlock-client)");
        return;
    }
    let uid = 4248;
    let f = fixture();
    std::fs::create_dir_all(&f.home).unwrap();
    std::os::unix::fs::chown(&f.home, Some(uid), Some(uid)).unwrap();
    let bin_dir = airlock_bin().parent().unwrap().to_path_buf();
    let run_as = |program: &str, args: &[&str]| {
        Command::new(bin_dir.join(program))
            .env("AIRLOCK_HOME", &f.home)
            .current_dir(&f.ws)
            .args(args)
            .stdin(Stdio::null())
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    };
    let o = run_as("airlock", &["init"]);
    assert!(o.status.success(), "{o:?}");
    // A held lock says a host serves the state dir; its sockets are root's.
    let state = f.home.join("state");
    let lock_path = airlock_client::host::lock_path(&state);
    std::fs::write(&lock_path, format!("{}\n", std::process::id())).unwrap();
    std::os::unix::fs::chown(&lock_path, Some(uid), Some(uid)).unwrap();
    let _held = nix::fcntl::Flock::lock(
        std::fs::File::open(&lock_path).unwrap(),
        nix::fcntl::FlockArg::LockExclusiveNonblock,
    )
    .unwrap();
    let dir = airlock_client::host::socket_dir(&state);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), Some(uid)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let exec_seen = record_connections(&airlock_client::host::exec_socket(&state), stop.clone());
    let api_seen = record_connections(&airlock_client::host::api_socket(&state), stop.clone());
    let outputs: Vec<_> = [
        // The small front's exec, the full program's exec, and an API call.
        ("airlock", &["exec", "--", "echo planted"][..]),
        ("airlock-full", &["exec", "--", "echo planted"][..]),
        ("airlock", &["approvals", "list"][..]),
    ]
    .into_iter()
    .map(|(program, args)| (program, args, run_as(program, args)))
    .collect();
    stop.store(true, Ordering::Release);
    let exec_seen = exec_seen.join().unwrap();
    let api_seen = api_seen.join().unwrap();
    // Each client did connect (so the check, not a missing socket, stopped it) and sent
    // nothing at all.
    assert_eq!(exec_seen.len(), 2, "{exec_seen:?}");
    assert!(!api_seen.is_empty(), "{api_seen:?}");
    assert!(
        exec_seen.iter().chain(&api_seen).all(|n| *n == 0),
        "bytes sent to the planted sockets: exec {exec_seen:?}, api {api_seen:?}"
    );
    // And each says whose the socket is.
    for (program, args, o) in outputs {
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(!o.status.success(), "{program} {args:?}: {o:?}");
        assert!(
            err.contains("uid 0") && err.contains(&format!("uid {uid}")),
            "{program} {args:?}: {err}"
        );
        assert!(
            err.contains("nothing was sent"),
            "{program} {args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{program} {args:?}: {o:?}");
    }
}

//! The small `airlock` front: an `exec` while a host serves goes from it to the host
//! without the full program, and everything else is handed to `airlock-full` beside it.
//! A copy of the front alone in a directory, with no `airlock-full` beside it, tells the
//! two apart: what the front does itself works there, what it hands over fails, saying why.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::super::exec_fixture::{airlock_bin, fixture, Fixture};
use super::super::host_fixture::Host;
use super::super::verify;
use super::{init, records_of};

/// The front, copied alone into a directory of its own.
fn lonely_front(dir: &Path) -> PathBuf {
    let front = dir.join("airlock");
    std::fs::copy(airlock_bin(), &front).unwrap();
    front
}

/// Run `front` with `args`. A binary this test process has just written can be "busy"
/// for a moment: a child another test thread forked meanwhile holds the copy's write
/// descriptor until its own `execve` closes it. So `ETXTBSY` is tried again (for up to
/// 5 s); any other error fails.
fn run(front: &Path, f: &Fixture, args: &[&str]) -> Output {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let ran = Command::new(front)
            .env("AIRLOCK_HOME", &f.home)
            .current_dir(&f.ws)
            .args(args)
            .stdin(Stdio::null())
            .output();
        match ran {
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => return other.unwrap(),
        }
    }
}

fn handed_over(o: &Output) -> bool {
    let err = String::from_utf8_lossy(&o.stderr);
    o.status.code() == Some(1)
        && err.contains("cannot start")
        && err.contains("airlock-full")
        && err.contains("must be installed beside it")
}

#[test]
fn the_front_sends_an_exec_to_the_host_itself_and_hands_over_the_rest() {
    let f = fixture();
    init(&f, "");
    let dir = tempfile::tempdir().unwrap();
    let front = lonely_front(dir.path());

    // No host: even an exec is the full program's (embedded), so it is handed over.
    let o = run(&front, &f, &["exec", "--", "echo", "no-host"]);
    assert!(handed_over(&o), "{o:?}");

    let host = Host::start(&f.home);
    // With a host, the front alone runs the command through it: the caller's streams, its
    // exit status, its options.
    let o = run(&front, &f, &["exec", "--", "echo", "via-front"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "via-front\n");
    let ws = f.ws.display().to_string();
    let o = run(
        &front,
        &f,
        &[
            "exec",
            "--timeout",
            "30",
            "--workspace",
            &ws,
            "--",
            "sh",
            "-c",
            "echo out; exit 3",
        ],
    );
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
    // An error the host answers is the front's to print, as the full program prints it.
    let o = run(&front, &f, &["exec", "--profile", "no-such", "--", "true"]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with("error: unknown profile \"no-such\""),
        "{o:?}"
    );
    // The host's error quotes what it was given: the front shows every character of it
    // and obeys none (an escape sequence, a carriage return that would rewrite the line).
    for (given, raw) in [("\u{1b}[2Jwiped", "\u{1b}"), ("ok\rforged", "\r")] {
        let o = run(&front, &f, &["exec", "--profile", given, "--", "true"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{o:?}");
        assert!(err.starts_with("error: unknown profile"), "{err:?}");
        assert!(
            !err.contains(raw),
            "a raw control character reached the terminal: {err:?}"
        );
    }
    // The run is decided and recorded as any other exec through the host.
    let recs = records_of(&f, "echo via-front");
    assert_eq!(
        recs.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        ["decision", "execution"],
        "{recs:?}"
    );

    // Every other command line goes to the full program, even with the host up: another
    // command, `--help`, an option the front does not know, a repeated option.
    for args in [
        &["status"][..],
        &["exec", "--help"],
        &["exec", "--no-such-option", "--", "true"],
        &["exec", "--timeout", "1", "--timeout", "2", "--", "true"],
    ] {
        let o = run(&front, &f, args);
        assert!(handed_over(&o), "{args:?}: {o:?}");
    }

    // Beside the full program, the handed-over command lines work as ever.
    let o = run(
        &airlock_bin(),
        &f,
        &["exec", "--timeout", "1", "--timeout", "2", "--", "true"],
    );
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot be used multiple times"));
    let o = run(&airlock_bin(), &f, &["status"]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("host: running"),
        "{o:?}"
    );
    drop(host);
    assert!(verify(&f.home).status.success());
}

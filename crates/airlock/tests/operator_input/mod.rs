//! Files and input the operator hands the CLI, made hostile: a device, a FIFO nobody
//! writes to, a directory, a file over the cap, a symbolic link out of the policy
//! directory, and a config that names an id the sandbox must never run as. Every one is
//! refused quickly, naming the file, the reason and a `help:` line, never read until the
//! host runs out of memory, never hung, never quoted.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::text;

/// Run `airlock` with `args`, killing it (and failing) if it takes longer than 30 s: a
/// read that blocks on a FIFO must show up as a failure, not as a hung suite.
fn bounded_run(home: &Path, args: &[&str], stdin: Option<Vec<u8>>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_HOME", home)
        .env("RUST_BACKTRACE", "0")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = pipe.write_all(&bytes);
        });
    }
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("airlock {args:?} did not finish in 30 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Each hostile stand-in for a file, made at `path`.
fn hostile_files(dir: &Path, cap: usize) -> Vec<(&'static str, PathBuf, &'static str)> {
    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let subdir = dir.join("a-directory");
    std::fs::create_dir(&subdir).unwrap();
    let big = dir.join("big");
    std::fs::write(&big, vec![b'#'; cap + 1]).unwrap();
    vec![
        (
            "/dev/zero",
            PathBuf::from("/dev/zero"),
            "a character device",
        ),
        ("a FIFO", fifo, "a FIFO"),
        ("a directory", subdir, "a directory"),
        ("an oversized file", big, "bytes, more than the"),
    ]
}

fn assert_refused(o: &Output, needles: &[&str]) {
    let t = text(o);
    assert!(!o.status.success(), "accepted:\n{t}");
    assert_ne!(o.status.code(), Some(101), "panic:\n{t}");
    for n in needles {
        assert!(t.contains(n), "`{n}` missing from:\n{t}");
    }
    assert!(t.contains("help:"), "no help line:\n{t}");
}

#[test]
fn bounded_read_memory_schemas_and_traces_refuse_devices_fifos_directories_and_big_files() {
    let home = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    for (name, path, why) in hostile_files(files.path(), 1 << 20) {
        let p = path.to_str().unwrap();
        let o = bounded_run(home.path(), &["memory", "schema", "add", "x", p], None);
        assert_refused(&o, &["memory schema", why]);
        let o = bounded_run(home.path(), &["replay", p], None);
        // A trace file may be large: only the oversized stand-in is accepted (it is
        // streamed with a bound per line) and then fails as a trace, not as a read.
        if name == "an oversized file" {
            assert_ne!(o.status.code(), Some(101), "{}", text(&o));
        } else {
            assert_refused(&o, &["trace file", why]);
        }
    }
}

#[test]
fn bounded_read_the_config_file_refuses_devices_fifos_directories_and_big_files() {
    let files = tempfile::tempdir().unwrap();
    for (_, path, why) in hostile_files(files.path(), 1 << 20) {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("config")).unwrap();
        let config = home.path().join("config/airlock.toml");
        // A link is followed for the config file (dotfile managers link it), so the
        // check is on what it leads to.
        symlink(&path, &config).unwrap();
        let o = bounded_run(home.path(), &["check", "--", "ls"], None);
        assert_refused(&o, &["config file", why]);
    }
}

#[test]
fn bounded_read_policy_files_refuse_devices_fifos_directories_big_files_and_links() {
    let files = tempfile::tempdir().unwrap();
    // A file that is not a policy, with a secret first line, as /etc/shadow would be.
    let shadow = files.path().join("shadow");
    std::fs::write(&shadow, "root:$6$secret-hash-line:19000:0:99999:7:::\n").unwrap();
    let mut cases = hostile_files(files.path(), 1 << 20);
    cases.push((
        "a link out of the policy directory",
        shadow.clone(),
        "symbolic link",
    ));
    for (name, path, why) in cases {
        let home = tempfile::tempdir().unwrap();
        let local = home.path().join("config/policy/local");
        std::fs::create_dir_all(&local).unwrap();
        let entry = local.join("evil.cedar");
        if name == "a link out of the policy directory" {
            symlink(&path, &entry).unwrap();
        } else if name == "a directory" {
            std::fs::create_dir(&entry).unwrap();
        } else if name == "a FIFO" {
            assert!(Command::new("mkfifo")
                .arg(&entry)
                .status()
                .unwrap()
                .success());
        } else if name == "an oversized file" {
            std::fs::copy(&path, &entry).unwrap();
        } else {
            // A device node cannot be made here without mknod; a link to one is refused
            // as a link, which is checked above.
            continue;
        }
        let o = bounded_run(home.path(), &["check", "--", "ls"], None);
        assert_refused(&o, &["policy file", "evil.cedar", why]);
        assert!(
            !text(&o).contains("secret-hash-line"),
            "the linked file was quoted:\n{}",
            text(&o)
        );
    }
}

#[test]
fn bounded_read_an_action_on_stdin_is_capped() {
    let home = tempfile::tempdir().unwrap();
    let huge = vec![b' '; 4 * 1024 * 1024 + 10];
    let o = bounded_run(home.path(), &["check", "--action", "-"], Some(huge));
    assert_refused(&o, &["standard input", "longer than"]);
}

#[test]
fn i2_sandbox_uid_must_be_an_ordinary_unprivileged_id() {
    for (uid, why) in [
        ("4294967295", "above the range of ordinary ids"),
        ("2147483647", "above the range of ordinary ids"),
        ("65535", "16-bit"),
        ("0", "is root"),
    ] {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(home.path().join("config")).unwrap();
        std::fs::write(
            home.path().join("config/airlock.toml"),
            format!("[sandbox]\nuid = {uid}\n"),
        )
        .unwrap();
        let o = bounded_run(home.path(), &["check", "--", "ls"], None);
        assert_refused(&o, &["sandbox.uid", uid, why]);
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("config")).unwrap();
    std::fs::write(
        home.path().join("config/airlock.toml"),
        "[sandbox]\nuid = 1000\n",
    )
    .unwrap();
    let o = bounded_run(home.path(), &["check", "--", "ls"], None);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_workspace_whose_path_is_not_utf8_is_named_as_the_workspace() {
    use std::os::unix::ffi::OsStrExt;
    let home = tempfile::tempdir().unwrap();
    let parent = tempfile::tempdir().unwrap();
    let ws = parent
        .path()
        .join(std::ffi::OsStr::from_bytes(b"ws-\xff-not-utf8"));
    std::fs::create_dir(&ws).unwrap();
    let o = super::airlock(
        home.path(),
        &[
            std::ffi::OsStr::new("exec"),
            std::ffi::OsStr::new("--workspace"),
            ws.as_os_str(),
            std::ffi::OsStr::new("--"),
            std::ffi::OsStr::new("true"),
        ],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("workspace"), "{t}");
    assert!(!t.contains("state directory"), "{t}");
}

/// Errors quote what they were given (a JSON action, a file name): each is shown with its
/// terminal controls visible, whatever part of the CLI built the message.
#[test]
fn errors_that_echo_input_show_it_escaped() {
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["check", "--action", r#"{"type":"exec\u001b[2K\r\u202e"}"#][..],
        &[
            "memory",
            "schema",
            "add",
            "x",
            "/nonexistent/\u{1b}]0;title\u{7}schema",
        ][..],
        &["replay", "/nonexistent/\u{9b}2Ktraces\u{2066}"][..],
    ] {
        let o = bounded_run(home.path(), args, None);
        let t = text(&o);
        assert!(!o.status.success(), "{t}");
        let raw = t.chars().find(|&c| {
            (c.is_control() && c != '\n')
                || ('\u{202a}'..='\u{202e}').contains(&c)
                || ('\u{2066}'..='\u{2069}').contains(&c)
        });
        assert!(
            raw.is_none(),
            "raw {raw:?} in the error of {args:?}:\n{t:?}"
        );
        assert!(t.contains("\\u{"), "the hidden part is not shown:\n{t}");
    }
}

/// A trace file of one endless line (a sparse GiB of zero bytes, no newline) is replayed
/// with a bounded buffer: under an address-space limit far below its size the replay
/// reports the line as too long instead of dying for want of memory.
#[test]
fn bounded_read_a_trace_of_one_endless_line_costs_a_bounded_buffer() {
    let home = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    let trace = files.path().join("endless.jsonl");
    std::fs::File::create(&trace)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let o = Command::new("prlimit")
        .arg(format!("--as={}", 768u64 << 20))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_airlock"))
        .args(["replay", trace.to_str().unwrap()])
        .env("AIRLOCK_HOME", home.path())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("prlimit (util-linux) sets the address-space limit");
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(t.contains("line 1") && t.contains("over the"), "{t}");
}

//! I2 under load: 50 runs at once all succeed and leave no process behind.
//! (Its own test binary, so that no other test's children are around.)

mod common;

/// The looping shell each payload leaves behind: `sh -c LOOP <name>`, so its last argument
/// is the name, which no other process has as a whole argument.
const LOOP: &str = "while :; do sleep 1; done";

fn background_loop(name: &str) -> String {
    format!("sh -c '{LOOP}' {name} </dev/null >/dev/null 2>&1 &")
}

/// Host pids of the loops named `name`.
fn loops_named(name: &str) -> Vec<u32> {
    common::processes_with(name)
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let argv: Vec<&[u8]> = c.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
                argv.last() == Some(&name.as_bytes()) && argv.contains(&LOOP.as_bytes())
            })
        })
        .collect()
}

#[test]
fn fifty_concurrent_runs_succeed_and_leave_nothing_behind() {
    let (_d, ws) = common::workspace();
    let marker = format!("conc-stray-{}", std::process::id());
    // First, the search for strays is shown to see a loop while its run lasts, so an empty
    // result below means the processes are gone, not that the search is blind.
    let live = format!("{marker}-live");
    let run = {
        let ws = ws.clone();
        let payload = format!(
            "{} while [ ! -e seen ]; do sleep 0.05; done",
            background_loop(&live)
        );
        std::thread::spawn(move || common::run(&ws, &payload))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while loops_named(&live).is_empty() {
        if run.is_finished() {
            let out = run.join().unwrap();
            panic!(
                "the run ended before its loop showed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the running payload's loop never showed on the host"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::write(ws.join("seen"), b"").unwrap();
    let out = run.join().unwrap();
    assert_eq!(out.status, 0, "{}", String::from_utf8_lossy(&out.stderr));

    // Then 50 runs at once, each leaving a loop behind; every run must still end, and take
    // its loop with it.
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let ws = ws.clone();
            let payload = format!(
                "echo run-{i}; {} sleep 0.0{i}17",
                background_loop(&format!("{marker}-{i}"))
            );
            std::thread::spawn(move || common::run(&ws, &payload))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let out = h.join().unwrap();
        assert_eq!(out.status, 0, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("run-{i}\n"));
    }
    // Every helper has been reaped: no children of this process remain, zombie or not.
    // (A helper whose run ended is reaped on a thread of its own a moment after the run
    // returns, so this waits up to 5 s for the last ones.)
    let children = || -> String {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !children().trim().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let left = children();
    assert_eq!(left.trim(), "", "children left: {left}");
    // And no process any payload started lives on anywhere on the host.
    let stray = common::processes_with(&marker);
    assert!(stray.is_empty(), "processes left behind: {stray:?}");
}

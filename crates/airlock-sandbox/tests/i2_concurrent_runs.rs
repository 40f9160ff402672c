//! I2 under load: 50 runs at once all succeed and leave no process behind.
//! (Its own test binary, so that no other test's children are around.)

mod common;

#[test]
fn fifty_concurrent_runs_succeed_and_leave_nothing_behind() {
    let (_d, ws) = common::workspace();
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let ws = ws.clone();
            std::thread::spawn(move || common::run(&ws, &format!("echo run-{i}; sleep 0.0{i}17 &")))
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let out = h.join().unwrap();
        assert_eq!(out.status, 0, "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout), format!("run-{i}\n"));
    }
    // Every helper has been reaped: no children of this process remain, zombie or not.
    let children: String = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("children")).ok())
        .collect();
    assert_eq!(children.trim(), "", "children left: {children}");
    assert!(common::processes_with("airlock-ws-").is_empty());
}

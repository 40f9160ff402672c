//! The exec socket serves at most `max_sandboxes + max_queued + max_sessions + 16`
//! connections at once, each on a thread of its own: one more is refused at once, with a
//! line that says why, before any thread is started for it.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::super::exec;
use super::super::exec_fixture::fixture;
use super::super::host_fixture::Host;
use super::{init, wait_for};

#[test]
fn a_connection_past_the_most_the_exec_socket_serves_is_refused_at_once() {
    let f = fixture();
    init(
        &f,
        "\n[host]\nmax_sandboxes = 1\nmax_queued = 1\nmax_sessions = 1\n",
    );
    let _host = Host::start(&f.home);
    let socket = airlock_client::host::exec_socket(&f.home.join("state"));
    // A runaway client: connections that never send their request, each holding a
    // thread of the host. 1 + 1 + 1 + 16 are served.
    let idle: Vec<UnixStream> = (0..19)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    let extra = UnixStream::connect(&socket).unwrap();
    extra
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut answer = String::new();
    BufReader::new(&extra)
        .read_line(&mut answer)
        .expect("the connection past the most is answered at once, not left waiting");
    assert!(
        answer.contains("too many connections to the exec socket")
            && answer.contains("the most is 19"),
        "{answer}"
    );
    // The places come back as those connections end, and runs are served again.
    drop(idle);
    wait_for("an exec to be served again", || {
        let o = exec(&f, &[], "echo served");
        String::from_utf8_lossy(&o.stdout) == "served\n"
    });
}

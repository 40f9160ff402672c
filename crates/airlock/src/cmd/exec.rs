//! `airlock exec`: one command, decided, sandboxed and recorded ([`crate::service::exec`]).
//! Through the host when one serves the state dir (it runs the same service in its own
//! process, for this process's streams), embedded otherwise.

use crate::home::Home;
use crate::service::caller::Caller;
use crate::service::exec::Loaded;

/// `exec`'s options and command, read by the full program's parser or by the small front.
pub use airlock_client::front::ExecLine as ExecArgs;

pub fn run(args: ExecArgs) -> anyhow::Result<i32> {
    let home = Home::from_env()?;
    let request = args.request()?;
    // A host serving this state dir runs the command, admitted under its limits. (The
    // small `airlock` front usually sends it there itself; it comes here for a host that
    // is starting or stopping, which `find` waits for, for a command line the front did
    // not read, and when `airlock-full` is called by its own name.)
    let through_host = crate::host::exec_wire::HostRequest::Exec(request.clone());
    if let Some(code) = crate::host::exec_client::through_host(&home, &through_host)? {
        return Ok(code);
    }
    crate::service::exec::exec(
        &home,
        Loaded::Cold,
        &request,
        Caller::this_process(),
        |_| {},
    )
}

//! `airlock-sandbox-init`: the small single-threaded helper that builds a sandbox and starts
//! the payload in it. See [`airlock_sandbox::init`].

fn main() {
    airlock_sandbox::init::main()
}

//! A real `airlock serve` on a test's state dir, for the tests of the host.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `airlock serve`; stopped with SIGKILL when dropped (a test that wants a clean
/// stop sends SIGTERM itself).
pub struct Host {
    pub child: Child,
    log: PathBuf,
}

pub fn socket(home: &Path) -> PathBuf {
    home.join("state/host/api.sock")
}

impl Host {
    pub fn start(home: &Path) -> Host {
        Host::start_as(home, None)
    }

    /// The host as `uid` (and the same gid), or as the caller; its readiness is asked as
    /// that uid too, since the host answers only its own uid.
    pub fn start_as(home: &Path, uid: Option<u32>) -> Host {
        Host::start_with(home, uid, &[])
    }

    /// The host with `env` added to its environment.
    pub fn start_with_env(home: &Path, env: &[(&str, &str)]) -> Host {
        Host::start_with(home, None, env)
    }

    fn start_with(home: &Path, uid: Option<u32>, env: &[(&str, &str)]) -> Host {
        use std::os::unix::process::CommandExt;
        let as_uid = |c: &mut Command| {
            if let Some(uid) = uid {
                c.uid(uid).gid(uid);
            }
        };
        let log = home.join("serve.log");
        let mut serve = Command::new(env!("CARGO_BIN_EXE_airlock"));
        serve
            .env("AIRLOCK_HOME", home)
            .envs(env.iter().copied())
            .arg("serve")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        as_uid(&mut serve);
        let child = serve.spawn().unwrap();
        let mut host = Host { child, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut status = Command::new(env!("CARGO_BIN_EXE_airlock"));
            status
                .env("AIRLOCK_HOME", home)
                .args(["status", "--json"])
                .stdin(Stdio::null());
            as_uid(&mut status);
            let o = status.output().unwrap();
            if o.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
                if v["host"]["pid"] == host.child.id() {
                    return host;
                }
            }
            if let Ok(Some(status)) = host.child.try_wait() {
                panic!("the host exited ({status}): {}", host.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "the host never answered: {}",
                host.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// Wait for the process to end; its exit status.
    pub fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "the host did not stop: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

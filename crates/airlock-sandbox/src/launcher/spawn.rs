//! Start the helper with `posix_spawn` instead of `fork`, and keep track of it until it is
//! reaped.
//!
//! `fork` copies the page tables of the whole host process, which in a large multi-threaded
//! host costs more than everything else the launcher does before the sandbox exists.
//! glibc's `posix_spawn` uses `clone(CLONE_VM | CLONE_VFORK)`: the child borrows the parent's
//! memory until it calls `execve`, so nothing is copied.
//!
//! Written on top of `libc` rather than `std::process::Command` because `Command` can only
//! place descriptors at fixed numbers (3 to 6 here) with a `pre_exec` closure, and a
//! `pre_exec` closure (like `.uid()`/`.gid()`) makes it fall back to `fork`. `nix::spawn`
//! has no `addchdir_np`, so it cannot give the child its working directory.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::signal::SigSet;

/// The lowest descriptor number the spawn works with in the parent: above every number the
/// child's descriptors are placed at, so that no placement overwrites a source.
const FIRST_HIGH_FD: RawFd = 10;

/// What to start: an opened program, its arguments and the descriptors it gets.
pub(crate) struct SpawnSpec<'a> {
    /// The program, opened for reading. It is executed through `/proc/self/fd`, so a
    /// program in a directory the child's user cannot traverse still starts.
    pub(crate) program: &'a File,
    /// The argument vector, `argv[0]` included.
    pub(crate) argv: Vec<String>,
    /// Descriptors to pass: each source is placed at the given number (which must be
    /// below [`FIRST_HIGH_FD`] and above 2) in the child.
    pub(crate) passed: Vec<(BorrowedFd<'a>, RawFd)>,
}

/// A started child: its pid and the read ends of its stdout and stderr pipes. Dropping it
/// before it was waited for kills and reaps it, so it never stays a zombie.
#[derive(Debug)]
pub(crate) struct SpawnedChild {
    pid: libc::pid_t,
    /// Its exit status (the code, or 128 + signal) once it was reaped.
    status: Option<i32>,
    pub(crate) stdout: Option<File>,
    pub(crate) stderr: Option<File>,
}

impl SpawnedChild {
    /// What is left in place of a child that is reaped elsewhere (its owner moved it
    /// away): it names no process, and nothing is done to it.
    pub(crate) fn reaped() -> SpawnedChild {
        SpawnedChild {
            pid: 0,
            status: Some(0),
            stdout: None,
            stderr: None,
        }
    }

    /// The child's process id.
    pub(crate) fn id(&self) -> u32 {
        self.pid as u32
    }

    /// Send SIGKILL, unless the child was already reaped (its pid may then be another
    /// process's).
    pub(crate) fn kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        // SAFETY: kill(2) with integer arguments; the pid is our unreaped child's, so it
        // cannot have been reused.
        if unsafe { libc::kill(self.pid, libc::SIGKILL) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wait for the child to end and reap it. Returns its exit code, or 128 + the signal
    /// that ended it.
    pub(crate) fn wait(&mut self) -> io::Result<i32> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let mut raw = 0;
        loop {
            // SAFETY: waitpid(2) on our own child with a valid pointer to an int.
            let r = unsafe { libc::waitpid(self.pid, &mut raw, 0) };
            if r >= 0 {
                break;
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EINTR) {
                return Err(err);
            }
        }
        let status = if libc::WIFSIGNALED(raw) {
            128 + libc::WTERMSIG(raw)
        } else {
            libc::WEXITSTATUS(raw)
        };
        self.status = Some(status);
        Ok(status)
    }
}

impl Drop for SpawnedChild {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.kill();
            let _ = self.wait();
        }
    }
}

/// Start `spec` with an empty environment, `/` as working directory, stdin on `/dev/null`,
/// stdout and stderr on new pipes, the passed descriptors at their numbers, an empty signal
/// mask and every signal at its default disposition (except glibc's internal signals,
/// which it leaves ignored; the helper resets them). Every descriptor this process opens
/// is close-on-exec (the standard library and this crate open them so) and does not reach
/// the child. One it inherited from its own parent without close-on-exec does, as with a
/// fork: the helper closes everything above 6 first thing. (glibc's
/// `posix_spawn_file_actions_addclosefrom_np` would need glibc 2.34 and close the
/// program's descriptor before the exec.)
pub(crate) fn spawn(spec: &SpawnSpec<'_>) -> io::Result<SpawnedChild> {
    // High copies: sources above every target, so the order of the placements is free.
    let program = dup_high(spec.program.as_raw_fd())?;
    let passed = spec
        .passed
        .iter()
        .map(|(fd, target)| Ok((dup_high(fd.as_raw_fd())?, *target)))
        .collect::<io::Result<Vec<_>>>()?;
    let (stdout_read, stdout_write) = pipe()?;
    let (stderr_read, stderr_write) = pipe()?;
    let (stdout_write, stderr_write) = (
        dup_high(stdout_write.as_raw_fd())?,
        dup_high(stderr_write.as_raw_fd())?,
    );

    let mut actions = FileActions::new()?;
    actions.open(0, c"/dev/null", libc::O_RDONLY)?;
    actions.dup2(stdout_write.as_raw_fd(), 1)?;
    actions.dup2(stderr_write.as_raw_fd(), 2)?;
    for (fd, target) in &passed {
        debug_assert!((3..FIRST_HIGH_FD).contains(target));
        actions.dup2(fd.as_raw_fd(), *target)?;
    }
    actions.chdir(c"/")?;

    let mut attr = SpawnAttr::new()?;
    attr.set_sigmask(&SigSet::empty())?;
    attr.set_sigdefault(&SigSet::all())?;
    attr.set_flags(libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF)?;

    let path = CString::new(format!("/proc/self/fd/{}", program.as_raw_fd()))
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let args = spec
        .argv
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "an argument holds NUL"))?;
    let mut argv: Vec<*mut libc::c_char> = args.iter().map(|a| a.as_ptr().cast_mut()).collect();
    argv.push(std::ptr::null_mut());
    let envp: [*mut libc::c_char; 1] = [std::ptr::null_mut()];
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the duration of the call: `path` and the strings of
    // `args` are live NUL-terminated strings, `argv` and `envp` are NULL-terminated arrays,
    // `actions` and `attr` were initialized by their constructors. posix_spawn does not
    // write through argv/envp (the `*mut` is a historical signature). glibc returns only
    // after the child called execve (or failed to, which it then reports as the result).
    let r = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            actions.as_ptr(),
            attr.as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(SpawnedChild {
        pid,
        status: None,
        stdout: Some(File::from(stdout_read)),
        stderr: Some(File::from(stderr_read)),
    })
}

/// A pipe whose both ends are close-on-exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// A close-on-exec copy of `fd` at [`FIRST_HIGH_FD`] or above.
fn dup_high(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a live descriptor returns a new one we then own.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, FIRST_HIGH_FD) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` was just created and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Turn a `posix_spawn*` result (an error number, not -1 and errno) into a `Result`.
fn check(r: libc::c_int) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// `posix_spawn_file_actions_t`, boxed so that it never moves once initialized (POSIX
/// does not say these objects may be moved) and destroyed on drop.
struct FileActions(Box<MaybeUninit<libc::posix_spawn_file_actions_t>>);

impl FileActions {
    fn new() -> io::Result<FileActions> {
        let mut actions = Box::new(MaybeUninit::uninit());
        // SAFETY: init writes a valid object into the (boxed, so stable) storage.
        check(unsafe { libc::posix_spawn_file_actions_init(actions.as_mut_ptr()) })?;
        Ok(FileActions(actions))
    }

    fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        self.0.as_ptr()
    }

    fn open(&mut self, fd: RawFd, path: &CStr, flags: libc::c_int) -> io::Result<()> {
        // SAFETY: the object was initialized in `new`; glibc copies `path`.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(self.0.as_mut_ptr(), fd, path.as_ptr(), flags, 0)
        })
    }

    fn dup2(&mut self, fd: RawFd, target: RawFd) -> io::Result<()> {
        // SAFETY: the object was initialized in `new`; plain integers otherwise.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(self.0.as_mut_ptr(), fd, target) })
    }

    fn chdir(&mut self, path: &CStr) -> io::Result<()> {
        // SAFETY: the object was initialized in `new`; glibc (>= 2.29) copies `path`.
        check(unsafe {
            libc::posix_spawn_file_actions_addchdir_np(self.0.as_mut_ptr(), path.as_ptr())
        })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialized in `new` and destroyed exactly once, here.
        unsafe { libc::posix_spawn_file_actions_destroy(self.0.as_mut_ptr()) };
    }
}

/// `posix_spawnattr_t`, boxed and destroyed like [`FileActions`].
struct SpawnAttr(Box<MaybeUninit<libc::posix_spawnattr_t>>);

impl SpawnAttr {
    fn new() -> io::Result<SpawnAttr> {
        let mut attr = Box::new(MaybeUninit::uninit());
        // SAFETY: init writes a valid object into the (boxed, so stable) storage.
        check(unsafe { libc::posix_spawnattr_init(attr.as_mut_ptr()) })?;
        Ok(SpawnAttr(attr))
    }

    fn as_ptr(&self) -> *const libc::posix_spawnattr_t {
        self.0.as_ptr()
    }

    fn set_sigmask(&mut self, set: &SigSet) -> io::Result<()> {
        // SAFETY: the object was initialized in `new`; `set` is a valid sigset_t.
        check(unsafe { libc::posix_spawnattr_setsigmask(self.0.as_mut_ptr(), set.as_ref()) })
    }

    fn set_sigdefault(&mut self, set: &SigSet) -> io::Result<()> {
        // SAFETY: the object was initialized in `new`; `set` is a valid sigset_t.
        check(unsafe { libc::posix_spawnattr_setsigdefault(self.0.as_mut_ptr(), set.as_ref()) })
    }

    fn set_flags(&mut self, flags: libc::c_int) -> io::Result<()> {
        let flags = libc::c_short::try_from(flags)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: the object was initialized in `new`; plain integer flags.
        check(unsafe { libc::posix_spawnattr_setflags(self.0.as_mut_ptr(), flags) })
    }
}

impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialized in `new` and destroyed exactly once, here.
        unsafe { libc::posix_spawnattr_destroy(self.0.as_mut_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn spec<'a>(program: &'a File, args: &[&str]) -> SpawnSpec<'a> {
        SpawnSpec {
            program,
            argv: args.iter().map(|a| a.to_string()).collect(),
            passed: Vec::new(),
        }
    }

    fn read_all(f: Option<File>) -> String {
        let mut s = String::new();
        f.unwrap().read_to_string(&mut s).unwrap();
        s
    }

    /// Descriptors of this process that an exec keeps: ones it inherited from its own
    /// parent without close-on-exec (this process opens none).
    fn kept_across_exec() -> Vec<i32> {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
            .filter(|fd| {
                // SAFETY: F_GETFD only queries the flags of an integer descriptor.
                let flags = unsafe { libc::fcntl(*fd, libc::F_GETFD) };
                flags >= 0 && flags & libc::FD_CLOEXEC == 0
            })
            .collect()
    }

    #[test]
    fn child_gets_exactly_the_passed_descriptors_cwd_env_and_signals() {
        let sh = File::open("/bin/sh").unwrap();
        let (a, _a_peer) = UnixStream::pair().unwrap();
        let (b, _b_peer) = UnixStream::pair().unwrap();
        // A descriptor of this process that is close-on-exec and not passed.
        let unpassed = File::open("/dev/null").unwrap();
        let mut s = spec(
            &sh,
            &[
                "sh",
                "-c",
                // The shell's own descriptors are its builtins': list them with a child.
                "ls /proc/self/fd | sort -n | tr '\\n' ' '; echo; pwd; env | wc -l; \
                 grep -E '^(SigBlk|SigIgn)' /proc/self/status; readlink /proc/self/fd/0",
            ],
        );
        s.passed = vec![(a.as_fd(), 3), (b.as_fd(), 5)];
        let mut child = spawn(&s).unwrap();
        let out = read_all(child.stdout.take());
        let err = read_all(child.stderr.take());
        assert_eq!(child.wait().unwrap(), 0, "{out}\n{err}");
        let lines: Vec<&str> = out.lines().collect();
        let fds: Vec<i32> = lines[0]
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        // 0-2, the passed 3 and 5, and the directory `ls` reads (the lowest free number).
        assert_eq!(fds[..6], [0, 1, 2, 3, 4, 5], "{out}");
        let kept = kept_across_exec();
        for fd in &fds[6..] {
            assert!(
                kept.contains(fd),
                "descriptor {fd} leaked: {out} (kept: {kept:?})"
            );
        }
        assert!(!fds.contains(&unpassed.as_raw_fd()), "{out}");
        assert_eq!(lines[1], "/");
        // `env` run by the shell sees only what the shell itself sets (PWD).
        assert!(lines[2].trim().parse::<u32>().unwrap() <= 1, "{out}");
        assert_eq!(lines[3], "SigBlk:\t0000000000000000", "{out}");
        // This test process ignores SIGPIPE (bit 12); the child has it at its default. Only
        // glibc's internal signals 32 and 33 are left ignored (the helper resets them).
        let ignored = u64::from_str_radix(lines[4].trim_start_matches("SigIgn:\t"), 16).unwrap();
        assert_eq!(ignored & !0x1_8000_0000, 0, "{out}");
        assert_eq!(lines[5], "/dev/null", "{out}");
    }

    #[test]
    fn a_killed_child_reports_128_plus_the_signal_and_is_reaped() {
        let sh = File::open("/bin/sh").unwrap();
        let mut child = spawn(&spec(&sh, &["sh", "-c", "sleep 30"])).unwrap();
        let pid = child.id();
        child.kill().unwrap();
        assert_eq!(child.wait().unwrap(), 128 + libc::SIGKILL);
        // Reaped: no such process any more (not even a zombie).
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        // Killing or waiting again does not touch a pid that may be reused.
        child.kill().unwrap();
        assert_eq!(child.wait().unwrap(), 128 + libc::SIGKILL);
    }

    #[test]
    fn dropping_an_unwaited_child_kills_and_reaps_it() {
        let sh = File::open("/bin/sh").unwrap();
        let child = spawn(&spec(&sh, &["sh", "-c", "sleep 30"])).unwrap();
        let pid = child.id();
        drop(child);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn an_exit_code_comes_back() {
        let sh = File::open("/bin/sh").unwrap();
        let mut child = spawn(&spec(&sh, &["sh", "-c", "exit 7"])).unwrap();
        assert_eq!(child.wait().unwrap(), 7);
    }

    #[test]
    fn an_exec_failure_is_the_spawn_error() {
        // A readable file that is not executable: execve fails with EACCES, and
        // posix_spawn reports it as its result instead of starting a child.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("not-executable");
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        let file = File::open(&path).unwrap();
        let err = spawn(&spec(&file, &["x"])).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    }
}

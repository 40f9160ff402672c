//! A run staged ahead of its request, in the host.
//!
//! A command run through the host is most often followed by another in the same
//! workspace, from the same directory, under the same profile. Once a run is over and no
//! other is in flight, the host's pool (`crate::host::pool`) takes one of its sandboxes
//! and does for the next such run everything that does not depend on its command: the
//! session id, the workspace's overlay layers, the proxy's socket, and the sandbox's
//! attach, which mounts the workspace, confines the payload and attests it. The staged
//! run then waits, confined and empty, as a run's sandbox waits for the Gate today.
//!
//! A request takes it only when it would have set up exactly the same run: the same
//! policy profile and the same whole sandbox profile (workspace, working directory,
//! environment, limits, uid, config), no secrets, the proxy's CA unchanged, nothing
//! recovered in the workspace since, and the sandbox still alive. Everything after that
//! is the ordinary run: the Gate decides the command (a refusal tears the staged sandbox
//! down unused), the proxy serves with the net rules as they are at the request, the
//! attestation taken at the attach goes into the execution record, and the commit is
//! decided as for any run. What the staging saves is the attach's milliseconds, which
//! are otherwise the critical path of a short command.
//!
//! A staged run is not a session: it is recorded nowhere until a request takes it, and
//! `airlock kill` does not see it (there is nothing in it to kill). It counts against
//! the pool's size, and is dropped when its group's config changes, when it dies, and
//! after [`AHEAD_TTL`] unused: it holds a bind of the workspace, which keeps the
//! workspace's file system busy.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_sandbox::{DeferredOutput, OutputMode, PooledSandbox, SandboxProfile};

use super::{Preparing, RunSetup, SpawnedPids};
use crate::config::Config;
use crate::egress::EgressSetup;
use crate::home::Home;

/// How long a staged run waits for a request before it is dropped.
pub(crate) const AHEAD_TTL: Duration = Duration::from_secs(60);

/// What a run looked like before its own parts were added: a staged run serves a
/// request of the same shape.
#[derive(Clone, PartialEq)]
pub(crate) struct AheadShape {
    /// The policy profile the run is decided under.
    pub policy_profile: String,
    /// The sandbox profile with its workspace, working directory and limits, before the
    /// run's overlay layers and proxy socket are added.
    pub profile: SandboxProfile,
    pub cwd: PathBuf,
}

/// See the module documentation.
pub(crate) struct StagedRun {
    // Declared first, so dropped first: the sandbox goes before its socket and layers.
    preparing: Preparing,
    run: RunSetup,
    shape: AheadShape,
    spawned: SpawnedPids,
    output: DeferredOutput,
    /// The proxy CA the sandbox was given to trust.
    ca_pem: String,
    /// The workspace and the working directory the sandbox was attached to, as
    /// (device, inode): a directory removed and made again under the same path is
    /// another one, which the staged sandbox does not see.
    dirs: Option<[(u64, u64); 2]>,
    staged_at: Instant,
}

impl StagedRun {
    /// Stage a run of `shape` in `pooled`, a sandbox of the shape's base. Returns once the
    /// attach is under way; it goes on on a thread of its own.
    pub(crate) fn stage(
        home: &Home,
        cfg: &Config,
        shape: AheadShape,
        pooled: PooledSandbox,
        pool: Arc<crate::host::pool::SandboxPool>,
    ) -> anyhow::Result<StagedRun> {
        // Looked at before the attach, so that a directory replaced during it shows too.
        let dirs = dir_ids(&shape);
        let egress = EgressSetup::load(home, &[])?;
        let ca_pem = egress.ca_pem().to_string();
        let mut run = RunSetup::new(home, cfg, egress, shape.profile.clone())?;
        let spawned = SpawnedPids::default();
        let output = DeferredOutput::new();
        let preparing = Preparing::start(
            &run.profile,
            &shape.cwd,
            OutputMode::Deferred(output.clone()),
            spawned.hook(),
            Some((pooled, pool)),
        )?;
        run.binding.start_runtime()?;
        Ok(StagedRun {
            preparing,
            run,
            shape,
            spawned,
            output,
            ca_pem,
            dirs,
            staged_at: Instant::now(),
        })
    }

    /// The session id the run will have.
    pub(crate) fn session_id(&self) -> &str {
        &self.run.session_id
    }

    /// The shape it was staged for.
    pub(crate) fn shape(&self) -> &AheadShape {
        &self.shape
    }

    /// Whether it may serve a request of `shape` whose proxy would serve with `egress`.
    /// Cheap: three `stat`s.
    pub(crate) fn fits(&self, shape: &AheadShape, egress: &EgressSetup) -> bool {
        self.shape == *shape
            && self.ca_pem == egress.ca_pem()
            && !self.expired()
            && !self.killed()
            && self.dirs.is_some()
            && dir_ids(shape) == self.dirs
    }

    /// The kill switch went through its run dir (`kill --all` takes every run dir, this
    /// one's too): its session is killed, so no command may run in it.
    fn killed(&self) -> bool {
        self.run
            .binding
            .run_dir()
            .join(crate::service::kill::KILLED_MARKER)
            .exists()
    }

    /// Waited longer than [`AHEAD_TTL`].
    pub(crate) fn expired(&self) -> bool {
        self.staged_at.elapsed() > AHEAD_TTL
    }

    /// Still being attached, or attached and waiting: not failed, not dead.
    pub(crate) fn is_alive(&mut self) -> bool {
        self.preparing.is_alive()
    }

    /// The run, for the request that took it: its proxy serves with `egress` (the net
    /// rules as they are now) and its output goes to `output`.
    pub(super) fn into_run(
        self,
        egress: EgressSetup,
        output: OutputMode,
    ) -> anyhow::Result<(RunSetup, Preparing, SpawnedPids)> {
        let StagedRun {
            preparing,
            mut run,
            spawned,
            output: later,
            ..
        } = self;
        later.set(output);
        run.binding.renew_setup(egress)?;
        Ok((run, preparing, spawned))
    }
}

/// The (device, inode) of the shape's workspace and working directory, or `None` when
/// either cannot be looked at.
fn dir_ids(shape: &AheadShape) -> Option<[(u64, u64); 2]> {
    use std::os::unix::fs::MetadataExt;
    let id = |p: &std::path::Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    Some([id(&shape.profile.workspace)?, id(&shape.cwd)?])
}

//! Escape probes for the Airlock sandbox.
//!
//! The `airlock-probes` binary runs *inside* a sandbox and attempts escapes: forbidden system
//! calls, writes to read-only trees, links out of the workspace, signals to processes outside,
//! connections to host listeners, foreign system-call ABIs, a fork bomb, and leaks of
//! descriptors, environment and mounts. Each probe states the exact errno or signal a confined
//! process must see; success, a different errno, or a probe that could not run is a failure.
//!
//! The catalogue is data ([`probes::all`]), so it can be listed and counted:
//!
//! ```
//! let probes = airlock_probes::probes::all();
//! assert!(probes.len() >= 40);
//! assert!(probes.iter().any(|p| p.name == "clone3_enosys"));
//! ```

pub mod context;
pub mod names;
pub mod probe;
pub mod probes;
pub mod report;
pub mod sys;

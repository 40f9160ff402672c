//! The integration tests of airlock-workspace: one binary, one module per job.
//!
//! Upper layers are made by a real overlayfs mount (`unshare -Urm`, `userxattr`), so the
//! format read is the kernel's, not a copy of it; a few entries no overlay can create
//! from inside (device nodes) are made in the upper directory directly, as root.

mod suite;

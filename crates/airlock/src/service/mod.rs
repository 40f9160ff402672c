//! The services both entry points call: the command line running embedded (no host holds
//! the state dir) and `airlock serve`'s API. Each takes its inputs as plain values and
//! returns a report; neither reads the terminal nor prints, so the same input gives the
//! same decision and the same records whichever process runs it.

pub mod approvals;
pub mod check;
pub mod replay;
pub mod status;

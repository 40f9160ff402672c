//! Scheduled tasks (`docs/tasks.md`): a prompt the host runs on a schedule, each run a
//! session of its own with its own budget, under the owner's per-day budget, taint and
//! kill switch.
//!
//! - [`plan`]: the scheduler's rules as pure functions of a task's state and an instant
//!   (due, backoff, auto-pause, missed runs, kill), tested with injected instants;
//! - [`store`]: the tasks and their run history in the state dir;
//! - [`day_budget`]: a task's own per-day budget over its runs of one day;
//! - [`new_task`]: the one way a task is made, from the command line or from an
//!   approved `task.schedule` action, with every check in one place.
//!
//! The host runs them (`crate::host::scheduler`); the commands are `airlock tasks …`
//! (`crate::service::tasks`).

pub mod clock;
pub mod day_budget;
pub mod new_task;
pub mod plan;
pub mod store;

//! The services both entry points call: the command line running embedded (no host holds
//! the state dir) and `airlock serve`'s API. Each takes its inputs as plain values and
//! returns a report; neither reads the terminal nor prints, so the same input gives the
//! same decision and the same records whichever process runs it.

pub mod approvals;
pub mod audit;
pub mod caller;
pub mod check;
pub mod conversation;
pub mod decider;
pub mod driven;
pub mod evidence;
pub mod exec;
pub mod grants;
pub mod kill;
pub mod memory;
pub mod record_log;
pub mod replay;
pub mod replies;
pub mod run;
pub mod status;
pub mod tasks;

/// An error that is the serving side's fault (its store, audit log or config failed), not
/// the caller's: the host answers it with a 500, where a request it cannot carry out (an
/// unknown id, a decided request, a wrong hash) is a 400. Its message is the cause's.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Fault(Box<dyn std::error::Error + Send + Sync + 'static>);

/// Mark `e` as the serving side's fault ([`Fault`]).
pub fn fault(e: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(Fault(e.into()))
}

/// Whether `e` is the serving side's fault.
pub fn is_fault(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Fault>().is_some()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_fault_keeps_its_message_and_is_told_from_a_callers_error() {
        let cause = anyhow::anyhow!("disk full").context("cannot append to the audit log");
        let marked = super::fault(cause);
        assert!(super::is_fault(&marked));
        assert_eq!(
            format!("{marked:#}"),
            "cannot append to the audit log: disk full"
        );
        assert!(!super::is_fault(&anyhow::anyhow!(
            "no approval request `x`"
        )));
    }
}

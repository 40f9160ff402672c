//! I4: nothing the agent can write changes policy, config, approvals, grants, budgets,
//! secrets or the audit log. A hijacked model drives the real `airlock run` (the
//! scripted model is the only stand-in) and tries every tool it has against each of
//! them (`hijacked_agent`); and the agent crate cannot even name the store's
//! operator-side capabilities (`agent_crate_names`).

mod agent_crate_names;
mod exec_fixture;
mod hijacked_agent;

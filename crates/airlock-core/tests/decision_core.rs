//! The decision core under mutation testing (`cargo mutants -p airlock-core`, see
//! docs/testing.md): tests that each pin a decision the Gate, the policy facts or the
//! provenance checks take, written for mutants that survived the crate's other tests.
//! Each test names the behaviour it holds; none checks a value it computed itself.

#[path = "decision_core/facts.rs"]
mod facts;
#[path = "decision_core/gate.rs"]
mod gate;
#[path = "decision_core/path_fuzz.rs"]
mod path_fuzz;
#[path = "decision_core/policy.rs"]
mod policy;
#[path = "decision_core/provenance.rs"]
mod provenance;

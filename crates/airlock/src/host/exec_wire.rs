//! The wire format of `exec`, `run` and `chat` through the host, on
//! `<state>/host/exec.sock`: defined in `airlock_client::wire`, which the small `airlock`
//! front shares (see there for the exchange).

pub use airlock_client::wire::{
    AgentRequest, ExecAnswer, ExecRequest, HostRequest, AGENT_ENV, MAX_REQUEST_BYTES,
};

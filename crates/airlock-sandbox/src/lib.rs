//! airlock-sandbox: native sandbox (being built).

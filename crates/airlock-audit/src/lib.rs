//! airlock-audit: the tamper-evident audit log (being built).

//! The channel adapters against local fakes of their platforms (each speaking its real
//! wire format over loopback TLS with a test CA): one test binary for the crate.

mod suite;

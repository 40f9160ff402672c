#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| airlock_core_fuzz::untrusted_text(data));

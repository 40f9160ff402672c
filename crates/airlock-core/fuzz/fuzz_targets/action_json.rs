#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| airlock_core_fuzz::action_json(data));

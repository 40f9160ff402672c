//! `AIRLOCK_API_KEY` is read once and removed from the process environment, so no child
//! process inherits it. (Its own test binary: it changes the process environment.)

use airlock_agent::provider::EnvOverrides;
use secrecy::ExposeSecret;

#[test]
fn taking_the_overrides_removes_the_key_from_the_environment() {
    std::env::set_var("AIRLOCK_API_KEY", "sk-read-once-0123456789");
    std::env::set_var("AIRLOCK_MODEL", "m1");
    let env = EnvOverrides::take_from_process();
    assert_eq!(
        env.api_key.as_ref().unwrap().expose_secret(),
        "sk-read-once-0123456789"
    );
    assert_eq!(env.model.as_deref(), Some("m1"));
    assert!(std::env::var_os("AIRLOCK_API_KEY").is_none());
    let child = std::process::Command::new("env").output().expect("run env");
    assert!(!String::from_utf8_lossy(&child.stdout).contains("sk-read-once"));
    // A second read finds nothing.
    assert!(EnvOverrides::take_from_process().api_key.is_none());
    assert!(!format!("{env:?}").contains("sk-read-once"));
}

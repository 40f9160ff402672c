//! The payload's environment: the profile's variables minus those that change how the
//! shell reads or starts.
//!
//! The Gate decides on its parse of the command as bash reads it, and the sandbox runs it
//! with `bash -c`. Variables in the environment could make that bash run other code
//! first (`BASH_ENV`, `ENV`, exported functions `BASH_FUNC_name%%`), trace or change
//! options (`SHELLOPTS`, `BASHOPTS`, `POSIXLY_CORRECT`, `BASH_COMPAT`), or change what a
//! command word finds (`EXECIGNORE`, `BASH_LOADABLES_PATH`). They are removed here, in
//! the helper, right before `execve`, so no caller's profile can pass them.

use std::collections::BTreeMap;

/// Variables bash or a `sh` it starts reads at startup or that change its grammar,
/// options or command lookup.
const SHELL_STARTUP: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "POSIXLY_CORRECT",
    "BASH_COMPAT",
    "BASH_XTRACEFD",
    "PS4",
    "EXECIGNORE",
    "GLOBIGNORE",
    "BASH_LOADABLES_PATH",
    "PROMPT_COMMAND",
];

/// Whether `name` must not reach the payload: a startup or grammar variable, or an
/// exported shell function (`BASH_FUNC_name%%`, or any name holding `%%`, the suffix
/// bash gives exported functions).
pub fn is_shell_startup_variable(name: &str) -> bool {
    SHELL_STARTUP.contains(&name) || name.starts_with("BASH_FUNC_") || name.contains("%%")
}

/// `env` without the variables of [`is_shell_startup_variable`].
pub fn for_payload(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(name, _)| !is_shell_startup_variable(name))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// SHA-256 (lower-case hex) of `env` as the payload gets it ([`for_payload`]), for the
/// attestation: the host compares it with the environment the run asked for.
pub fn digest(env: &BTreeMap<String, String>) -> String {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for (k, v) in for_payload(env) {
        // Lengths first: no two environments give the same bytes.
        hasher.update((k.len() as u64).to_le_bytes());
        hasher.update(k.as_bytes());
        hasher.update((v.len() as u64).to_le_bytes());
        hasher.update(v.as_bytes());
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_variables_and_exported_functions_are_removed() {
        let env: BTreeMap<String, String> = [
            ("PATH", "/usr/bin"),
            ("HOME", "/tmp"),
            ("BASH_ENV", "/workspace/x"),
            ("ENV", "/workspace/x"),
            ("SHELLOPTS", "xtrace"),
            ("BASHOPTS", "extglob"),
            ("BASH_FUNC_ls%%", "() { id; }"),
            ("ls%%", "() { id; }"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let kept: Vec<String> = for_payload(&env).into_keys().collect();
        assert_eq!(kept, ["HOME", "PATH"]);
    }
}

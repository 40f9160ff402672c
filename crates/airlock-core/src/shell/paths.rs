//! Program paths: lexical normalization and the caller-supplied PATH lookup.

use super::ShellFacts;

/// Normalize an absolute path without touching the filesystem: `.` and empty
/// components are dropped and `..` removes the previous component (`/..` stays `/`).
/// `None` for a relative path.
pub fn normalize_absolute(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    Some(format!("/{}", parts.join("/")))
}

/// Fill `resolved_path` of every command whose program is a bare name, using `lookup`
/// (the caller's PATH search on the host; the core itself never reads the filesystem).
/// Programs given as paths already carry their lexically normalized path.
pub fn resolve_programs(facts: &mut ShellFacts, lookup: &dyn Fn(&str) -> Option<String>) {
    for command in &mut facts.commands {
        if command.resolved_path.is_some()
            || command.dynamic_program
            || command.program.is_empty()
            || command.program.contains('/')
        {
            continue;
        }
        command.resolved_path =
            lookup(&command.program).map(|found| normalize_absolute(&found).unwrap_or(found));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_normalization() {
        assert_eq!(
            normalize_absolute("/bin/../usr/bin/ls").as_deref(),
            Some("/usr/bin/ls")
        );
        assert_eq!(
            normalize_absolute("//usr/./bin//x").as_deref(),
            Some("/usr/bin/x")
        );
        assert_eq!(normalize_absolute("/../../x").as_deref(), Some("/x"));
        assert_eq!(normalize_absolute("bin/x"), None);
    }
}

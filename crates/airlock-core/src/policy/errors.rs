//! Policy errors that point at the file and line, rustc style.

use miette::Diagnostic;

/// A policy or schema problem. Startup stops on any of these.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("policy does not parse:\n{0}")]
    Parse(String),
    #[error("policy does not validate against the Airlock schema:\n{0}")]
    Invalid(String),
    #[error("schema error:\n{0}")]
    Schema(String),
    #[error("{file}:{line}: duplicate policy @id(\"{id}\")\nhelp: every policy needs a unique @id across all policy files")]
    DuplicateId {
        id: String,
        file: String,
        line: usize,
    },
    #[error("{file}:{line}: policy {id} is a forbid with @ask\nhelp: @ask only applies to permit policies")]
    AskOnForbid {
        id: String,
        file: String,
        line: usize,
    },
    #[error("{file}:{line}: policy {id} has @approvers({value:?}), which is not a list of owner and admin\nhelp: @approvers(\"admin\") on an @ask permit lets a channel's admins approve what it holds; the owner always may")]
    BadApprovers {
        id: String,
        file: String,
        line: usize,
        value: String,
    },
    #[error("{file}:{line}: policy {id} has @approvers but no @ask\nhelp: @approvers names who may answer what an @ask permit holds")]
    ApproversWithoutAsk {
        id: String,
        file: String,
        line: usize,
    },
    #[error("{file}:{line}: {message}\nhelp: {help}")]
    TooComplex {
        file: String,
        line: usize,
        message: String,
        help: String,
    },
    #[error("cannot build the policy request: {0}")]
    Request(String),
    #[error("cannot read policy file {file}: {reason}")]
    Io { file: String, reason: String },
}

/// 1-based line and column of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rfind('\n').map_or(offset, |i| offset - i - 1) + 1;
    (line, col)
}

/// Render a Cedar diagnostic as `file:line:col: message` plus the offending line.
pub fn render(diag: &(dyn Diagnostic + '_), file: &str, text: &str) -> String {
    let mut out = String::new();
    let mut first_label = None;
    if let Some(labels) = diag.labels() {
        first_label = labels.into_iter().next();
    }
    // Some errors keep their location on a related/inner diagnostic.
    if first_label.is_none() {
        if let Some(related) = diag.related() {
            for r in related {
                if let Some(mut l) = r.labels() {
                    first_label = l.next();
                    if first_label.is_some() {
                        break;
                    }
                }
            }
        }
    }
    match &first_label {
        Some(label) => {
            let (line, col) = line_col(text, label.offset());
            out.push_str(&format!("{file}:{line}:{col}: {diag}"));
            if let Some(src_line) = text.lines().nth(line - 1) {
                out.push_str(&format!("\n  {line} | {src_line}"));
            }
        }
        None => out.push_str(&format!("{file}: {diag}")),
    }
    if let Some(help) = diag.help() {
        out.push_str(&format!("\nhelp: {help}"));
    }
    out
}

/// Line where a policy starts in its source file.
pub fn policy_line(policy: &cedar_policy::Policy, text: &str) -> usize {
    // `Policy::to_string` re-renders, so locate by the policy's first effect keyword after
    // its annotations; fall back to line 1 if the text cannot be found.
    let id = policy.annotation("id");
    if let Some(id) = id {
        let needle = format!("@id(\"{id}\")");
        if let Some(pos) = text.find(&needle) {
            return line_col(text, pos).0;
        }
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_and_column() {
        assert_eq!(line_col("ab\ncd\nef", 4), (2, 2));
        assert_eq!(line_col("ab", 0), (1, 1));
        assert_eq!(line_col("ab", 99), (1, 3));
    }
}

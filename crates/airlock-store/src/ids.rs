//! Identifiers: generated ones are random, given ones are checked.
//!
//! A session id becomes a directory name (`<state>/sessions/<id>/workspace`), so it is
//! restricted to characters that cannot climb out of that directory or hide in a listing.

use crate::error::StoreError;

/// Longest accepted id.
pub const MAX_ID_LEN: usize = 64;

/// A fresh random id such as `s-3f9a0c2e7b1d4a6f`: a one-letter prefix naming the kind of
/// record, and 64 random bits.
pub(crate) fn random_id(prefix: &str) -> Result<String, StoreError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|e| StoreError::Random(e.to_string()))?;
    Ok(format!("{prefix}-{}", hex::encode(bytes)))
}

/// Check an id given by a caller: 1 to 64 characters of `A-Z a-z 0-9 _ . -`, starting with
/// a letter or digit (so never `.`, `..` or a hidden name).
pub fn validate_id(field: &'static str, id: &str) -> Result<(), StoreError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    let starts_well = id.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if id.is_empty() || id.len() > MAX_ID_LEN || !starts_well || !id.chars().all(ok_char) {
        return Err(StoreError::InvalidInput {
            field,
            reason: format!("`{}` is not a valid id", id.escape_debug()),
            help: format!(
                "use 1 to {MAX_ID_LEN} characters from A-Z, a-z, 0-9, `_`, `.`, `-`, starting with a letter or digit"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_escape_a_directory_are_refused() {
        for bad in [
            "",
            ".",
            "..",
            "../x",
            "a/b",
            ".hidden",
            "a\0b",
            "-x",
            &"a".repeat(65),
        ] {
            assert!(validate_id("id", bad).is_err(), "{bad:?} accepted");
        }
        for good in ["s1", "s-3f9a", "Work_2.v3"] {
            validate_id("id", good).unwrap();
        }
    }

    #[test]
    fn random_ids_are_valid_and_distinct() {
        let a = random_id("s").unwrap();
        let b = random_id("s").unwrap();
        assert_ne!(a, b);
        validate_id("id", &a).unwrap();
    }
}

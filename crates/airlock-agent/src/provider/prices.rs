//! The shipped price table (`prices.toml`): what the models of both providers cost, so the
//! cost budget works without the operator typing prices in. A model it does not list has no
//! price, and only the token budgets stop it.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::agent::PriceTable;

/// The table, compiled in: an operator cannot lower the prices by editing a file the agent
/// could write, and a build always has one.
const SHIPPED: &str = include_str!("prices.toml");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriceFile {
    /// The date the prices were taken from the providers' pages.
    taken: String,
    models: BTreeMap<String, PriceTable>,
}

/// The shipped prices, parsed once.
fn shipped() -> &'static PriceFile {
    static TABLE: std::sync::OnceLock<PriceFile> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        // The file is part of the build and a unit test parses it, so this cannot fail in
        // a released binary; if it ever did, no model would be priced (token limits still
        // apply), which is the same as an unknown model.
        toml::from_str(SHIPPED).unwrap_or_else(|_| PriceFile {
            taken: String::new(),
            models: BTreeMap::new(),
        })
    })
}

/// The date the shipped prices were taken (`YYYY-MM-DD`).
pub fn shipped_prices_taken() -> &'static str {
    &shipped().taken
}

/// The shipped price of `model`: an exact name, or a listed name followed by a date
/// suffix (`-20250929`, `-2024-08-06`). Nothing else matches, so `gpt-4o-audio` is not
/// priced as `gpt-4o`.
pub fn shipped_price(model: &str) -> Option<PriceTable> {
    let models = &shipped().models;
    if let Some(p) = models.get(model) {
        return Some(*p);
    }
    models
        .iter()
        .filter(|(name, _)| {
            model
                .strip_prefix(name.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(is_date_suffix)
        })
        .max_by_key(|(name, _)| name.len())
        .map(|(_, p)| *p)
}

/// `20250929` or `2024-08-06`.
fn is_date_suffix(s: &str) -> bool {
    let digits = s.chars().filter(|c| c.is_ascii_digit()).count();
    let only_digits_and_dashes = s.chars().all(|c| c.is_ascii_digit() || c == '-');
    only_digits_and_dashes && digits == 8 && (s.len() == 8 || s.len() == 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn i7_the_shipped_table_parses_and_prices_both_providers() {
        let file: PriceFile = toml::from_str(SHIPPED).expect("prices.toml parses");
        assert_eq!(file.taken.len(), 10, "taken = {:?}", file.taken);
        assert!(file.models.keys().any(|m| m.starts_with("claude-")));
        assert!(file.models.keys().any(|m| m.starts_with("gpt-")));
        for (name, p) in &file.models {
            assert!(
                p.input_per_million > 0.0 && p.output_per_million > 0.0,
                "{name} has no price"
            );
        }
    }

    #[test]
    fn i7_model_names_match_exactly_or_with_a_date_suffix_only() {
        let sonnet = shipped_price("claude-sonnet-4-5").unwrap();
        assert_eq!(sonnet.input_per_million, 3.0);
        assert_eq!(shipped_price("claude-sonnet-4-5-20250929"), Some(sonnet));
        assert_eq!(shipped_price("gpt-4o-2024-08-06"), shipped_price("gpt-4o"));
        // The longer listed name wins over its prefix.
        assert_eq!(
            shipped_price("gpt-4o-mini").unwrap().input_per_million,
            0.15
        );
        for unknown in [
            "gpt-4o-audio",
            "llama3.1:8b",
            "claude-sonnet-4-5x",
            "",
            "scripted-model",
        ] {
            assert_eq!(shipped_price(unknown), None, "{unknown}");
        }
    }
}

//! The two policy profiles shipped inside the binary.

use super::PolicySource;

/// The Cedar schema every policy is validated against. This text is the source; edit it,
/// not [`SCHEMA_JSON`].
pub const SCHEMA_SRC: &str = include_str!("../../policy/airlock.cedarschema");
/// [`SCHEMA_SRC`] in Cedar's JSON schema format, which is what the engine loads: Cedar
/// parses it in a fifth of the time of the text format, and every command that decides
/// (each `airlock exec`, `airlock check`) loads the schema once. A test fails when it no
/// longer matches the source and says how to regenerate it.
pub const SCHEMA_JSON: &str = include_str!("../../policy/airlock.cedarschema.json");
const BASE: &str = include_str!("../../policy/base.cedar");
const DEFAULT: &str = include_str!("../../policy/default.cedar");
const STRICT: &str = include_str!("../../policy/strict.cedar");

/// A shipped policy set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// The sandbox is the boundary; network and post-taint destinations are guarded.
    Default,
    /// Curated read-only commands only; everything else asks; Rule of Two after taint.
    Strict,
}

impl Profile {
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::Strict => "strict",
        }
    }

    pub fn parse(name: &str) -> Option<Profile> {
        match name {
            "default" => Some(Profile::Default),
            "strict" => Some(Profile::Strict),
            _ => None,
        }
    }

    pub fn all() -> [Profile; 2] {
        [Profile::Default, Profile::Strict]
    }
}

/// The embedded files of a profile, named as `airlock init` writes them.
pub fn builtin_sources(profile: Profile) -> Vec<PolicySource> {
    let own = match profile {
        Profile::Default => DEFAULT,
        Profile::Strict => STRICT,
    };
    vec![
        PolicySource {
            name: format!("policy/{}/base.cedar", profile.name()),
            text: BASE.to_string(),
        },
        PolicySource {
            name: format!("policy/{}/{}.cedar", profile.name(), profile.name()),
            text: own.to_string(),
        },
    ]
}

//! JSON Schemas for `task_state` records, registered by the operator.
//!
//! A `task_state` names a schema; the state must be valid against it when written and
//! again when read (a row edited outside Airlock is quarantined, not loaded). The
//! validator is built without any way to fetch a remote `$ref`, so a schema can make the
//! store neither reach the network nor read files.

use serde_json::Value;

/// Largest registered schema.
pub const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// Check that `text` is a JSON Schema this build can use. Returns it parsed.
pub(crate) fn parse_schema(text: &str) -> Result<Value, String> {
    if text.len() > MAX_SCHEMA_BYTES {
        return Err(format!(
            "the schema is {} bytes, over the {MAX_SCHEMA_BYTES}-byte limit",
            text.len()
        ));
    }
    let schema: Value =
        serde_json::from_str(text).map_err(|e| format!("the schema is not JSON: {e}"))?;
    jsonschema::validator_for(&schema).map_err(|e| format!("not a usable JSON Schema: {e}"))?;
    Ok(schema)
}

/// Validate a task's state against its schema. `Err` lists what is wrong (first few).
pub(crate) fn validate_state(schema: &Value, state: &Value) -> Result<(), String> {
    let validator = jsonschema::validator_for(schema)
        .map_err(|e| format!("the registered schema is not usable: {e}"))?;
    let errors: Vec<String> = validator
        .iter_errors(state)
        .take(5)
        .map(|e| {
            let at = e.instance_path().to_string();
            if at.is_empty() {
                e.to_string()
            } else {
                format!("at {at}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the state does not match its schema: {}",
            errors.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_are_checked_against_the_schema() {
        let schema = parse_schema(
            r#"{"type":"object","properties":{"step":{"type":"integer"}},"required":["step"],"additionalProperties":false}"#,
        )
        .unwrap();
        validate_state(&schema, &json!({"step": 3})).unwrap();
        let err = validate_state(&schema, &json!({"step": "3"})).unwrap_err();
        assert!(err.contains("/step"), "{err}");
        assert!(validate_state(&schema, &json!({"step": 1, "x": 2})).is_err());
    }

    #[test]
    fn bad_schemas_are_refused() {
        assert!(parse_schema("not json").is_err());
        assert!(parse_schema(r#"{"type": 12}"#).is_err());
    }

    #[test]
    fn remote_references_are_not_fetched() {
        // No resolver is compiled in: a remote $ref makes the schema unusable instead of
        // making the store open a connection.
        let err = parse_schema(r#"{"$ref": "http://127.0.0.1:9/schema.json"}"#).unwrap_err();
        assert!(err.contains("not a usable"), "{err}");
    }
}

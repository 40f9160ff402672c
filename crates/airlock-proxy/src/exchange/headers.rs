//! A request's headers as the Gate sees them: every name with its value as sent, so that
//! a value is judged as data (I5) and an approval covers exactly those values (I6).

use airlock_core::action::HeaderField;
use http::HeaderMap;

use crate::secrets::{Destination, LoadedSecret};

/// The headers of a request to `to`, sorted by name (each name's values in the order
/// sent). A value that is exactly a secret's placeholder, written as that secret's
/// header template writes it, in the header it is bound to, for a request it is bound
/// to, is marked with the secret's name: what leaves there is the operator's value.
///
/// Errs on a value that is not UTF-8: it could not be shown or bound exactly.
pub(super) fn header_fields(
    headers: &HeaderMap,
    secrets: &[LoadedSecret],
    to: &Destination<'_>,
) -> Result<Vec<HeaderField>, String> {
    let mut fields = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let Ok(text) = std::str::from_utf8(value.as_bytes()) else {
            return Err(format!(
                "the value of header {name} is not UTF-8\nhelp: send header values as UTF-8 text"
            ));
        };
        let secret = secrets
            .iter()
            .find(|s| {
                s.info.header.name == name.as_str()
                    && s.info.header.value.replacen("{}", &s.info.placeholder, 1) == text
                    && s.bound_to(to.scheme, to.host, to.port, to.path)
            })
            .map(|s| s.info.name.clone());
        fields.push(HeaderField {
            name: name.as_str().to_string(),
            value: text.to_string(),
            secret,
        });
    }
    // Stable: the values of one name keep the order they were sent in.
    fields.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(fields)
}

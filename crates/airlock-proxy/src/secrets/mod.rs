//! Credentials the sandbox never sees: an encrypted store in the config directory, the
//! swap of placeholder for value at the boundary, and the scrubbing of echoed values.

pub mod inject;
pub mod scrub;
pub mod store;

pub use inject::{Destination, InjectReport, Injector, Misuse};
pub use scrub::{Scrubber, StreamScrubber};
pub use store::{
    Binding, HeaderTemplate, LoadedSecret, SecretInfo, SecretStore, SecretsError, SECRETS_FILE,
};

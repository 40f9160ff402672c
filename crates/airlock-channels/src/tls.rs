//! One TLS client configuration for every adapter, for HTTPS (reqwest) and WSS
//! (tokio-tungstenite) alike: the webpki roots, plus any root the caller adds. The host
//! adds roots only in debug builds, for tests that stand up a platform's fake on loopback
//! with a test CA; a release build trusts the webpki roots alone.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use crate::ChannelError;

/// The client configuration: webpki roots and the certificates of `extra_roots_pem`.
pub fn client_config(
    platform: &'static str,
    extra_roots_pem: &[String],
) -> Result<Arc<rustls::ClientConfig>, ChannelError> {
    let bad = |why: String| ChannelError::Unreachable { platform, why };
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for pem in extra_roots_pem {
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(|e| bad(format!("an extra root is not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad(format!("an extra root is not a certificate: {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // HTTP/1.1 only: a WebSocket upgrade needs it, and the Web APIs speak it.
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// An HTTP client for a platform's Web API: this TLS, no redirects (a redirect could take
/// a token elsewhere), and the given overall timeout.
pub fn http_client(
    platform: &'static str,
    extra_roots_pem: &[String],
    timeout: std::time::Duration,
) -> Result<reqwest::Client, ChannelError> {
    let tls = client_config(platform, extra_roots_pem)?;
    reqwest::Client::builder()
        .use_preconfigured_tls((*tls).clone())
        .timeout(timeout)
        .connect_timeout(std::time::Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| ChannelError::Unreachable {
            platform,
            why: e.without_url().to_string(),
        })
}

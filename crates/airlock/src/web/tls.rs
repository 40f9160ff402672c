//! TLS for the page served remotely: the certificate and key of `[web]`, checked at the
//! host's start to be for the public name. Each connection's handshake runs in its own
//! task, within [`HANDSHAKE_DEADLINE`] and holding one of the page's connection slots
//! ([`super::connections`]), so a slow or silent client neither holds up the others nor
//! goes uncounted.
//!
//! A renewed certificate takes effect without a restart: [`Certificate::watch`] looks at
//! the two files every [`RELOAD_EVERY`] and, when either changed, reads and checks the
//! pair again; the next handshakes get the new one, and connections already made are
//! left alone. A new pair that fails the checks of the start is refused with an error in
//! the log, and the one in use is kept.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::server::{ClientHello, ResolvesServerCert, ResolvesServerCertUsingSni};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::settings::Remote;

/// How long a client may take to finish its handshake.
pub const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);
/// How often the certificate's and key's files are looked at for a renewal.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// The server's TLS configuration for `remote`, and its certificate (which
/// [`Certificate::watch`] keeps current): only HTTP/1.1 is offered.
pub fn server_config(remote: &Remote) -> anyhow::Result<(Arc<ServerConfig>, Arc<Certificate>)> {
    let cert = Arc::new(Certificate {
        remote: remote.clone(),
        stamp: Mutex::new(stamp(remote)),
        current: RwLock::new(Arc::new(resolver(remote)?)),
    });
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(cert.clone());
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((Arc::new(config), cert))
}

/// The page's certificate: the pair of files read and checked last, answered by SNI for
/// the public name only.
#[derive(Debug)]
pub struct Certificate {
    remote: Remote,
    /// The files' modification times and lengths when they were last read.
    stamp: Mutex<Stamp>,
    current: RwLock<Arc<ResolvesServerCertUsingSni>>,
}

type Stamp = [Option<(SystemTime, u64)>; 2];

fn stamp(remote: &Remote) -> Stamp {
    [&remote.tls_cert, &remote.tls_key].map(|p| {
        let m = std::fs::metadata(p).ok()?;
        Some((m.modified().ok()?, m.len()))
    })
}

impl ResolvesServerCert for Certificate {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self
            .current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        current.resolve(hello)
    }
}

impl Certificate {
    /// Read the pair again if either file changed since it was last read: `Ok(true)` when
    /// a new pair is in use, `Err` (the one in use kept) when the new one fails a check.
    pub fn reload_if_changed(&self) -> anyhow::Result<bool> {
        let now = stamp(&self.remote);
        {
            let mut last = self.stamp.lock().unwrap_or_else(|p| p.into_inner());
            if *last == now {
                return Ok(false);
            }
            // Said once per change, not at every look.
            *last = now;
        }
        let fresh = resolver(&self.remote)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(fresh);
        Ok(true)
    }

    /// Look at the files every [`RELOAD_EVERY`], for as long as the page is served.
    pub async fn watch(self: Arc<Self>) {
        let mut every = tokio::time::interval(RELOAD_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let cert = self.clone();
            match tokio::task::spawn_blocking(move || cert.reload_if_changed()).await {
                Ok(Ok(true)) => tracing::info!(
                    cert = %self.remote.tls_cert.display(),
                    "web: the TLS certificate changed on disk, and new connections get the new one"
                ),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::error!(
                    error = %format!("{e:#}"),
                    "web: the TLS certificate or key changed on disk, and the new pair is refused; the one in use is kept"
                ),
                Err(e) => tracing::error!(error = %e, "web: checking the TLS certificate"),
            }
        }
    }
}

/// `remote`'s certificate chain and key, read and checked: they must match each other
/// and name `remote.name`; only that name is answered (by SNI).
fn resolver(remote: &Remote) -> anyhow::Result<ResolvesServerCertUsingSni> {
    let chain = read_chain(&remote.tls_cert)?;
    let key = PrivateKeyDer::from_pem_file(&remote.tls_key).map_err(|e| {
        anyhow::anyhow!(
            "airlock.toml: web.tls_key = {} cannot be read as a PEM private key: {e}\nhelp: give the key of web.tls_cert, in PEM (PKCS#8, PKCS#1 or SEC1)",
            remote.tls_key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| {
        anyhow::anyhow!(
            "airlock.toml: web.tls_key is not the key of web.tls_cert, or is of a kind TLS cannot use: {e}\nhelp: give the certificate and the key that were made together"
        )
    })?;
    let mut names = ResolvesServerCertUsingSni::new();
    names.add(&remote.name, certified).map_err(|e| {
        anyhow::anyhow!(
            "airlock.toml: web.tls_cert = {} is not a certificate for web.public_name = {}: {e}\nhelp: give a certificate whose subject alternative names include {}",
            remote.tls_cert.display(),
            remote.name,
            remote.name
        )
    })?;
    Ok(names)
}

fn read_chain(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let unreadable = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!(
            "airlock.toml: web.tls_cert = {} cannot be read as PEM certificates: {e}\nhelp: give the certificate chain for web.public_name in PEM, the server's certificate first",
            path.display()
        )
    };
    let chain = CertificateDer::pem_file_iter(path)
        .map_err(|e| unreadable(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unreadable(&e))?;
    if chain.is_empty() {
        return Err(unreadable(&"it holds no certificate"));
    }
    Ok(chain)
}

//! Airlock's interception CA: generated once into the config directory (`ca.key` 0600,
//! `ca.pem`), it mints a leaf certificate per host the sandbox connects to.
//!
//! Only `ca.pem` ever goes into a sandbox; `ca.key` stays in the operator's config dir.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::sign::CertifiedKey;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// File name of the CA private key (mode 0600) in the config directory.
pub const CA_KEY_FILE: &str = "ca.key";
/// File name of the CA certificate (PEM) in the config directory; the sandbox gets this.
pub const CA_CERT_FILE: &str = "ca.pem";
/// Leaf certificates kept in memory before the cache starts over.
const LEAF_CACHE_LIMIT: usize = 1024;
const CA_COMMON_NAME: &str = "Airlock egress proxy CA";

/// Problems with the CA files or minting a certificate.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("cannot {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} already exists\nhelp: the CA is generated once; delete ca.key and ca.pem to make a new one (sandboxes must then get the new ca.pem)")]
    Exists { path: PathBuf },
    #[error(
        "{path} is not a valid key: {message}\nhelp: run `airlock init` to generate the proxy CA"
    )]
    BadKey { path: PathBuf, message: String },
    #[error("certificate generation failed: {0}")]
    Generate(String),
    #[error("half of the egress proxy's CA is missing ({missing})\nhelp: restore it, or remove ca.pem and ca.key from the config dir and run `airlock init` to make a new CA")]
    Half { missing: PathBuf },
}

fn gen_err(e: impl std::fmt::Display) -> CaError {
    CaError::Generate(e.to_string())
}

/// The CA's certificate parameters. They are a pure function of nothing, so a loaded key
/// plus these parameters is the same issuer that signed `ca.pem` (same subject, same key
/// identifier, derived from the key), and no X.509 parser is needed to load the CA.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, CA_COMMON_NAME);
    dn.push(DnType::OrganizationName, "Airlock");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// Generate the CA into `dir`: `ca.key` (0600, created exclusively) and `ca.pem`.
/// Refuses to overwrite an existing key. Returns the path of `ca.pem`.
pub fn generate_ca(dir: &Path) -> Result<PathBuf, CaError> {
    let key_path = dir.join(CA_KEY_FILE);
    let cert_path = dir.join(CA_CERT_FILE);
    if key_path.exists() {
        return Err(CaError::Exists { path: key_path });
    }
    std::fs::create_dir_all(dir).map_err(|source| CaError::Io {
        what: "create",
        path: dir.to_path_buf(),
        source,
    })?;
    let key = KeyPair::generate().map_err(gen_err)?;
    let cert = ca_params().self_signed(&key).map_err(gen_err)?;
    crate::fsutil::create_private(&key_path, key.serialize_pem().as_bytes()).map_err(|source| {
        CaError::Io {
            what: "write",
            path: key_path.clone(),
            source,
        }
    })?;
    crate::fsutil::write_private_atomic(&cert_path, cert.pem().as_bytes()).map_err(|source| {
        CaError::Io {
            what: "write",
            path: cert_path.clone(),
            source,
        }
    })?;
    Ok(cert_path)
}

/// Make sure the CA exists in `dir`, creating it if neither half is there. Safe when many
/// processes start at once (concurrent first runs of `airlock exec`): creation happens
/// under an exclusive lock on `dir/ca.lock`, and a process that finds the CA complete
/// after waiting uses it. Half a CA (one file without the other) is an error.
pub fn ensure_ca(dir: &Path) -> Result<PathBuf, CaError> {
    let key_path = dir.join(CA_KEY_FILE);
    let cert_path = dir.join(CA_CERT_FILE);
    let io = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| CaError::Io { what, path, source }
    };
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    // The config files' one lock helper; the lock file stays `ca.lock`.
    let lock_path = dir.join("ca.lock");
    let _lock =
        crate::fsutil::FileLock::acquire(&dir.join("ca")).map_err(io("lock", &lock_path))?;
    match (cert_path.exists(), key_path.exists()) {
        (true, true) => Ok(cert_path),
        (false, false) => generate_ca(dir),
        (false, true) => Err(CaError::Half { missing: cert_path }),
        (true, false) => Err(CaError::Half { missing: key_path }),
    }
    // The lock is released when `_lock` is dropped.
}

/// The loaded CA, minting and caching leaf certificates.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    provider: Arc<rustls::crypto::CryptoProvider>,
    leaves: Mutex<HashMap<String, Arc<CertifiedKey>>>,
}

impl std::fmt::Debug for CertificateAuthority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority")
            .finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// Load `ca.key` and `ca.pem` from `dir`.
    pub fn load(dir: &Path) -> Result<CertificateAuthority, CaError> {
        let key_path = dir.join(CA_KEY_FILE);
        let cert_path = dir.join(CA_CERT_FILE);
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| CaError::Io {
                what: "read",
                path: p.to_path_buf(),
                source,
            })
        };
        let key_pem = read(&key_path)?;
        let cert_pem = read(&cert_path)?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| CaError::BadKey {
            path: key_path,
            message: e.to_string(),
        })?;
        Ok(CertificateAuthority {
            issuer: Issuer::new(ca_params(), key),
            cert_pem,
            provider: Arc::new(rustls::crypto::ring::default_provider()),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate (PEM), as the sandbox receives it.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// A certificate and key for `host` (a DNS name or IP literal), from the cache if
    /// one was minted before.
    pub fn leaf_for(&self, host: &str) -> Result<Arc<CertifiedKey>, CaError> {
        let mut cache = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = cache.get(host) {
            return Ok(k.clone());
        }
        let key = KeyPair::generate().map_err(gen_err)?;
        let mut params = CertificateParams::new(vec![host.to_string()]).map_err(gen_err)?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, host);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let cert = params.signed_by(&key, &self.issuer).map_err(gen_err)?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let signing = self
            .provider
            .key_provider
            .load_private_key(der)
            .map_err(gen_err)?;
        let certified = Arc::new(CertifiedKey::new(
            vec![CertificateDer::from(cert.der().to_vec())],
            signing,
        ));
        if cache.len() >= LEAF_CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(host.to_string(), certified.clone());
        Ok(certified)
    }

    /// A TLS server config presenting the leaf for `host`, speaking HTTP/1.1 only.
    pub fn server_config(&self, host: &str) -> Result<Arc<rustls::ServerConfig>, CaError> {
        let leaf = self.leaf_for(host)?;
        let mut cfg = rustls::ServerConfig::builder_with_provider(self.provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(gen_err)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(FixedCert(leaf)));
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// Presents one already minted certificate (the host was chosen before the handshake).
#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl rustls::server::ResolvesServerCert for FixedCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A TLS client config for upstream connections: webpki roots plus `extra` trusted roots
/// (PEM certificates; tests use a test CA for their loopback upstream).
pub fn upstream_client_config(
    extra_roots_pem: &[String],
) -> Result<Arc<rustls::ClientConfig>, CaError> {
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for pem in extra_roots_pem {
        use rustls_pki_types::pem::PemObject;
        for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            let cert = cert.map_err(gen_err)?;
            roots.add(cert).map_err(gen_err)?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(gen_err)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn ca_is_generated_once_with_private_key() {
        let dir = tempfile::tempdir().unwrap();
        let pem = generate_ca(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(CA_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(std::fs::read_to_string(pem)
            .unwrap()
            .contains("BEGIN CERTIFICATE"));
        assert!(matches!(
            generate_ca(dir.path()),
            Err(CaError::Exists { .. })
        ));
        let ca = CertificateAuthority::load(dir.path()).unwrap();
        let a = ca.leaf_for("example.com").unwrap();
        let b = ca.leaf_for("example.com").unwrap();
        assert!(Arc::ptr_eq(&a, &b), "leaf certificates are cached");
        ca.leaf_for("127.0.0.1").unwrap();
    }
}

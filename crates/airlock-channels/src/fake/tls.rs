//! Loopback HTTPS for the fakes: a throwaway CA and a certificate for `127.0.0.1` and
//! `localhost`, and an axum router served over it (WebSocket upgrades included) on a
//! thread of its own, so that it serves whatever the test's runtime is doing.

use std::sync::Arc;

use axum::Router;

/// A fresh test CA and a server configuration with a certificate it signed.
pub struct TestTls {
    /// The CA's certificate, PEM: the root a client must add to reach the fake.
    pub ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

impl TestTls {
    pub fn new() -> TestTls {
        let ca_key = rcgen::KeyPair::generate().expect("a CA key");
        let mut ca_params =
            rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "airlock-channels fake test CA");
        let ca_cert = ca_params.self_signed(&ca_key).expect("the CA certificate");
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let leaf_key = rcgen::KeyPair::generate().expect("a server key");
        let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("server parameters")
            .signed_by(&leaf_key, &issuer)
            .expect("the server certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .expect("the server configuration");
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        TestTls {
            ca_pem: ca_cert.pem(),
            server: Arc::new(server),
        }
    }
}

impl Default for TestTls {
    fn default() -> Self {
        TestTls::new()
    }
}

/// Serve `app` on 127.0.0.1 over `tls` (plain HTTP when `None`); the port.
pub fn serve(app: Router, tls: Option<&TestTls>) -> u16 {
    let tls = tls.map(|t| tokio_rustls::TlsAcceptor::from(t.server.clone()));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime for the fake");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("a loopback port");
            let _ = tx.send(listener.local_addr().expect("its address").port());
            let Some(acceptor) = tls else {
                let _ = axum::serve(listener, app).await;
                return;
            };
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, app) = (acceptor.clone(), app.clone());
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let service = hyper_util::service::TowerToHyperService::new(app);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .with_upgrades()
                        .await;
                });
            }
        });
    });
    rx.recv().expect("the fake's port")
}

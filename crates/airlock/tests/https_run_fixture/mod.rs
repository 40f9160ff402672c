//! A `airlock run` against a loopback HTTPS upstream with its own test CA, shared by the
//! `fetch` tests: the upstream, the operator's net rule for it, the run, and its report.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};

use airlock_agent::scripted::ScriptedModel;
use airlock_proxy::{NetRule, NetRules};

#[allow(unused_imports)]
pub use crate::exec_fixture::report;
use crate::exec_fixture::scripted_command;

/// A loopback HTTPS server whose certificate (for the IP 127.0.0.1) comes from a fresh
/// test CA. It records `METHOD path` of every request it receives.
pub struct Upstream {
    pub port: u16,
    pub ca_pem: String,
    /// `METHOD path body` of every request, in order.
    pub hits: Arc<Mutex<Vec<String>>>,
}

/// Serves `page` to every request.
pub fn start_upstream(page: &'static str) -> Upstream {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "i5 fetch test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(Mutex::new(Vec::new()));
    let hits2 = hits.clone();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { continue };
            let (cfg, hits) = (cfg.clone(), hits2.clone());
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let _ = serve(rustls::StreamOwned::new(conn, tcp), &hits, page);
            });
        }
    });
    Upstream {
        port,
        ca_pem: ca_cert.pem(),
        hits,
    }
}

fn serve(
    stream: rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>,
    hits: &Mutex<Vec<String>>,
    page: &str,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let request = format!(
        "{} {}",
        parts.next().unwrap_or(""),
        parts.next().unwrap_or("")
    );
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    hits.lock()
        .unwrap()
        .push(format!("{request} {}", String::from_utf8_lossy(&body)));
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{page}",
        page.len()
    )?;
    stream.flush()?;
    stream.conn.send_close_notify();
    stream.flush()
}

/// The operator allows `methods` to exactly 127.0.0.1:`port` (and that address past the
/// SSRF guard), as `airlock net allow` would write it.
pub fn allow_upstream(home: &Path, port: u16, methods: &[&str]) {
    let config = home.join("config");
    airlock::home::create_private_dir(&config).unwrap();
    let mut rules = NetRules::default();
    let mut rule = NetRule::for_host("127.0.0.1");
    rule.port = Some(port);
    rule.methods = methods.iter().map(|m| m.to_string()).collect();
    rules.add(rule).unwrap();
    rules
        .allow_private
        .push(format!("127.0.0.1:{port}").parse().unwrap());
    rules.save(&config).unwrap();
}

/// `airlock run --json` against the scripted model; `roots` is the debug-build hook's
/// extra upstream CA file.
pub async fn airlock_run(
    home: &Path,
    model: &ScriptedModel,
    roots: Option<&Path>,
    approval_timeout_secs: u64,
) -> Output {
    let timeout = approval_timeout_secs.to_string();
    let mut cmd = scripted_command(home, model);
    cmd.env_remove("AIRLOCK_DEBUG_UPSTREAM_ROOTS")
        .args([
            "run",
            "--json",
            "--approval-timeout",
            &timeout,
            "Read the report",
        ])
        .stdin(Stdio::null());
    if let Some(r) = roots {
        cmd.env("AIRLOCK_DEBUG_UPSTREAM_ROOTS", r);
    }
    tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap()
}

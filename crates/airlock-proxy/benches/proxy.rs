//! Added latency and throughput of the proxy: an allowed HTTPS GET through the proxy
//! (CONNECT, interception, Gate decision, audit append, upstream TLS) against the same GET
//! straight to the upstream, both over loopback with a fresh connection per request.
//! Run with `scripts/bench-proxy`. Prints figures and ratios; asserts nothing.

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use airlock_proxy::{Limits, NetRules, CA_CERT_FILE};
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LATENCY_RUNS: usize = 300;
const BIG: u64 = 50 * 1024 * 1024;

fn tls_config(ca_pem: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(ca_pem).unwrap())
        .unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// One GET on a fresh connection; returns (time to full body, body bytes).
async fn get(
    h: &common::Harness,
    via_proxy: bool,
    path: &str,
    cfg: Arc<rustls::ClientConfig>,
) -> (Duration, u64) {
    let t = Instant::now();
    let authority = format!("api.test:{}", h.port());
    let tcp = if via_proxy {
        let mut s = tokio::net::TcpStream::connect(h.handle.tcp_addr.unwrap())
            .await
            .unwrap();
        s.write_all(
            format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = [0u8; 128];
        let n = s.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        s
    } else {
        tokio::net::TcpStream::connect(h.upstream.addr)
            .await
            .unwrap()
    };
    tcp.set_nodelay(true).unwrap();
    let name = rustls_pki_types::ServerName::try_from("api.test").unwrap();
    let tls = tokio_rustls::TlsConnector::from(cfg)
        .connect(name, tcp)
        .await
        .unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header("host", &authority)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut n = 0u64;
    while let Some(f) = body.frame().await {
        if let Ok(d) = f.unwrap().into_data() {
            n += d.len() as u64;
        }
    }
    (t.elapsed(), n)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let h = common::Harness::start(|port| {
        let mut rules = NetRules::default();
        rules.add(common::rule("api.test", port, &["GET"])).unwrap();
        common::Setup {
            rules,
            limits: Limits {
                host_burst: 1_000_000,
                host_rate_per_sec: 1e6,
                ..Limits::default()
            },
            ..Default::default()
        }
    })
    .await;
    let direct_cfg = tls_config(h.upstream.ca_pem.as_bytes());
    let proxy_cfg = tls_config(&std::fs::read(h.config.path().join(CA_CERT_FILE)).unwrap());

    let lat = |v: &mut Vec<Duration>| {
        v.sort();
        (pct(v, 0.5), pct(v, 0.99))
    };
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        get(&h, false, "/hello", direct_cfg.clone()).await;
        get(&h, true, "/hello", proxy_cfg.clone()).await;
    }
    for _ in 0..LATENCY_RUNS {
        d.push(get(&h, false, "/hello", direct_cfg.clone()).await.0);
        p.push(get(&h, true, "/hello", proxy_cfg.clone()).await.0);
    }
    let (d50, d99) = lat(&mut d);
    let (p50, p99) = lat(&mut p);
    println!("latency, fresh connection per GET, {LATENCY_RUNS} runs (audit fsync on):");
    println!(
        "  direct  p50 {:>8.3} ms  p99 {:>8.3} ms",
        d50.as_secs_f64() * 1e3,
        d99.as_secs_f64() * 1e3
    );
    println!(
        "  proxy   p50 {:>8.3} ms  p99 {:>8.3} ms",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3
    );
    println!(
        "  added   p50 {:>8.3} ms  p99 {:>8.3} ms   (ratio p50 {:.2}x)",
        (p50.as_secs_f64() - d50.as_secs_f64()) * 1e3,
        (p99.as_secs_f64() - d99.as_secs_f64()) * 1e3,
        p50.as_secs_f64() / d50.as_secs_f64()
    );
    let path = format!("/bytes/{BIG}");
    let best = |via: bool| {
        let (h, path, cfg) = (
            &h,
            path.clone(),
            if via {
                proxy_cfg.clone()
            } else {
                direct_cfg.clone()
            },
        );
        async move {
            let mut best = f64::MAX;
            for _ in 0..3 {
                let (t, n) = get(h, via, &path, cfg.clone()).await;
                assert_eq!(n, BIG);
                best = best.min(t.as_secs_f64());
            }
            BIG as f64 / 1e6 / best
        }
    };
    let direct = best(false).await;
    let proxied = best(true).await;
    println!("throughput, 50 MB body (best of 3):");
    println!(
        "  direct {direct:>9.1} MB/s\n  proxy  {proxied:>9.1} MB/s   (ratio {:.0}% of direct)",
        proxied / direct * 100.0
    );
}

//! Added latency and throughput of the proxy: an allowed HTTPS GET through the proxy
//! (CONNECT, interception, Gate decision, audit append, upstream TLS) against the same GET
//! straight to the upstream, both over loopback with a fresh connection per request.
//! Run with `scripts/bench-proxy` (`scripts/bench-proxy -- --throughput-only` skips the
//! latency runs, for profiling). Prints figures and ratios; asserts nothing.

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

    // `--throughput-only` skips the latency runs (for profiling the body path).
    let latency = !std::env::args().any(|a| a == "--throughput-only");
    let lat = |v: &mut Vec<Duration>| {
        v.sort();
        (pct(v, 0.5), pct(v, 0.99))
    };
    let (mut d, mut p) = (Vec::new(), Vec::new());
    for _ in 0..if latency { 20 } else { 0 } {
        get(&h, false, "/hello", direct_cfg.clone()).await;
        get(&h, true, "/hello", proxy_cfg.clone()).await;
    }
    for _ in 0..if latency { LATENCY_RUNS } else { 0 } {
        d.push(get(&h, false, "/hello", direct_cfg.clone()).await.0);
        p.push(get(&h, true, "/hello", proxy_cfg.clone()).await.0);
    }
    if latency {
        print_latency(lat(&mut d), lat(&mut p));
    }
    let path = format!("/bytes/{BIG}");
    // Direct and proxied GETs alternate, so a change in the load from other processes on
    // a shared machine hits both sides alike. CPU time is the whole process's (client,
    // proxy and upstream all run here): it does not depend on how busy the machine is.
    let (mut direct, mut proxied) = (Run::default(), Run::default());
    for _ in 0..THROUGHPUT_RUNS {
        direct
            .add(|| get(&h, false, &path, direct_cfg.clone()))
            .await;
        proxied
            .add(|| get(&h, true, &path, proxy_cfg.clone()))
            .await;
    }
    let (d, p) = (direct.best_mb_s(), proxied.best_mb_s());
    println!("throughput, 50 MB body (best of {THROUGHPUT_RUNS}, alternating):");
    println!(
        "  direct {d:>9.1} MB/s   cpu {:>6.0} ms per GET",
        direct.median_cpu_ms()
    );
    println!(
        "  proxy  {p:>9.1} MB/s   cpu {:>6.0} ms per GET   (ratio {:.0}% of direct)",
        proxied.median_cpu_ms(),
        p / d * 100.0
    );
}

const THROUGHPUT_RUNS: usize = 5;

/// Wall and CPU time of the 50 MB GETs of one side.
#[derive(Default)]
struct Run {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl Run {
    async fn add<F, Fut>(&mut self, get: F)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = (Duration, u64)>,
    {
        let cpu0 = process_cpu_seconds();
        let (t, n) = get().await;
        assert_eq!(n, BIG);
        self.cpu.push(process_cpu_seconds() - cpu0);
        self.wall.push(t.as_secs_f64());
    }

    fn best_mb_s(&self) -> f64 {
        let best = self.wall.iter().copied().fold(f64::MAX, f64::min);
        BIG as f64 / 1e6 / best
    }

    fn median_cpu_ms(&self) -> f64 {
        let mut v = self.cpu.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e3
    }
}

/// User plus system CPU time of this process so far (`/proc/self/stat`, in clock ticks
/// of 10 ms).
fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

/// Print the latency figures: (p50, p99) direct and through the proxy.
fn print_latency((d50, d99): (Duration, Duration), (p50, p99): (Duration, Duration)) {
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
}

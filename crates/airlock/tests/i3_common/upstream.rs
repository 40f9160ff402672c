//! The loopback upstreams of the I3 tests: an HTTPS server whose certificate (for
//! [`NAMES`] and 127.0.0.1) comes from a fresh test CA, and the same server in plain HTTP.
//! One request per connection (`Connection: close`).
//!
//! Routes:
//! * `.../echo` answers with the Authorization header it received (body and `x-echo-auth`);
//! * `/big` streams [`BIG_BODY_BYTES`] with no declared length (delimited by closing);
//! * any path added with [`Upstream::add_file`] (or under [`Upstream::add_dir`]) serves
//!   that file (as `application/octet-stream`, or the type given to
//!   [`Upstream::add_typed_file`]), and another path under a directory added with `add_dir`
//!   is a 404;
//! * paths under a mount point added with [`Upstream::add_git_http_backend`] are answered
//!   by the real `git http-backend` (smart HTTP);
//! * everything else answers `hello from <host> <method> <path>`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Host names the HTTPS upstream's certificate covers (all resolve to 127.0.0.1 in tests).
pub const NAMES: &[&str] = &[
    "api.test",
    "other.test",
    "nope.test",
    "loop.test",
    "rebind.test",
    "private.test",
    "meta.test",
    "ask.test",
    "big.test",
    "git.test",
    "pypi.test",
    "npm.test",
    "crates.test",
];

/// What `/big` streams: 100 MB.
pub const BIG_BODY_BYTES: u64 = 100 * 1024 * 1024;

/// What the upstream received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub host: String,
    pub authorization: Option<String>,
}

#[derive(Default)]
struct Routes {
    files: BTreeMap<String, Vec<u8>>,
    /// Content types of files that are not `application/octet-stream`.
    types: BTreeMap<String, String>,
    /// Path prefixes whose unknown paths are 404s.
    dirs: Vec<String>,
    /// Mount points (`/smart`) served by `git http-backend`, with the directory holding
    /// their repositories.
    git_mounts: Vec<(String, std::path::PathBuf)>,
}

/// A running upstream.
pub struct Upstream {
    pub port: u16,
    /// The test CA's certificate (HTTPS upstreams; empty for plain HTTP).
    pub ca_pem: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Body bytes `/big` managed to write before its reader went away.
    pub big_sent: Arc<AtomicU64>,
    routes: Arc<Mutex<Routes>>,
}

impl Upstream {
    /// Serve `bytes` at `path` (exact match, query ignored).
    pub fn add_file(&self, path: &str, bytes: impl Into<Vec<u8>>) {
        let mut r = self.routes.lock().unwrap();
        r.files.insert(path.to_string(), bytes.into());
    }

    /// Serve `bytes` at `path` with content type `ctype` (pip reads only `text/html`
    /// index pages, for one).
    pub fn add_typed_file(&self, path: &str, ctype: &str, bytes: impl Into<Vec<u8>>) {
        self.add_file(path, bytes);
        let mut r = self.routes.lock().unwrap();
        r.types.insert(path.to_string(), ctype.to_string());
    }

    /// Serve every file below `dir` under the URL prefix `prefix` (`/repo.git`).
    pub fn add_dir(&self, prefix: &str, dir: &Path) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(dir).unwrap().to_str().unwrap().to_string();
                    self.add_file(&format!("{prefix}/{rel}"), std::fs::read(&p).unwrap());
                }
            }
        }
        self.routes.lock().unwrap().dirs.push(format!("{prefix}/"));
    }

    /// Answer every path below `mount` (`/smart`) with `git http-backend` over the
    /// repositories in `root` (so `/smart/repo.git` is `root/repo.git`).
    pub fn add_git_http_backend(&self, mount: &str, root: &Path) {
        let mut r = self.routes.lock().unwrap();
        r.git_mounts.push((mount.to_string(), root.to_path_buf()));
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn new_upstream(port: u16, ca_pem: String) -> Upstream {
    Upstream {
        port,
        ca_pem,
        seen: Arc::default(),
        big_sent: Arc::default(),
        routes: Arc::default(),
    }
}

/// An HTTPS upstream on 127.0.0.1:0 with a certificate from a fresh test CA.
pub fn start_upstream() -> Upstream {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "i3 upstream test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf_key = rcgen::KeyPair::generate().unwrap();
    let mut names: Vec<String> = NAMES.iter().map(|s| s.to_string()).collect();
    names.push("127.0.0.1".into());
    let leaf = rcgen::CertificateParams::new(names)
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
        )
        .unwrap();
    let cfg = Arc::new(cfg);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = new_upstream(listener.local_addr().unwrap().port(), ca_cert.pem());
    let shared = (up.seen.clone(), up.big_sent.clone(), up.routes.clone());
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { continue };
            let (cfg, shared) = (cfg.clone(), shared.clone());
            std::thread::spawn(move || {
                let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                if serve(&mut tls, &shared).is_ok() {
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                }
            });
        }
    });
    up
}

/// The same routes over plain HTTP on 127.0.0.1:0.
pub fn start_plain_upstream() -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let up = new_upstream(listener.local_addr().unwrap().port(), String::new());
    let shared = (up.seen.clone(), up.big_sent.clone(), up.routes.clone());
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(mut tcp) = tcp else { continue };
            let shared = shared.clone();
            std::thread::spawn(move || {
                let _ = serve(&mut tcp, &shared);
            });
        }
    });
    up
}

type Shared = (Arc<Mutex<Vec<Seen>>>, Arc<AtomicU64>, Arc<Mutex<Routes>>);

fn serve<S: Read + Write>(
    stream: &mut S,
    (seen, big_sent, routes): &Shared,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(&mut *stream);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("").to_string();
    let path = target.split('?').next().unwrap_or("").to_string();
    let (mut host, mut authorization, mut length) = (String::new(), None, 0usize);
    let (mut headers, mut chunked) = (Vec::new(), false);
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        let Some((k, v)) = h.split_once(':') else {
            continue;
        };
        let v = v.trim().to_string();
        headers.push((k.to_ascii_lowercase(), v.clone()));
        match k.to_ascii_lowercase().as_str() {
            "host" => host = v,
            "authorization" => authorization = Some(v),
            "content-length" => length = v.parse().unwrap_or(0),
            "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)?
    } else {
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        body
    };
    drop(reader);
    seen.lock().unwrap().push(Seen {
        method: method.clone(),
        path: path.clone(),
        host: host.clone(),
        authorization: authorization.clone(),
    });
    if path == "/big" {
        stream.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\nconnection: close\r\n\r\n",
        )?;
        let chunk = vec![b'x'; 64 * 1024];
        let mut left = BIG_BODY_BYTES;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            stream.write_all(&chunk[..n])?;
            big_sent.fetch_add(n as u64, Ordering::SeqCst);
            left -= n as u64;
        }
        return stream.flush();
    }
    let git_mount = {
        let r = routes.lock().unwrap();
        r.git_mounts
            .iter()
            .find(|(m, _)| path.starts_with(&format!("{m}/")))
            .cloned()
    };
    if let Some((mount, root)) = git_mount {
        let req = super::git_http::CgiRequest {
            method: &method,
            path_info: &path[mount.len()..],
            query: target.split_once('?').map(|(_, q)| q).unwrap_or(""),
            headers: &headers,
            body: &body,
        };
        let res = super::git_http::git_http_backend(&root, &req)?;
        write!(stream, "HTTP/1.1 {}\r\n", res.status)?;
        for (k, v) in &res.headers {
            write!(stream, "{k}: {v}\r\n")?;
        }
        write!(
            stream,
            "content-length: {}\r\nconnection: close\r\n\r\n",
            res.body.len()
        )?;
        stream.write_all(&res.body)?;
        return stream.flush();
    }
    let (status, ctype, extra, bytes) = {
        let r = routes.lock().unwrap();
        if let Some(f) = r.files.get(&path) {
            let ctype = r.types.get(&path).map(String::as_str);
            (
                "200 OK",
                ctype.unwrap_or("application/octet-stream").to_string(),
                String::new(),
                f.clone(),
            )
        } else if r.dirs.iter().any(|d| path.starts_with(d.as_str())) {
            (
                "404 Not Found",
                "text/plain".to_string(),
                String::new(),
                b"not found\n".to_vec(),
            )
        } else if path.ends_with("/echo") {
            let auth = authorization.unwrap_or_default();
            (
                "200 OK",
                "text/plain".to_string(),
                format!("x-echo-auth: {auth}\r\n"),
                format!("you sent authorization: {auth}\n").into_bytes(),
            )
        } else {
            let text = format!("hello from {host} {method} {path}\n");
            (
                "200 OK",
                "text/plain".to_string(),
                String::new(),
                text.into_bytes(),
            )
        }
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n",
        bytes.len()
    )?;
    if method != "HEAD" {
        stream.write_all(&bytes)?;
    }
    stream.flush()
}

/// A chunked request body (git sends one when it does not know the length up front).
fn read_chunked(reader: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size)?;
        let size = size.trim().split(';').next().unwrap_or("");
        let n = usize::from_str_radix(size, 16)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        if n == 0 {
            // Trailers end with an empty line.
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                    return Ok(body);
                }
            }
        }
        let start = body.len();
        body.resize(start + n, 0);
        reader.read_exact(&mut body[start..])?;
        let mut crlf = [0; 2];
        reader.read_exact(&mut crlf)?;
    }
}

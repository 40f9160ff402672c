//! The host side of the `fetch` tool: one HTTP request sent through the run's egress proxy
//! over its UNIX socket, exactly as a client with `HTTP_PROXY`/`HTTPS_PROXY` set would.
//!
//! * `http://` goes as an absolute-form proxy request.
//! * `https://` goes as `CONNECT host:port`; the proxy intercepts the TLS with a leaf
//!   minted by Airlock's CA, so this client trusts **only** that CA (nothing from the
//!   system store), and only on this path: the real upstream certificate is checked by the
//!   proxy, which is where the request is decided again with the session's taint.
//!
//! The response body is handed back as text; the agent loop treats it as untrusted.

use std::path::Path;
use std::sync::Arc;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use airlock_agent::agent::ToolOutput;
use airlock_core::action::NetRequestAction;

/// Most bytes of a response body handed back to the model.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// The parts of a URL the request needs.
struct Target {
    https: bool,
    host: String,
    port: u16,
    /// `host` or `host:port` (IPv6 in brackets), as the `Host` header and CONNECT carry it.
    authority: String,
    /// Path and query, `/` at least.
    path_and_query: String,
}

fn target(raw: &str) -> anyhow::Result<Target> {
    let url = url::Url::parse(raw).map_err(|e| {
        anyhow::anyhow!("not a valid URL: {e}\nhelp: give an absolute http:// or https:// URL")
    })?;
    let https = match url.scheme() {
        "http" => false,
        "https" => true,
        other => anyhow::bail!(
            "fetch supports http:// and https:// URLs; `{other}` is neither\nhelp: give an http:// or https:// URL"
        ),
    };
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_string(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        None => anyhow::bail!("the URL has no host"),
    };
    let port = url
        .port_or_known_default()
        .ok_or_else(|| anyhow::anyhow!("the URL has no port"))?;
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.clone()
    };
    let authority = match url.port() {
        Some(p) => format!("{bracketed}:{p}"),
        None => bracketed,
    };
    let mut path_and_query = url.path().to_string();
    if let Some(q) = url.query() {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    Ok(Target {
        https,
        host,
        port,
        authority,
        path_and_query,
    })
}

/// Send `action` (with `body`) through the proxy listening on `socket`. `airlock_ca_pem` is
/// the interception CA's certificate: the only root an `https://` fetch trusts.
pub async fn send(
    socket: &Path,
    airlock_ca_pem: &str,
    action: &NetRequestAction,
    body: Option<String>,
) -> anyhow::Result<ToolOutput> {
    let t = target(&action.url)?;
    let stream = tokio::net::UnixStream::connect(socket)
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the egress proxy: {e}"))?;
    let body = Full::new(Bytes::from(body.unwrap_or_default()));
    let resp = if t.https {
        send_https(stream, airlock_ca_pem, &t, &action.method, body).await?
    } else {
        // Absolute form: the proxy reads the destination from the request line.
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        let driver = tokio::spawn(conn);
        let req = hyper::Request::builder()
            .method(action.method.as_str())
            .uri(action.url.as_str())
            .header(hyper::header::HOST, t.authority.as_str())
            .body(body)?;
        let resp = read(sender.send_request(req).await?).await;
        driver.abort();
        resp?
    };
    Ok(resp)
}

/// CONNECT through the proxy, TLS to the proxy's interception (Airlock's CA only), then
/// the request in origin form.
async fn send_https(
    stream: tokio::net::UnixStream,
    airlock_ca_pem: &str,
    t: &Target,
    method: &str,
    body: Full<Bytes>,
) -> anyhow::Result<ToolOutput> {
    let connect_to = format!(
        "{}:{}",
        if t.host.contains(':') {
            format!("[{}]", t.host)
        } else {
            t.host.clone()
        },
        t.port
    );
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let driver = tokio::spawn(conn.with_upgrades());
    let req = hyper::Request::builder()
        .method(hyper::Method::CONNECT)
        .uri(connect_to.as_str())
        .header(hyper::header::HOST, connect_to.as_str())
        .body(Full::new(Bytes::new()))?;
    let resp = sender.send_request(req).await?;
    if !resp.status().is_success() {
        let out = read(resp).await;
        driver.abort();
        return out;
    }
    let upgraded = hyper::upgrade::on(resp)
        .await
        .map_err(|e| anyhow::anyhow!("the proxy did not open the tunnel: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(airlock_ca_only(airlock_ca_pem)?);
    let server_name = rustls_pki_types::ServerName::try_from(t.host.clone())
        .map_err(|e| anyhow::anyhow!("`{}` is not a valid TLS server name: {e}", t.host))?;
    let tls = connector
        .connect(server_name, TokioIo::new(upgraded))
        .await
        .map_err(|e| anyhow::anyhow!("TLS through the egress proxy failed: {e}"))?;
    let (mut inner, inner_conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
    let inner_driver = tokio::spawn(inner_conn);
    let req = hyper::Request::builder()
        .method(method)
        .uri(t.path_and_query.as_str())
        .header(hyper::header::HOST, t.authority.as_str())
        .body(body)?;
    let out = match inner.send_request(req).await {
        Ok(resp) => read(resp).await,
        Err(e) => Err(anyhow::anyhow!("{e}")),
    };
    inner_driver.abort();
    driver.abort();
    out
}

/// A TLS client config whose only root is Airlock's interception CA.
fn airlock_ca_only(pem: &str) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes()) {
        let cert = cert.map_err(|e| anyhow::anyhow!("Airlock's CA certificate: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| anyhow::anyhow!("Airlock's CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        anyhow::bail!("Airlock's CA certificate holds no certificate\nhelp: run `airlock init` again, or restore ca.pem in the config dir");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The response as the tool result: `HTTP <status>` then the body (cut to size).
async fn read(resp: hyper::Response<hyper::body::Incoming>) -> anyhow::Result<ToolOutput> {
    let status = resp.status();
    let bytes = resp.into_body().collect().await?.to_bytes();
    let text = cut(String::from_utf8_lossy(&bytes).into_owned(), MAX_BODY_BYTES);
    Ok(ToolOutput {
        text: format!("HTTP {}\n{text}", status.as_u16()),
        is_error: !status.is_success(),
        ran: true,
    })
}

/// Keep at most `max` bytes of `text`, on a character boundary.
pub fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("\n[output cut]");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_the_port_only_when_it_is_not_the_default() {
        let t = target("https://Example.test/a?b=1").unwrap();
        assert!(t.https);
        assert_eq!((t.host.as_str(), t.port), ("example.test", 443));
        assert_eq!(t.authority, "example.test");
        assert_eq!(t.path_and_query, "/a?b=1");
        let t = target("http://[::1]:8080").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        assert_eq!(t.authority, "[::1]:8080");
        assert_eq!(t.path_and_query, "/");
    }

    #[test]
    fn other_schemes_are_refused_with_help() {
        let e = target("ftp://example.test/x").err().unwrap().to_string();
        assert!(e.contains("`ftp`") && e.contains("help:"), "{e}");
        assert!(target("not a url").is_err());
    }
}

//! The TLS server name of a pass-through tunnel, read before a byte goes upstream.
//!
//! A pass-through tunnel is not intercepted, so without this check it would carry any
//! bytes: plain text, or TLS naming another host behind a shared CDN (domain fronting).
//! The proxy reads the client's first flight until the whole ClientHello is in, parses it
//! with rustls' server-side [`rustls::server::Acceptor`] (a maintained parser that joins a
//! hello split over TCP segments and TLS records), and lets the tunnel open only when the
//! server name is the CONNECT host. The bytes read are then sent upstream unchanged.
//!
//! Encrypted Client Hello: the server name checked is the outer (public) one. A client
//! using ECH could name another host inside it, so a pass-through rule should only be
//! given for a host that is not a shared ECH front.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest first flight read while waiting for a ClientHello. Hellos with
/// post-quantum key shares are a few KiB; anything near this is not a normal client.
pub(crate) const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// Why a tunnel's first bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HelloError {
    #[error("the client's first bytes are not a TLS ClientHello ({0})")]
    NotTls(String),
    #[error("the TLS ClientHello names no server (no SNI)")]
    NoServerName,
    #[error("the TLS ClientHello names {sni:?}, not the tunnel's host {host:?}")]
    OtherServerName { sni: String, host: String },
    #[error("the client sent over {MAX_CLIENT_HELLO} bytes without completing a ClientHello")]
    TooLong,
    #[error("the client closed the tunnel before completing a ClientHello")]
    Closed,
    #[error("reading the ClientHello failed: {0}")]
    Io(String),
}

/// Read from `client` until a whole ClientHello is in; returns every byte read (to be
/// forwarded as is) and the server name it carries, if any.
pub(crate) async fn read_client_hello<S: AsyncRead + Unpin>(
    client: &mut S,
) -> Result<(Vec<u8>, Option<String>), HelloError> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut seen = Vec::new();
    let mut chunk = vec![0u8; 4096];
    loop {
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| HelloError::Io(e.to_string()))?;
        if n == 0 {
            return Err(HelloError::Closed);
        }
        if seen.is_empty() && chunk[0] != 0x16 {
            // Not a TLS handshake record: refuse before parsing text as TLS.
            return Err(HelloError::NotTls(format!(
                "the first byte is {:#04x}, a TLS handshake starts with 0x16",
                chunk[0]
            )));
        }
        seen.extend_from_slice(&chunk[..n]);
        if seen.len() > MAX_CLIENT_HELLO {
            return Err(HelloError::TooLong);
        }
        let mut fed = &chunk[..n];
        while !fed.is_empty() {
            acceptor
                .read_tls(&mut fed)
                .map_err(|e| HelloError::NotTls(e.to_string()))?;
        }
        match acceptor.accept() {
            Ok(None) => continue,
            Ok(Some(accepted)) => {
                let sni = accepted
                    .client_hello()
                    .server_name()
                    .map(|s| s.trim_end_matches('.').to_ascii_lowercase());
                return Ok((seen, sni));
            }
            Err((e, _)) => return Err(HelloError::NotTls(e.to_string())),
        }
    }
}

/// Whether `sni` may open a tunnel to `host` (normalized): the names must be equal; an
/// IP-literal host takes only a hello without a name (clients send none for addresses).
pub(crate) fn check_server_name(host: &str, sni: Option<&str>) -> Result<(), HelloError> {
    let ip_literal = host.parse::<std::net::IpAddr>().is_ok();
    match sni {
        Some(s) if s == host => Ok(()),
        Some(s) => Err(HelloError::OtherServerName {
            sni: s.to_string(),
            host: host.to_string(),
        }),
        None if ip_literal => Ok(()),
        None => Err(HelloError::NoServerName),
    }
}

impl From<io::Error> for HelloError {
    fn from(e: io::Error) -> Self {
        HelloError::Io(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real ClientHello from rustls' client, for `name`.
    fn hello(name: &str) -> Vec<u8> {
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let mut conn = rustls::ClientConnection::new(
            std::sync::Arc::new(cfg),
            rustls_pki_types::ServerName::try_from(name.to_string()).unwrap(),
        )
        .unwrap();
        let mut out = Vec::new();
        while conn.wants_write() {
            conn.write_tls(&mut out).unwrap();
        }
        out
    }

    /// A reader that hands out `data` in pieces of `step` bytes.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<io::Result<()>> {
            let end = (self.pos + self.step)
                .min(self.data.len())
                .min(self.pos + buf.remaining());
            let piece = self.data[self.pos..end].to_vec();
            buf.put_slice(&piece);
            self.pos = end;
            std::task::Poll::Ready(Ok(()))
        }
    }

    fn read(data: Vec<u8>, step: usize) -> Result<(Vec<u8>, Option<String>), HelloError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(read_client_hello(&mut Trickle { data, pos: 0, step }))
    }

    #[test]
    fn a_hello_split_at_every_size_gives_its_name_and_all_its_bytes() {
        let h = hello("pass.example");
        for step in [1, 2, 5, 7, 64, 511, h.len()] {
            let (bytes, sni) = read(h.clone(), step).unwrap();
            assert_eq!(sni.as_deref(), Some("pass.example"), "step {step}");
            assert_eq!(bytes, h, "step {step}");
        }
    }

    #[test]
    fn what_is_not_a_hello_is_refused() {
        for bad in [
            b"GET / HTTP/1.1\r\nHost: pass.example\r\n\r\n".to_vec(),
            b"SSH-2.0-OpenSSH_9.6\r\n".to_vec(),
            vec![0x16, 0x03, 0x01, 0x00, 0x05, 0x02, 0, 0, 1, 0], // a ServerHello type
            vec![0x17, 0x03, 0x03, 0x00, 0x01, 0x00],             // application data
        ] {
            assert!(
                matches!(read(bad.clone(), 3), Err(HelloError::NotTls(_))),
                "{bad:?}"
            );
        }
        let h = hello("pass.example");
        assert_eq!(read(h[..h.len() / 2].to_vec(), 9), Err(HelloError::Closed));
        // An endless handshake record header is cut at the bound.
        let mut endless = vec![0x16, 0x03, 0x01, 0xff, 0xff, 0x01, 0xff, 0xff, 0xff];
        endless.resize(MAX_CLIENT_HELLO * 2, 0);
        assert!(read(endless, 4096).is_err());
    }

    #[test]
    fn the_server_name_must_be_the_tunnel_host() {
        assert!(check_server_name("pass.example", Some("pass.example")).is_ok());
        assert!(matches!(
            check_server_name("pass.example", Some("victim.example")),
            Err(HelloError::OtherServerName { .. })
        ));
        assert_eq!(
            check_server_name("pass.example", None),
            Err(HelloError::NoServerName)
        );
        assert!(check_server_name("127.0.0.1", None).is_ok());
        assert!(check_server_name("127.0.0.1", Some("victim.example")).is_err());
    }
}

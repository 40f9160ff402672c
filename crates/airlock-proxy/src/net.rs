//! How the proxy reaches the world: name resolution and connecting, both behind traits so
//! tests can prove which addresses were checked and which were connected to.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

/// A boxed future, as the traits below return (no `async fn` in dyn traits yet).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A bidirectional byte stream to an upstream.
pub trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

/// A boxed upstream connection.
pub type BoxStream = Box<dyn Stream>;

/// Resolves host names on the host (never inside the sandbox).
pub trait Resolver: Send + Sync {
    /// All addresses of `host`. Called once per request; the proxy connects only to an
    /// address from this answer.
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>>;
}

/// Opens connections to exact, already checked addresses.
pub trait Connector: Send + Sync {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxStream>>;
}

/// The system resolver (getaddrinfo through tokio).
#[derive(Debug, Default, Clone)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, 0)).await?;
            Ok(addrs.map(|a| a.ip()).collect())
        })
    }
}

/// Plain TCP connections.
#[derive(Debug, Default, Clone)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxStream>> {
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok(Box::new(s) as BoxStream)
        })
    }
}

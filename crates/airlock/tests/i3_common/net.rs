//! The proxy's view of the network in the I3 tests: a resolver that never touches DNS and
//! a connector that records every connection attempt and never opens one to anything but
//! loopback, so no packet can leave for another address even if the code under test is
//! broken.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use airlock_proxy::net::{BoxFuture, BoxStream, Connector, Resolver};

/// `*.test` resolves to 127.0.0.1 unless scripted otherwise; anything else is unknown.
#[derive(Default)]
pub struct ScriptedResolver {
    answers: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    calls: Mutex<Vec<String>>,
}

impl ScriptedResolver {
    /// Answers for `name`, one per call; the last repeats.
    pub fn script(&self, name: &str, answers: &[&[&str]]) {
        let parsed = answers
            .iter()
            .map(|a| a.iter().map(|s| s.parse().unwrap()).collect())
            .collect();
        self.answers
            .lock()
            .unwrap()
            .insert(name.to_string(), parsed);
    }

    /// How often `name` was resolved.
    pub fn calls(&self, name: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

impl Resolver for ScriptedResolver {
    fn resolve<'a>(&'a self, host: &'a str) -> BoxFuture<'a, io::Result<Vec<IpAddr>>> {
        self.calls.lock().unwrap().push(host.to_string());
        let mut map = self.answers.lock().unwrap();
        let answer = match map.get_mut(host) {
            Some(list) if list.len() > 1 => Ok(list.remove(0)),
            Some(list) => Ok(list[0].clone()),
            None if host.ends_with(".test") => Ok(vec![IpAddr::from([127, 0, 0, 1])]),
            None => Err(io::Error::new(io::ErrorKind::NotFound, "no such test name")),
        };
        Box::pin(async move { answer })
    }
}

/// Records every connect. Loopback addresses are connected to for real; any other address
/// is refused here, before any socket exists.
#[derive(Default)]
pub struct RecordingConnector {
    attempts: Mutex<Vec<SocketAddr>>,
}

/// The error text of a refused non-loopback connect.
pub const REFUSED_NON_LOOPBACK: &str = "the test connector never connects beyond loopback";

impl RecordingConnector {
    pub fn attempts(&self) -> Vec<SocketAddr> {
        self.attempts.lock().unwrap().clone()
    }
}

impl Connector for RecordingConnector {
    fn connect(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<BoxStream>> {
        self.attempts.lock().unwrap().push(addr);
        Box::pin(async move {
            if !addr.ip().is_loopback() {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    REFUSED_NON_LOOPBACK,
                ));
            }
            let s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok(Box::new(s) as BoxStream)
        })
    }
}

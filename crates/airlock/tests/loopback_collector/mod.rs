//! A loopback HTTP server that stands for whatever an attacker or a leak would send to:
//! it counts every connection it accepts, before reading a byte, so a request that left
//! the machine is counted even if it was cut short.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The collector's port and its count of accepted connections.
pub struct Collector {
    pub port: u16,
    hits: Arc<AtomicUsize>,
}

impl Collector {
    /// Listen on 127.0.0.1 and answer every request `200 collected`.
    pub fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(mut tcp) = tcp else { continue };
                counted.fetch_add(1, Ordering::SeqCst);
                let mut reader = BufReader::new(tcp.try_clone().unwrap());
                let mut line = String::new();
                // The head ends at the empty line; a body, if any, is not needed.
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line == "\r\n" || line == "\n" {
                        break;
                    }
                    line.clear();
                }
                let _ = tcp.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\nconnection: close\r\n\r\ncollected\n",
                );
            }
        });
        Collector { port, hits }
    }

    /// Connections accepted so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// `http://127.0.0.1:PORT<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

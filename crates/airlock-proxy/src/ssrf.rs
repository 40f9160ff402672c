//! The SSRF guard: which resolved addresses the proxy may connect to.
//!
//! Written by hand because std's `IpAddr::is_global` is still unstable and the proxy needs
//! its own categories (metadata, CGNAT, IPv4 embedded in IPv6) for clear refusals.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why an address is not reachable by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Unspecified,
    Loopback,
    Private,
    LinkLocal,
    Cgnat,
    Multicast,
    Broadcast,
    Metadata,
    Reserved,
}

impl Refusal {
    /// Human name of the category.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Unspecified => "unspecified",
            Refusal::Loopback => "loopback",
            Refusal::Private => "private",
            Refusal::LinkLocal => "link-local",
            Refusal::Cgnat => "carrier-grade NAT (100.64.0.0/10)",
            Refusal::Multicast => "multicast",
            Refusal::Broadcast => "broadcast",
            Refusal::Metadata => "cloud metadata",
            Refusal::Reserved => "reserved or documentation",
        }
    }
}

/// The category that makes `ip` unreachable by default, or `None` for a public address.
pub fn classify(ip: IpAddr) -> Option<Refusal> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Refusal> {
    let o = ip.octets();
    let r = match o {
        [169, 254, 169, 254] | [100, 100, 100, 200] => Refusal::Metadata,
        [255, 255, 255, 255] => Refusal::Broadcast,
        [0, ..] => Refusal::Unspecified,
        [127, ..] => Refusal::Loopback,
        [10, ..] => Refusal::Private,
        [172, b, ..] if (16..=31).contains(&b) => Refusal::Private,
        [192, 168, ..] => Refusal::Private,
        [169, 254, ..] => Refusal::LinkLocal,
        [100, b, ..] if (64..=127).contains(&b) => Refusal::Cgnat,
        [a, ..] if (224..=239).contains(&a) => Refusal::Multicast,
        [a, ..] if a >= 240 => Refusal::Reserved,
        [192, 0, 0, _] | [192, 0, 2, _] | [198, 51, 100, _] | [203, 0, 113, _] => Refusal::Reserved,
        [198, b, ..] if b == 18 || b == 19 => Refusal::Reserved,
        _ => return None,
    };
    Some(r)
}

fn classify_v6(ip: Ipv6Addr) -> Option<Refusal> {
    let s = ip.segments();
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some(Refusal::Metadata);
    }
    if ip.is_unspecified() {
        return Some(Refusal::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Refusal::Loopback);
    }
    // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::/96):
    // judge the embedded IPv4 address, which is where the packet really goes.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let v4 = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
        return classify_v4(v4).or(Some(Refusal::Reserved));
    }
    // 6to4 (2002:a.b.c.d::/48) embeds an IPv4 address too.
    if s[0] == 0x2002 {
        let v4 = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        if let Some(r) = classify_v4(v4) {
            return Some(r);
        }
    }
    let r = match s[0] {
        x if x & 0xfe00 == 0xfc00 => Refusal::Private,
        x if x & 0xffc0 == 0xfe80 => Refusal::LinkLocal,
        x if x & 0xffc0 == 0xfec0 => Refusal::Private,
        x if x & 0xff00 == 0xff00 => Refusal::Multicast,
        0x2001 if s[1] == 0x0db8 => Refusal::Reserved,
        0x0100 if s[1..4] == [0, 0, 0] => Refusal::Reserved,
        _ => return None,
    };
    Some(r)
}

/// Decides whether the proxy may connect to a resolved address.
#[derive(Debug, Clone, Default)]
pub struct AddressGuard {
    exceptions: Vec<SocketAddr>,
}

/// A refused destination, with the operator's way out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{host} resolves to {addr}, a {category} address, which the proxy does not reach\nhelp: if this is intended, add \"{addr}\" to allow_private in net-rules.toml")]
pub struct AddressRefused {
    pub host: String,
    pub addr: SocketAddr,
    pub category: &'static str,
}

impl AddressGuard {
    /// A guard that lets exactly these `addr:port` pairs through although refused.
    pub fn new(exceptions: Vec<SocketAddr>) -> AddressGuard {
        AddressGuard {
            exceptions: exceptions.into_iter().map(canonical).collect(),
        }
    }

    /// Check one address for `host`.
    pub fn check(&self, host: &str, addr: SocketAddr) -> Result<SocketAddr, AddressRefused> {
        let addr = canonical(addr);
        match classify(addr.ip()) {
            None => Ok(addr),
            Some(_) if self.exceptions.contains(&addr) => Ok(addr),
            Some(r) => Err(AddressRefused {
                host: host.to_string(),
                addr,
                category: r.as_str(),
            }),
        }
    }

    /// The first address of `addrs` that may be reached, or the refusal of the first one.
    pub fn pick(
        &self,
        host: &str,
        addrs: &[IpAddr],
        port: u16,
    ) -> Result<SocketAddr, AddressRefused> {
        let mut first_err = None;
        for ip in addrs {
            match self.check(host, SocketAddr::new(*ip, port)) {
                Ok(a) => return Ok(a),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        Err(first_err.unwrap_or(AddressRefused {
            host: host.to_string(),
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port),
            category: Refusal::Unspecified.as_str(),
        }))
    }
}

/// IPv4-mapped IPv6 addresses become plain IPv4, so `::ffff:127.0.0.1` cannot dodge an
/// exception list written in IPv4, and the address connected to is the one checked.
fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(s: &str) -> Option<Refusal> {
        classify(s.parse().unwrap())
    }

    #[test]
    fn categories() {
        use Refusal::*;
        for (ip, want) in [
            ("127.0.0.1", Some(Loopback)),
            ("10.1.2.3", Some(Private)),
            ("172.16.0.1", Some(Private)),
            ("172.32.0.1", None),
            ("192.168.1.1", Some(Private)),
            ("169.254.169.254", Some(Metadata)),
            ("169.254.1.1", Some(LinkLocal)),
            ("100.64.0.1", Some(Cgnat)),
            ("100.128.0.1", None),
            ("224.0.0.1", Some(Multicast)),
            ("255.255.255.255", Some(Broadcast)),
            ("0.0.0.0", Some(Unspecified)),
            ("8.8.8.8", None),
            ("::1", Some(Loopback)),
            ("::", Some(Unspecified)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:169.254.169.254", Some(Metadata)),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::a00:1", Some(Private)),
            ("2002:a00:1::", Some(Private)),
            ("fd00:ec2::254", Some(Metadata)),
            ("fd12::1", Some(Private)),
            ("fe80::1", Some(LinkLocal)),
            ("ff02::1", Some(Multicast)),
            ("2001:db8::1", Some(Reserved)),
            ("2606:4700::1111", None),
        ] {
            assert_eq!(refused(ip), want, "{ip}");
        }
    }

    #[test]
    fn exceptions_are_exact() {
        let g = AddressGuard::new(vec!["127.0.0.1:8443".parse().unwrap()]);
        assert!(g.check("h", "127.0.0.1:8443".parse().unwrap()).is_ok());
        assert!(g
            .check("h", "[::ffff:127.0.0.1]:8443".parse().unwrap())
            .is_ok());
        let e = g.check("h", "127.0.0.1:8444".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("loopback") && e.to_string().contains("help:"));
        assert!(g.check("h", "127.0.0.2:8443".parse().unwrap()).is_err());
    }
}

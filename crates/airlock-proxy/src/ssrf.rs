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
    // IPv4-mapped (::ffff:a.b.c.d): judge the embedded IPv4 address, which is where the
    // packet really goes.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4);
    }
    if let Some(r) = classify_embedding(ip) {
        return Some(r);
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

/// Addresses through which a translator or relay reaches an IPv4 host: a way around the
/// IPv4 checks, so none is public. The category is the first embedded IPv4 address that
/// is refused (so a refusal names the loopback or metadata address behind it), else
/// reserved. `None` for every other address.
fn classify_embedding(ip: Ipv6Addr) -> Option<Refusal> {
    let o = ip.octets();
    let at = |i: [usize; 4]| Ipv4Addr::new(o[i[0]], o[i[1]], o[i[2]], o[i[3]]);
    let s = ip.segments();
    let embedded: Vec<Ipv4Addr> = if s[..6] == [0, 0, 0, 0, 0, 0]
        || s[..6] == [0, 0, 0, 0, 0xffff, 0]
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        // IPv4-compatible (::a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d, RFC 2765) and
        // well-known NAT64 (64:ff9b::/96, RFC 6052): the last 32 bits.
        vec![at([12, 13, 14, 15])]
    } else if s[..3] == [0x64, 0xff9b, 1] {
        // Local-use NAT64, 64:ff9b:1::/48 (RFC 8215). The network picks a prefix of 48 to
        // 96 bits inside it, which decides where RFC 6052 puts the IPv4 address (around
        // the reserved bits 64-71): /48, /56, /64 and /96, every place judged.
        vec![
            at([6, 7, 9, 10]),
            at([7, 9, 10, 11]),
            at([9, 10, 11, 12]),
            at([12, 13, 14, 15]),
        ]
    } else if s[..2] == [0x2001, 0] {
        // Teredo, 2001::/32 (RFC 4380): the client's IPv4 address, with every bit
        // inverted, in the last 32 bits, and the Teredo server's in bits 32-63.
        let client = at([12, 13, 14, 15]);
        vec![Ipv4Addr::from(!u32::from(client)), at([4, 5, 6, 7])]
    } else {
        return None;
    };
    // A place of zero bits is where the layout put nothing (0.0.0.0/8 is no host
    // anyone reaches), so it names no category.
    embedded
        .into_iter()
        .filter_map(classify_v4)
        .find(|r| *r != Refusal::Unspecified)
        .or(Some(Refusal::Reserved))
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
            ("64:ff9b::808:808", Some(Reserved)),
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
    fn local_use_nat64_is_judged_by_its_embedded_address_wherever_it_sits() {
        use Refusal::*;
        for (ip, want) in [
            // /96 inside the /48: the last 32 bits.
            ("64:ff9b:1::7f00:1", Loopback),
            ("64:ff9b:1::a9fe:a9fe", Metadata),
            ("64:ff9b:1:abcd::a00:1", Private),
            // /48: bits 48-63 and 72-87.
            ("64:ff9b:1:7f00:0:100::", Loopback),
            ("64:ff9b:1:a9fe:a9:fe00::", Metadata),
            // /56: bits 56-63 and 72-95.
            ("64:ff9b:1:a9:fe:a9fe::", Metadata),
            // /64: bits 72-103.
            ("64:ff9b:1:0:c0:a801:100::", Private),
            // A public address behind a translator is still reached around the IPv4
            // checks.
            ("64:ff9b:1::808:808", Reserved),
            ("64:ff9b:1:ffff::", Reserved),
        ] {
            assert_eq!(refused(ip), Some(want), "{ip}");
        }
    }

    #[test]
    fn ipv4_translated_is_judged_by_its_embedded_address() {
        use Refusal::*;
        for (ip, want) in [
            ("::ffff:0:127.0.0.1", Loopback),
            ("::ffff:0:169.254.169.254", Metadata),
            ("::ffff:0:10.0.0.1", Private),
            ("::ffff:0:8.8.8.8", Reserved),
        ] {
            assert_eq!(refused(ip), Some(want), "{ip}");
        }
    }

    #[test]
    fn teredo_is_never_public() {
        use Refusal::*;
        // Server 65.54.227.120, client 127.0.0.1 (obfuscated: 80ff:fffe).
        assert_eq!(
            refused("2001:0:4136:e378:8000:63bf:80ff:fffe"),
            Some(Loopback)
        );
        // Client 169.254.169.254 (obfuscated: 5601:5601).
        assert_eq!(refused("2001:0:4136:e378::5601:5601"), Some(Metadata));
        // Server 10.0.0.1, public client 192.0.2.45 is documentation: the client counts first.
        assert_eq!(refused("2001:0:a00:1::3fff:fdd2"), Some(Reserved));
        // Server 10.0.0.1, public client 8.8.8.8 (obfuscated: f7f7:f7f7).
        assert_eq!(refused("2001:0:a00:1::f7f7:f7f7"), Some(Private));
        // Both public: still not reachable.
        assert_eq!(refused("2001:0:4136:e378::f7f7:f7f7"), Some(Reserved));
        // Other 2001::/23 neighbours are not Teredo.
        assert_eq!(refused("2001:4860::8888"), None);
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

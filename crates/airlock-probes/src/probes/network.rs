//! Network: the sandbox has its own network namespace with only loopback. Host listeners on
//! 127.0.0.1 and host abstract UNIX sockets are out of reach, and raw sockets are refused.
//! No UNIX socket can be created at all (`EAFNOSUPPORT` from the seccomp filter), so a host
//! socket file in the workspace is out of reach too; connected stream pairs stay allowed.
//!
//! Traffic goes only to 127.0.0.1 and only to ports the caller names: never to an address
//! off this machine, not even one that "should be blocked".

use std::io::ErrorKind;
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::time::Duration;

use libc::{EACCES, EAFNOSUPPORT, ECONNREFUSED, ENETUNREACH, EPERM};

use crate::context::Ctx;
use crate::probe::{Category, Expect, Got, Probe};
use crate::sys::{got_from_fd, got_from_io};

const C: Category = Category::Network;

/// How long a connection or a reply is awaited; loopback answers in microseconds.
const WAIT: Duration = Duration::from_secs(3);

pub const PROBES: &[Probe] = &[
    Probe {
        name: "tcp_host_loopback",
        category: C,
        what: "TCP connect to the host listener on 127.0.0.1:--host-tcp",
        // ECONNREFUSED: nothing listens on the sandbox's own loopback; ENETUNREACH: loopback
        // is down; EACCES: Landlock forbids TCP connects to ports the profile did not allow.
        expect: Expect::Errno(&[ECONNREFUSED, ENETUNREACH, EACCES]),
        run: tcp_host_loopback,
        host_safe: true,
    },
    Probe {
        name: "udp_host_loopback",
        category: C,
        what: "UDP datagram to the host echo socket on 127.0.0.1:--host-udp, awaiting a reply",
        expect: Expect::Errno(&[ECONNREFUSED, ENETUNREACH]),
        run: udp_host_loopback,
        host_safe: true,
    },
    Probe {
        name: "abstract_unix_host",
        category: C,
        what: "connect to the host abstract UNIX socket --host-abstract",
        expect: Expect::Errno(&[EAFNOSUPPORT]),
        run: abstract_unix_host,
        host_safe: true,
    },
    Probe {
        name: "unix_socket_in_workspace",
        category: C,
        what: "connect to the host UNIX socket --host-unix-path (listening, mode 0777)",
        expect: Expect::Errno(&[EAFNOSUPPORT]),
        run: unix_socket_by_path,
        host_safe: true,
    },
    Probe {
        name: "unix_dgram_pair",
        category: C,
        what: "socketpair(AF_UNIX, SOCK_DGRAM), whose ends can be re-connected to any socket file",
        expect: Expect::Errno(&[EAFNOSUPPORT]),
        run: unix_dgram_pair,
        host_safe: true,
    },
    Probe {
        name: "unix_stream_pair_allowed",
        category: C,
        what: "socketpair(AF_UNIX, SOCK_STREAM) still works (pipes between processes)",
        expect: Expect::Holds("a connected stream pair"),
        run: unix_stream_pair_allowed,
        host_safe: true,
    },
    Probe {
        name: "only_loopback_interface",
        category: C,
        what: "/proc/net/dev lists no interface but lo",
        expect: Expect::Holds("interfaces: lo"),
        run: only_loopback_interface,
        host_safe: true,
    },
    Probe {
        name: "no_routes",
        category: C,
        what: "no IPv4 route and no IPv6 route through a device other than lo",
        expect: Expect::Holds("no route off loopback"),
        run: no_routes,
        host_safe: true,
    },
    Probe {
        name: "raw_socket",
        category: C,
        what: "socket(AF_INET, SOCK_RAW, IPPROTO_ICMP)",
        expect: Expect::Errno(&[EPERM]),
        run: raw_socket,
        host_safe: true,
    },
    Probe {
        name: "packet_socket",
        category: C,
        what: "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)",
        expect: Expect::Errno(&[EPERM]),
        run: packet_socket,
        host_safe: true,
    },
    Probe {
        name: "bind_privileged_port",
        category: C,
        what: "bind a TCP socket to port 80",
        expect: Expect::Errno(&[EACCES]),
        run: bind_privileged_port,
        host_safe: true,
    },
];

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

fn tcp_host_loopback(ctx: &Ctx) -> Got {
    let Some(port) = ctx.host_tcp else {
        return Got::NotRun("needs --host-tcp PORT".into());
    };
    got_from_io(TcpStream::connect_timeout(&loopback(port), WAIT), |_| {
        format!("connected to 127.0.0.1:{port}")
    })
}

fn udp_host_loopback(ctx: &Ctx) -> Got {
    let Some(port) = ctx.host_udp else {
        return Got::NotRun("needs --host-udp PORT".into());
    };
    let socket = match UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)) {
        Ok(socket) => socket,
        Err(e) => return got_from_io::<()>(Err(e), |_| String::new()),
    };
    let exchange = || -> std::io::Result<usize> {
        socket.set_read_timeout(Some(WAIT))?;
        socket.connect(loopback(port))?;
        socket.send(b"airlock-probe")?;
        let mut reply = [0u8; 64];
        socket.recv(&mut reply)
    };
    match exchange() {
        Ok(n) => Got::Succeeded(format!("got a {n}-byte reply from 127.0.0.1:{port}")),
        // No reply and no ICMP error: the datagram left for somewhere that stayed silent.
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Got::Succeeded("datagram sent, no reply and no port-unreachable error".into())
        }
        Err(e) => got_from_io::<()>(Err(e), |_| String::new()),
    }
}

fn abstract_unix_host(ctx: &Ctx) -> Got {
    let Some(name) = &ctx.host_abstract else {
        return Got::NotRun("needs --host-abstract NAME".into());
    };
    let addr = match UnixAddr::from_abstract_name(name.as_bytes()) {
        Ok(addr) => addr,
        Err(e) => return Got::NotRun(format!("bad abstract socket name: {e}")),
    };
    got_from_io(UnixStream::connect_addr(&addr), |_| {
        format!("connected to abstract socket @{name}")
    })
}

fn unix_socket_by_path(ctx: &Ctx) -> Got {
    let Some(path) = &ctx.host_unix_path else {
        return Got::NotRun("needs --host-unix-path PATH".into());
    };
    got_from_io(UnixStream::connect(path), |_| {
        format!("connected to {}", path.display())
    })
}

fn socketpair(kind: i32) -> (i32, [i32; 2]) {
    let mut fds = [-1; 2];
    // SAFETY: `fds` is a valid two-element out-array; returned descriptors are closed by
    // the callers.
    let ret = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    (ret, fds)
}

fn unix_dgram_pair(_: &Ctx) -> Got {
    let (ret, fds) = socketpair(libc::SOCK_DGRAM);
    let got = Got::from_ret(ret as i64);
    if ret == 0 {
        fds.into_iter().for_each(crate::sys::close);
    }
    got
}

fn unix_stream_pair_allowed(_: &Ctx) -> Got {
    let (ret, fds) = socketpair(libc::SOCK_STREAM);
    if ret != 0 {
        return Got::Violated(format!(
            "socketpair failed: {}",
            Got::from_ret(-1).describe()
        ));
    }
    fds.into_iter().for_each(crate::sys::close);
    Got::Holds("a connected stream pair".into())
}

/// Interface names in the text of `/proc/net/dev`.
pub fn interfaces(proc_net_dev: &str) -> Vec<String> {
    proc_net_dev
        .lines()
        .skip(2)
        .filter_map(|line| line.split_once(':'))
        .map(|(name, _)| name.trim().to_string())
        .collect()
}

fn only_loopback_interface(_: &Ctx) -> Got {
    let text = match std::fs::read_to_string("/proc/net/dev") {
        Ok(text) => text,
        Err(e) => return Got::NotRun(format!("cannot read /proc/net/dev: {e}")),
    };
    let names = interfaces(&text);
    let listed = format!("interfaces: {}", names.join(", "));
    if names == ["lo"] {
        Got::Holds(listed)
    } else {
        Got::Violated(listed)
    }
}

/// Routes that leave loopback: every IPv4 route in `/proc/net/route` (loopback routes live
/// only in the local table, which that file does not show) and IPv6 routes on other devices.
pub fn routes_off_loopback(ipv4: &str, ipv6: &str) -> Vec<String> {
    let v4 = ipv4.lines().skip(1).filter_map(|line| {
        let mut cols = line.split_whitespace();
        let (dev, dest) = (cols.next()?, cols.next()?);
        Some(format!("{dev} dest {dest}"))
    });
    let v6 = ipv6.lines().filter_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let dev = *cols.get(9)?;
        (dev != "lo").then(|| format!("{dev} dest {}/{}", cols[0], cols[1]))
    });
    v4.chain(v6).collect()
}

fn no_routes(_: &Ctx) -> Got {
    let ipv4 = match std::fs::read_to_string("/proc/net/route") {
        Ok(text) => text,
        Err(e) => return Got::NotRun(format!("cannot read /proc/net/route: {e}")),
    };
    // A kernel without IPv6 has no such file, and then no IPv6 route either.
    let ipv6 = std::fs::read_to_string("/proc/net/ipv6_route").unwrap_or_default();
    let routes = routes_off_loopback(&ipv4, &ipv6);
    if routes.is_empty() {
        Got::Holds("no route off loopback".into())
    } else {
        Got::Violated(format!("routes: {}", routes.join("; ")))
    }
}

fn raw_socket(_: &Ctx) -> Got {
    // SAFETY: integer arguments; a returned descriptor is closed and nothing is sent.
    got_from_fd(unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::IPPROTO_ICMP,
        )
    } as i64)
}

fn packet_socket(_: &Ctx) -> Got {
    let all = (libc::ETH_P_ALL as u16).to_be() as i32;
    // SAFETY: integer arguments; a returned descriptor is closed and nothing is sent.
    got_from_fd(
        unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, all) } as i64,
    )
}

fn bind_privileged_port(_: &Ctx) -> Got {
    // `std::net::TcpListener::bind` would also listen; binding alone is the privileged step.
    // SAFETY: integer arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Got::NotRun(format!(
            "cannot create a TCP socket: {}",
            Got::from_ret(-1).describe()
        ));
    }
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 80u16.to_be(),
        sin_addr: libc::in_addr { s_addr: 0 },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid sockaddr_in and the length matches it.
    let ret = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    let got = Got::from_ret(ret as i64);
    crate::sys::close(fd);
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_interface_names() {
        let dev = "Inter-|   Receive\n face |bytes\n    lo: 1 2 3\n  eth0: 4 5 6\n";
        assert_eq!(interfaces(dev), ["lo", "eth0"]);
    }

    #[test]
    fn finds_routes_off_loopback() {
        let v4 = "Iface\tDestination\tGateway\neth0\t00000000\t0101A8C0\n";
        let v6 = "00000000000000000000000000000001 80 00000000000000000000000000000000 00 \
                  00000000000000000000000000000000 00000000 00000001 00000000 80200001 lo\n\
                  fe800000000000000000000000000000 40 00000000000000000000000000000000 00 \
                  00000000000000000000000000000000 00000100 00000001 00000000 00000001 eth0\n";
        let found = routes_off_loopback(v4, v6);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("eth0 dest 00000000"));
        assert!(found[1].starts_with("eth0 dest fe80"));
        assert!(routes_off_loopback("Iface\tDestination\n", "").is_empty());
    }
}

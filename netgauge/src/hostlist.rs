//! Two hosts started by hand (no `--local`, no MPI): the server says where
//! it listens and what to type on the client; the client's `-R` takes a
//! host name for the IP modes.

use std::io;
use std::net::IpAddr;
use std::time::Duration;

use nix::ifaddrs::getifaddrs;

use crate::modes::Mode;
use crate::run::RunConfig;
use crate::transport::{LinkKind, SessionConfig};

/// A server started by hand (`-a`), converted from the command line by
/// `cli`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The port it listens on (`-P`).
    pub port: u16,
    /// Serve one client, then exit (`--once`).
    pub once: bool,
    /// Its interface (`-I`), if given.
    pub iface: Option<String>,
    /// The ethertype of eth sessions (`--eth-type`).
    pub eth_type: u16,
    /// The link of our modes (`--link`) and, for a UDP link, the clients'
    /// addresses (`--link-peer`).
    pub link: LinkKind,
    pub link_peers: Vec<String>,
}

/// One interface of this host: name, MAC, IPv4/IPv6 addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Iface {
    pub name: String,
    pub mac: Option<edp::MacAddr>,
    pub ips: Vec<IpAddr>,
}

/// The interfaces that are up, loopback excluded (getifaddrs(3)); only
/// `only` when given.
pub fn interfaces(only: Option<&str>) -> io::Result<Vec<Iface>> {
    let mut out: Vec<Iface> = Vec::new();
    for a in getifaddrs().map_err(io::Error::from)? {
        if only.is_some_and(|o| o != a.interface_name)
            || a.flags
                .contains(nix::net::if_::InterfaceFlags::IFF_LOOPBACK)
            || !a.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP)
        {
            continue;
        }
        let i = match out.iter().position(|i| i.name == a.interface_name) {
            Some(i) => i,
            None => {
                out.push(Iface {
                    name: a.interface_name.clone(),
                    ..Iface::default()
                });
                out.len() - 1
            }
        };
        let Some(addr) = a.address else { continue };
        if let Some(l) = addr.as_link_addr() {
            if let Some(m) = l.addr() {
                if m != [0; 6] {
                    out[i].mac = Some(edp::MacAddr(m));
                }
            }
        } else if let Some(v4) = addr.as_sockaddr_in() {
            out[i].ips.push(IpAddr::V4(v4.ip()));
        } else if let Some(v6) = addr.as_sockaddr_in6() {
            out[i].ips.push(IpAddr::V6(v6.ip()));
        }
    }
    Ok(out)
}

/// What the server prints before serving: per interface its MAC and IPs,
/// the port, and the client command for each mode, for example
///
/// ```text
/// netgauge server: mode edp, port 19470, serving clients until stopped (Ctrl-C)
/// #   eth0  MAC 02:00:00:00:00:01  IP 10.0.0.1
/// # on the client: netgauge -m edp -I <client interface> -R 02:00:00:00:00:01 -P 19470
/// ```
pub fn announcement(args: &ServeConfig, modes: &[Mode], ifaces: &[Iface]) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let names: Vec<&str> = modes.iter().map(|m| m.name()).collect();
    let _ = writeln!(
        s,
        "netgauge server: mode {}, port {}, {}",
        names.join(","),
        args.port,
        if args.once {
            "one client"
        } else {
            "serving clients until stopped (Ctrl-C)"
        }
    );
    for i in ifaces {
        let ips: Vec<String> = i.ips.iter().map(|a| a.to_string()).collect();
        let _ = writeln!(
            s,
            "#   {}  MAC {}  IP {}",
            i.name,
            i.mac.map(|m| m.to_string()).unwrap_or_else(|| "-".into()),
            if ips.is_empty() {
                "-".into()
            } else {
                ips.join(" ")
            }
        );
    }
    let ethernet = modes.iter().any(|m| m.is_ethernet()) && args.link == LinkKind::Packet;
    let ip_only = modes.iter().all(|m| !m.is_ethernet()) || args.link == LinkKind::Udp;
    // The address to give: the MAC of the server's interface for Ethernet
    // modes (all modes then need it), else its first IPv4 address.
    let first = ifaces.iter().find(|i| {
        if ethernet {
            i.mac.is_some()
        } else {
            !i.ips.is_empty()
        }
    });
    let remote = match first {
        Some(i) if ethernet => i.mac.map(|m| m.to_string()),
        Some(i) => i
            .ips
            .iter()
            .find(|a| a.is_ipv4())
            .or(i.ips.first())
            .map(|a| a.to_string()),
        None => None,
    };
    let remote = remote.unwrap_or_else(|| "<server address>".into());
    let mut cmd = format!(
        "netgauge -m {} -R {remote} -P {}",
        names.join(","),
        args.port
    );
    if !ip_only {
        cmd = format!(
            "netgauge -m {} -I <client interface> -R {remote} -P {}",
            names.join(","),
            args.port
        );
        if modes.iter().any(|m| !m.is_ethernet()) {
            let ip = first
                .and_then(|i| i.ips.iter().find(|a| a.is_ipv4()))
                .map(|a| a.to_string())
                .unwrap_or_else(|| "<server IP>".into());
            cmd.push_str(&format!(" --remote-ip {ip}"));
        }
    }
    if args.link == LinkKind::Udp {
        // The client's UDP link must be one of --link-peer's addresses.
        let peers = args.link_peers.join(", ");
        cmd = format!(
            "netgauge --link udp -m {} -R {remote} -P {}   (from one of: {peers}; a client binds port {} unless --link-bind)",
            names.join(","),
            args.port,
            args.port.wrapping_add(1)
        );
    }
    let _ = writeln!(s, "# on the client: {cmd}");
    s
}

/// The server (`-a`): says where it listens and what to type on the
/// client, then serves one session per mode, client after client, until
/// stopped; with `--once` one client and the first error end it. A failed
/// session (the client vanished, bad data) is reported on stderr and the
/// server waits for the next client; an error that another try cannot
/// change ([`is_fatal`]: the port is taken, no privilege, no such
/// interface) ends it at once with what to do. Sessions that fail within a
/// second of starting are paced to one a second, so a server never spins.
pub fn serve(args: &ServeConfig, run: &RunConfig, sessions: &[SessionConfig]) -> io::Result<()> {
    let modes: Vec<Mode> = sessions.iter().map(|s| s.mode).collect();
    match interfaces(args.iface.as_deref()) {
        Ok(ifs) => crate::output::print(&announcement(args, &modes, &ifs))?,
        Err(e) => eprintln!("netgauge: cannot list the interfaces: {e}"),
    }
    let mut served = 0u64;
    loop {
        if !args.once {
            // Every session opens its sockets anew: keep the capabilities.
            crate::privilege::expect_sessions(usize::MAX);
        }
        for cfg in sessions {
            let mode = cfg.mode;
            let started = std::time::Instant::now();
            match crate::run::server(run, cfg) {
                Ok(()) => {}
                Err(e) if args.once || is_fatal(&e) => return Err(fatal(args, mode, e)),
                Err(e) => {
                    eprintln!(
                        "netgauge: mode {}: session failed: {e}; waiting for the next client",
                        mode.name()
                    );
                    if let Some(rest) = Duration::from_secs(1).checked_sub(started.elapsed()) {
                        std::thread::sleep(rest);
                    }
                    break;
                }
            }
        }
        served += 1;
        if args.once {
            return Ok(());
        }
        eprintln!("netgauge: client {served} done; waiting for the next one");
    }
}

/// Whether a server's error is one that the next client cannot change:
/// the port is taken, the privilege or the interface is missing, the
/// options are wrong.
pub fn is_fatal(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::AddrInUse
            | io::ErrorKind::AddrNotAvailable
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::NotFound
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::Unsupported
    )
}

/// The error a server ends with: the mode, the error, and for a taken port
/// the port and the fix.
fn fatal(args: &ServeConfig, mode: Mode, e: io::Error) -> io::Error {
    let msg = if e.kind() == io::ErrorKind::AddrInUse && mode == Mode::Eth {
        format!(
            "mode eth: another eth server without -R already serves {} for ethertype {:#06x} \
             (eth frames carry no port, so -P cannot tell them apart): stop it, or give this \
             server and its client another --eth-type",
            args.iface.as_deref().unwrap_or("this interface"),
            args.eth_type
        )
    } else if e.kind() == io::ErrorKind::AddrInUse {
        let what = e.to_string();
        let what = if what.contains(&args.port.to_string()) {
            what
        } else {
            format!("port {} is already in use ({what})", args.port)
        };
        format!(
            "mode {}: {what}: stop the server holding it, or give this server and its client another port with -P PORT",
            mode.name()
        )
    } else {
        format!("mode {}: {e}", mode.name())
    };
    io::Error::new(e.kind(), msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_announcement_says_what_to_type() {
        let ifs = [Iface {
            name: "eth0".into(),
            mac: Some(edp::MacAddr([2, 0, 0, 0, 0, 1])),
            ips: vec!["10.0.0.1".parse().unwrap()],
        }];
        let args = ServeConfig {
            port: 6000,
            once: false,
            iface: None,
            eth_type: crate::transport::eth::ETHERTYPE,
            link: LinkKind::Packet,
            link_peers: Vec::new(),
        };
        let a = announcement(&args, &[Mode::Edp, Mode::Esp], &ifs);
        assert!(a.contains("MAC 02:00:00:00:00:01  IP 10.0.0.1"), "{a}");
        assert!(
            a.contains("netgauge -m edp,esp -I <client interface> -R 02:00:00:00:00:01 -P 6000"),
            "{a}"
        );
        assert!(a.contains("until stopped"), "{a}");
        let a = announcement(&args, &[Mode::Udp, Mode::Tcp], &ifs);
        assert!(
            a.contains("# on the client: netgauge -m udp,tcp -R 10.0.0.1 -P 6000\n"),
            "{a}"
        );
        let a = announcement(&args, &[Mode::Edp, Mode::Udp], &ifs);
        assert!(a.contains("--remote-ip 10.0.0.1"), "{a}");
    }

    #[test]
    fn interfaces_lists_no_loopback() {
        let all = interfaces(None).unwrap();
        assert!(all.iter().all(|i| i.name != "lo"), "{all:?}");
        assert!(interfaces(Some("lo")).unwrap().is_empty());
    }
}

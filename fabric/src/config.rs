//! The provider's configuration variables, registered with libfabric
//! (`fi_param_define`, so `fi_info -e` lists them) and read from the
//! environment by `fi_param_get` (fi_provider(7)): `FI_CLUSTERNET_<NAME>`.

use std::path::PathBuf;
use std::time::Duration;

use link::Ipv4Net;
use runtime::WaitPolicy;

use crate::error::{FiError, FiResult};

/// One variable: its name as given to `fi_param_define` (libfabric prefixes
/// `FI_CLUSTERNET_` and upper-cases it) and its help text.
#[derive(Debug, Clone, Copy)]
pub struct Param {
    /// Name without the prefix, lower case.
    pub name: &'static str,
    /// Help text `fi_info -e` prints.
    pub help: &'static str,
}

/// Default of `FI_CLUSTERNET_MAX_PEERS`.
pub const DEFAULT_MAX_PEERS: usize = 64;

/// Default of `FI_CLUSTERNET_EAGER_LIMIT`, bytes: 8 KiB, below comm's own
/// 64 KiB (`CommConfig::eager_limit`). An endpoint of up to 64 peers gives
/// each a window of a 64th of its 2 MiB receive budget (32 KiB, ULFC), so
/// eager messages of 16-64 KiB went one or two at a time; pulled ones are
/// paced by the receiver instead. OSU 7.4's osu_bw, 2 ranks, MTU 9000
/// (docs/measurements/issue39-wire.txt): 16 KiB moved 1014 MB/s eager and
/// 2212 MB/s pulled, 32 KiB 1002 and 2638 MB/s; osu_latency at 16 KiB
/// takes 10.8 us eager and 16.2 us pulled (the offer and the pull request
/// are one more round trip).
pub const DEFAULT_EAGER_LIMIT: usize = 8 << 10;

/// Every variable of the provider.
pub const PARAMS: [Param; 7] = [
    Param {
        name: "iface",
        help: "Network interface the provider uses (default: every Ethernet interface that is \
               up, loopback excluded; over link=udp, the interface whose IPv4 address the UDP \
               link binds, default the first one that is up, loopback last)",
    },
    Param {
        name: "link",
        help: "How frames travel: 'packet' (raw Ethernet through AF_PACKET, needs CAP_NET_RAW; \
               default) or 'udp' (the frames inside UDP datagrams: no privilege)",
    },
    Param {
        name: "wait",
        help: "How blocking calls wait: 'busy' (spin), 'block' (sleep in the kernel at once) or \
               'adaptive[:US]' (spin up to US microseconds, then sleep; default adaptive:50)",
    },
    Param {
        name: "key_file",
        help: "File holding the cluster key (32 hex digits, mode 600) that authenticates every \
               frame; default: CLUSTERNET_KEY / CLUSTERNET_KEY_FILE of the environment, none \
               when unset",
    },
    Param {
        name: "max_peers",
        help: "Most peers an FI_EP_RDM endpoint talks to, itself included, and senders it \
               hears before inserting them (each starts with an equal share of the receive \
               budget; beyond, a stranger's messages are dropped and counted); every process of \
               a job must use the same value (default 64)",
    },
    Param {
        name: "eager_limit",
        help: "Largest message an FI_EP_RDM endpoint sends at once, bytes (Open MPI's \
               btl_eager_limit); a longer one is announced and pulled by its receiver into the \
               matched buffer, paced by the receiver (default 8192)",
    },
    Param {
        name: "accept",
        help: "Over link=udp: IPv4 networks (comma-separated, ADDRESS/PREFIX) from which an \
               endpoint hears a sender it has no address for yet (first contact, as an \
               FI_EP_RDM receiver of fabtests' address exchange needs); 'none' for none. Senders \
               whose frames carry the cluster key's tag are heard from anywhere. Default: the \
               interface's subnet",
    },
];

/// How frames travel (`FI_CLUSTERNET_LINK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// Raw Ethernet through the process's packet socket (CAP_NET_RAW).
    Packet,
    /// Ethernet frames inside UDP datagrams (`link::UdpLink`).
    Udp,
}

/// The parsed configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `FI_CLUSTERNET_IFACE`.
    pub iface: Option<String>,
    /// `FI_CLUSTERNET_LINK`.
    pub link: LinkKind,
    /// `FI_CLUSTERNET_WAIT`.
    pub wait: WaitPolicy,
    /// `FI_CLUSTERNET_KEY_FILE`.
    pub key_file: Option<PathBuf>,
    /// `FI_CLUSTERNET_MAX_PEERS`.
    pub max_peers: usize,
    /// `FI_CLUSTERNET_EAGER_LIMIT`, bytes.
    pub eager_limit: usize,
    /// `FI_CLUSTERNET_ACCEPT`: `None` for the default (the interface's
    /// subnet), else these networks (empty for `none`).
    pub accept: Option<Vec<Ipv4Net>>,
    /// libfabric's `FI_PROVIDER` names a utility provider over this one
    /// (`crate::getinfo::layering_requested`).
    pub layering: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            iface: None,
            link: LinkKind::Packet,
            wait: WaitPolicy::DEFAULT,
            key_file: None,
            max_peers: DEFAULT_MAX_PEERS,
            eager_limit: DEFAULT_EAGER_LIMIT,
            accept: None,
            layering: false,
        }
    }
}

impl Config {
    /// Parses the variables through `get` (name without prefix -> value,
    /// `None` when unset; empty values count as unset).
    ///
    /// Errors: `FI_EINVAL` naming the variable and the values it takes.
    pub fn parse(get: impl Fn(&str) -> Option<String>) -> FiResult<Config> {
        let get = |n: &str| get(n).filter(|v| !v.trim().is_empty());
        let mut c = Config {
            iface: get("iface").map(|s| s.trim().to_string()),
            ..Config::default()
        };
        if let Some(l) = get("link") {
            c.link = match l.trim().to_ascii_lowercase().as_str() {
                "packet" | "edp" | "ethernet" => LinkKind::Packet,
                "udp" => LinkKind::Udp,
                other => {
                    return Err(FiError::inval(format!(
                        "FI_CLUSTERNET_LINK={other:?}: give 'packet' or 'udp'"
                    )))
                }
            };
        }
        if let Some(w) = get("wait") {
            c.wait = parse_wait(&w)?;
        }
        c.key_file = get("key_file").map(|s| PathBuf::from(s.trim()));
        if let Some(m) = get("max_peers") {
            c.max_peers = m.trim().parse().ok().filter(|&n| n >= 1).ok_or_else(|| {
                FiError::inval(format!(
                    "FI_CLUSTERNET_MAX_PEERS={m:?}: give the most peers, a number from 1"
                ))
            })?;
        }
        if let Some(e) = get("eager_limit") {
            c.eager_limit = e.trim().parse().map_err(|_| {
                FiError::inval(format!(
                    "FI_CLUSTERNET_EAGER_LIMIT={e:?}: give a number of bytes (0 pulls every \
                     message to another endpoint)"
                ))
            })?;
        }
        if let Some(a) = get("accept") {
            c.accept = Some(parse_accept(&a)?);
        }
        Ok(c)
    }
}

/// `none`, or comma-separated networks (`10.0.0.0/8,192.168.1.7`).
fn parse_accept(s: &str) -> FiResult<Vec<Ipv4Net>> {
    if s.trim().eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim()
                .parse()
                .map_err(|e| FiError::inval(format!("FI_CLUSTERNET_ACCEPT: {e}; or 'none'")))
        })
        .collect()
}

/// `busy`, `block`, `adaptive` or `adaptive:US`.
fn parse_wait(s: &str) -> FiResult<WaitPolicy> {
    let s = s.trim().to_ascii_lowercase();
    let bad = || {
        FiError::inval(format!(
            "FI_CLUSTERNET_WAIT={s:?}: give 'busy', 'block', 'adaptive' or 'adaptive:US' \
             (microseconds of spinning before sleeping)"
        ))
    };
    match s.as_str() {
        "busy" | "busy-poll" | "busypoll" => Ok(WaitPolicy::BusyPoll),
        "block" | "blocking" => Ok(WaitPolicy::Block),
        "adaptive" => Ok(WaitPolicy::DEFAULT),
        _ => {
            let us = s.strip_prefix("adaptive:").ok_or_else(bad)?;
            let us: u64 = us.parse().map_err(|_| bad())?;
            Ok(WaitPolicy::Adaptive {
                spin: Duration::from_micros(us),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |n| {
            vars.iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_when_unset() {
        assert_eq!(Config::parse(env(&[])).unwrap(), Config::default());
        assert_eq!(Config::parse(env(&[("iface", " ")])).unwrap().iface, None);
    }

    #[test]
    fn parses_every_variable() {
        let c = Config::parse(env(&[
            ("iface", "veth0"),
            ("link", "UDP"),
            ("wait", "adaptive:20"),
            ("key_file", "/etc/clusternet/cluster.key"),
            ("max_peers", "512"),
            ("eager_limit", "4096"),
            ("accept", "10.0.0.0/8, 192.168.1.7"),
        ]))
        .unwrap();
        assert_eq!(c.iface.as_deref(), Some("veth0"));
        assert_eq!(c.link, LinkKind::Udp);
        assert_eq!(
            c.wait,
            WaitPolicy::Adaptive {
                spin: Duration::from_micros(20)
            }
        );
        assert_eq!(
            c.key_file,
            Some(PathBuf::from("/etc/clusternet/cluster.key"))
        );
        assert_eq!(c.max_peers, 512);
        assert_eq!(c.eager_limit, 4096);
        assert_eq!(Config::default().eager_limit, DEFAULT_EAGER_LIMIT);
        assert_eq!(
            c.accept,
            Some(vec![
                "10.0.0.0/8".parse().unwrap(),
                "192.168.1.7/32".parse().unwrap()
            ])
        );
        assert_eq!(
            Config::parse(env(&[("accept", "None")])).unwrap().accept,
            Some(vec![])
        );
        assert_eq!(
            Config::parse(env(&[("wait", "busy")])).unwrap().wait,
            WaitPolicy::BusyPoll
        );
        assert_eq!(
            Config::parse(env(&[("wait", "block")])).unwrap().wait,
            WaitPolicy::Block
        );
    }

    #[test]
    fn refuses_bad_values_naming_the_variable() {
        let e = Config::parse(env(&[("link", "tcp")])).unwrap_err();
        assert_eq!(e.code, crate::fi::FI_EINVAL);
        assert!(e.msg.contains("FI_CLUSTERNET_LINK"));
        let e = Config::parse(env(&[("wait", "adaptive:x")])).unwrap_err();
        assert!(e.msg.contains("FI_CLUSTERNET_WAIT"));
        let e = Config::parse(env(&[("max_peers", "0")])).unwrap_err();
        assert!(e.msg.contains("FI_CLUSTERNET_MAX_PEERS"));
        let e = Config::parse(env(&[("eager_limit", "64k")])).unwrap_err();
        assert!(e.msg.contains("FI_CLUSTERNET_EAGER_LIMIT"), "{}", e.msg);
        let e = Config::parse(env(&[("accept", "10.0.0.0/40")])).unwrap_err();
        assert!(e.msg.contains("FI_CLUSTERNET_ACCEPT"), "{}", e.msg);
    }
}

//! `fi_getinfo` for this provider (fi_getinfo(3)): one answer per
//! interface and endpoint type that satisfies the hints, or FI_ENODATA.
//!
//! What the answers offer: [`rdm_base`], FI_EP_RDM with FI_TAGGED and
//! FI_MSG on `comm`'s tagged core (what Open MPI's mtl ofi asks for), and
//! [`dgram_base`], FI_EP_DGRAM with FI_MSG (`fi_pingpong -e dgram`, and a
//! base for libfabric's ofi_rxd).

use std::net::{Ipv4Addr, SocketAddrV4};

use edp::wire::EDP_HEADER_LEN;
use edp::MacAddr;

use crate::addr::{resolve_ipv4, AddrFormat, Name};
use crate::attr::{self, DomainAttr, EpAttr, FabricAttr, Info, RxAttr, TxAttr};
use crate::config::{Config, LinkKind};
use crate::error::{FiError, FiResult};
use crate::fi;
use crate::limits::{
    DOMAIN_OBJECTS, FABRIC_NAME, MAX_ERR_DATA, MEM_TAG_FORMAT, PROV_VERSION, RDM_INJECT, RDM_QUEUE,
    RX_SIZE, TX_SIZE,
};
use crate::nic::{link_mtu, Nic};

/// Largest datagram of a DGRAM endpoint on `nic`: the link MTU less the
/// EDP header and, with a cluster key, the authentication trailer.
pub fn max_dgram(nic: &Nic, link: LinkKind, keyed: bool) -> usize {
    let auth = if keyed { runtime::auth::TRAILER_LEN } else { 0 };
    link_mtu(nic, link).saturating_sub(EDP_HEADER_LEN + auth)
}

/// The address format of endpoints over `link`.
pub fn format_of(link: LinkKind) -> AddrFormat {
    match link {
        LinkKind::Packet => AddrFormat::Edp,
        LinkKind::Udp => AddrFormat::Udp,
    }
}

/// Everything a DGRAM endpoint on `nic` offers.
pub fn dgram_base(nic: &Nic, link: LinkKind, keyed: bool) -> Info {
    let max = max_dgram(nic, link, keyed);
    let comm = fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM;
    Info {
        caps: fi::FI_MSG | fi::FI_SEND | fi::FI_RECV | fi::FI_SOURCE | comm,
        mode: 0,
        addr_format: format_of(link).fi_format(),
        src_addr: None,
        dest_addr: None,
        has_handle: false,
        tx: Some(TxAttr {
            caps: fi::FI_MSG | fi::FI_SEND,
            mode: 0,
            op_flags: 0,
            // Datagrams may be lost; no order is promised between them.
            msg_order: fi::FI_ORDER_NONE,
            comp_order: fi::FI_ORDER_STRICT,
            // Every send is copied to the link before the call returns.
            inject_size: max,
            size: TX_SIZE,
            iov_limit: 1,
            rma_iov_limit: 0,
        }),
        rx: Some(RxAttr {
            caps: fi::FI_MSG | fi::FI_RECV | fi::FI_SOURCE,
            mode: 0,
            op_flags: 0,
            msg_order: fi::FI_ORDER_NONE,
            comp_order: fi::FI_ORDER_STRICT,
            total_buffered_recv: edp::socket::DEFAULT_RECV_BUFFER,
            size: RX_SIZE,
            iov_limit: 1,
        }),
        ep: Some(EpAttr {
            ep_type: fi::FI_EP_DGRAM,
            protocol: fi::FI_PROTO_UNSPEC,
            protocol_version: 1,
            max_msg_size: max,
            msg_prefix_size: 0,
            max_order_raw_size: 0,
            max_order_war_size: 0,
            max_order_waw_size: 0,
            mem_tag_format: 0,
            tx_ctx_cnt: 1,
            rx_ctx_cnt: 1,
            auth_key_size: 0,
        }),
        domain: Some(DomainAttr {
            name: Some(nic.name.clone()),
            threading: fi::FI_THREAD_SAFE,
            control_progress: fi::FI_PROGRESS_AUTO,
            // Datagrams reach posted buffers when a CQ is read.
            data_progress: fi::FI_PROGRESS_MANUAL,
            resource_mgmt: fi::FI_RM_ENABLED,
            av_type: fi::FI_AV_UNSPEC,
            mr_mode: 0,
            mr_key_size: 0,
            cq_data_size: 0,
            cq_cnt: DOMAIN_OBJECTS,
            ep_cnt: DOMAIN_OBJECTS,
            tx_ctx_cnt: DOMAIN_OBJECTS,
            rx_ctx_cnt: DOMAIN_OBJECTS,
            max_ep_tx_ctx: 1,
            max_ep_rx_ctx: 1,
            max_ep_stx_ctx: 0,
            max_ep_srx_ctx: 0,
            // Counters count the completions of the operations they are
            // bound to; these endpoints have no RMA, so bound to RMA
            // events a counter moves only by fi_cntr_add / fi_cntr_set
            // (MPICH opens one per domain and binds it that way).
            cntr_cnt: DOMAIN_OBJECTS,
            mr_iov_limit: 1,
            caps: comm,
            mode: 0,
            auth_key_size: 0,
            max_err_data: MAX_ERR_DATA,
            mr_cnt: 0,
            tclass: 0,
            max_ep_auth_key: 0,
            max_group_id: 0,
            max_cntr_value: u64::MAX,
            max_err_cntr_value: u64::MAX,
        }),
        fabric: Some(FabricAttr {
            name: Some(FABRIC_NAME.into()),
            prov_name: None,
            prov_version: PROV_VERSION,
            api_version: 0,
        }),
    }
}

/// Everything an RDM endpoint on `nic` offers.
pub fn rdm_base(nic: &Nic, link: LinkKind) -> Info {
    let comm = fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM;
    let core = comm::CommConfig::default();
    let max = usize::try_from(core.max_message_bytes).unwrap_or(usize::MAX);
    let mut i = dgram_base(nic, link, false);
    // FI_SOURCE_ERR: a connectionless endpoint hears senders not in its
    // address vector; with the bit, their receives name them (fi_cq(3)).
    i.caps = fi::FI_TAGGED
        | fi::FI_MSG
        | fi::FI_SEND
        | fi::FI_RECV
        | fi::FI_DIRECTED_RECV
        | fi::FI_SOURCE
        | fi::FI_SOURCE_ERR
        | comm;
    let tx = i.tx.as_mut().expect("dgram_base has tx_attr");
    tx.caps = fi::FI_TAGGED | fi::FI_MSG | fi::FI_SEND;
    // Messages to one peer are matched in send order (the core's per-peer
    // order, MPI's non-overtaking rule).
    tx.msg_order = fi::FI_ORDER_SAS;
    tx.comp_order = fi::FI_ORDER_NONE;
    tx.inject_size = RDM_INJECT;
    tx.size = RDM_QUEUE;
    let rx = i.rx.as_mut().expect("dgram_base has rx_attr");
    rx.caps = fi::FI_TAGGED
        | fi::FI_MSG
        | fi::FI_RECV
        | fi::FI_DIRECTED_RECV
        | fi::FI_SOURCE
        | fi::FI_SOURCE_ERR;
    rx.msg_order = fi::FI_ORDER_SAS;
    rx.comp_order = fi::FI_ORDER_NONE;
    rx.size = RDM_QUEUE;
    rx.total_buffered_recv = core.recv_budget_bytes as usize;
    let ep = i.ep.as_mut().expect("dgram_base has ep_attr");
    ep.ep_type = fi::FI_EP_RDM;
    ep.protocol_version = 2;
    ep.max_msg_size = max;
    ep.mem_tag_format = MEM_TAG_FORMAT;
    let d = i.domain.as_mut().expect("dgram_base has domain_attr");
    // The runtime's service thread keeps the core going while nobody calls;
    // a CQ read gives it a turn as well.
    d.data_progress = fi::FI_PROGRESS_AUTO;
    d.control_progress = fi::FI_PROGRESS_AUTO;
    d.cq_data_size = 8;
    i
}

/// Parses `node`/`service` of fi_getinfo into a name of `format`: over the
/// packet link node is a MAC (for a source also the interface's name, or
/// an IPv4 address or host name of it; for a destination also an IPv4
/// address or host name whose MAC the kernel's neighbour table holds on
/// the interface, `link::iface::neighbor_mac`) and service the EDP port; over the
/// UDP link an IPv4 address or a host name, and a UDP port.
fn parse_node(
    node: Option<&str>,
    service: Option<&str>,
    format: AddrFormat,
    nic: &Nic,
    source: bool,
) -> FiResult<Option<Name>> {
    if node.is_none() && service.is_none() {
        return Ok(None);
    }
    let port: u16 = match service {
        Some(s) => s
            .parse()
            .map_err(|_| FiError::nodata(format!("service {s:?} is not a port number")))?,
        None if source => 0,
        None => return Err(FiError::nodata("a destination node needs a service (port)")),
    };
    match format {
        AddrFormat::Edp => {
            let mine =
                |n: &str| n == nic.name || (nic.ipv4.is_some() && resolve_ipv4(n) == nic.ipv4);
            let mac = match node {
                None => nic.mac,
                Some(n) if source && mine(n) => nic.mac,
                Some(n) => match n.parse::<MacAddr>() {
                    Ok(mac) => mac,
                    Err(_) => {
                        let ip = resolve_ipv4(n).ok_or_else(|| {
                            FiError::nodata(format!(
                                "node {n:?}: over the packet link a node is a MAC address (an \
                                 endpoint's name, as fi_av_straddr shows it), or an IPv4 \
                                 address or host name on {}",
                                nic.name
                            ))
                        })?;
                        link::iface::neighbor_mac(ip, &nic.name).ok_or_else(|| {
                            FiError::nodata(format!(
                                "node {n:?} ({ip}) has no entry in {}'s neighbour table: give \
                                 its MAC address, or reach it over IP once (ping) first",
                                nic.name
                            ))
                        })?
                    }
                },
            };
            if port == 0 && !source {
                return Err(FiError::nodata("EDP port 0 is reserved"));
            }
            Ok(Some(Name::Edp { mac, port }))
        }
        AddrFormat::Udp => {
            let ip = match node {
                None => nic.ipv4.unwrap_or(Ipv4Addr::UNSPECIFIED),
                Some(n) => resolve_ipv4(n).ok_or_else(|| {
                    FiError::nodata(format!(
                        "node {n:?} is neither an IPv4 address nor a host name with one"
                    ))
                })?,
            };
            Ok(Some(Name::Udp(SocketAddrV4::new(ip, port))))
        }
    }
}

/// Whether source name `n` can be bound on `nic`.
fn source_fits(n: &Name, nic: &Nic) -> bool {
    match n {
        Name::Edp { mac, .. } => *mac == nic.mac,
        Name::Udp(a) => a.ip().is_unspecified() || Some(*a.ip()) == nic.ipv4,
    }
}

/// The answer of candidate `base` on `nic` to `hints`, with its addresses.
#[allow(clippy::too_many_arguments)]
fn answer(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&Info>,
    base: &Info,
    format: AddrFormat,
    nic: &Nic,
) -> FiResult<Info> {
    let mut info = attr::offer(version, hints, base)?;
    // FI_SOURCE_ERR changes what a receive from a stranger completes with:
    // only when asked for, never as a secondary capability given unasked.
    let asked = hints.map_or(0, |h| h.caps | h.rx.as_ref().map_or(0, |r| r.caps));
    if asked & fi::FI_SOURCE_ERR == 0 {
        info.caps &= !fi::FI_SOURCE_ERR;
        if let Some(rx) = info.rx.as_mut() {
            rx.caps &= !fi::FI_SOURCE_ERR;
        }
    }
    // FI_DIRECTED_RECV is a primary capability (fi_getinfo(3)): given only
    // when asked for; without it a receive's source address is ignored
    // (fi_tagged(3)), as util's ofi_get_caps leaves it.
    if hints.is_some_and(|h| h.caps != 0) && asked & fi::FI_DIRECTED_RECV == 0 {
        info.caps &= !fi::FI_DIRECTED_RECV;
        if let Some(rx) = info.rx.as_mut() {
            rx.caps &= !fi::FI_DIRECTED_RECV;
        }
    }
    let source = flags & fi::FI_SOURCE != 0;
    let named = parse_node(node, service, format, nic, source)?;
    let mut src = hints
        .and_then(|h| h.src_addr.as_deref())
        .map(|b| format.decode_source(b))
        .transpose()?;
    let mut dst = hints
        .and_then(|h| h.dest_addr.as_deref())
        .map(|b| format.decode(b))
        .transpose()?;
    if source {
        src = named.or(src);
    } else if named.is_some() {
        dst = named;
    }
    if let Some(s) = &src {
        if !source_fits(s, nic) {
            return Err(FiError::nodata(format!(
                "source {s} is not on {}",
                nic.name
            )));
        }
    }
    // Every answer names its source (fabtests' unit set checks it): the
    // interface, any free port.
    let src = src.or(match format {
        AddrFormat::Edp => Some(Name::Edp {
            mac: nic.mac,
            port: 0,
        }),
        AddrFormat::Udp => nic.ipv4.map(|ip| Name::Udp(SocketAddrV4::new(ip, 0))),
    });
    info.src_addr = src.map(|n| n.encode());
    info.dest_addr = dst.map(|n| n.encode());
    Ok(info)
}

/// `OFI_CORE_PROV_ONLY` (libfabric's include/ofi.h): the flag a utility
/// provider (ofi_rxd, ofi_rxm) sets when it asks for a core provider to
/// layer on.
pub const OFI_CORE_PROV_ONLY: u64 = 1 << 59;

/// Whether utility providers may layer on this one: only when
/// `FI_PROVIDER` (libfabric's provider filter) names such a pair, e.g.
/// `clusternet;ofi_rxd`. libfabric lists ofi_rxd's answers before those of
/// providers loaded from FI_PROVIDER_PATH, so ofi_rxd over our
/// FI_EP_DGRAM would otherwise come first wherever our own FI_EP_RDM
/// serves (Open MPI takes the first answer its include list matches).
/// libfabric keeps its own sockets, shm, efa and psm3 providers out of
/// layering the same way unless asked (src/fabric.c).
pub fn layering_requested(fi_provider: Option<&str>) -> bool {
    fi_provider.is_some_and(|v| {
        v.split(',')
            .any(|p| p.to_ascii_lowercase().starts_with("clusternet;ofi_"))
    })
}

/// The answers for `hints` on `nics` (already filtered by the configuration).
///
/// Errors: `FI_ENODATA` with the reason the last candidate was refused.
#[allow(clippy::too_many_arguments)]
pub fn getinfo(
    version: u32,
    node: Option<&str>,
    service: Option<&str>,
    flags: u64,
    hints: Option<&Info>,
    config: &Config,
    keyed: bool,
    nics: &[Nic],
) -> FiResult<Vec<Info>> {
    if flags & OFI_CORE_PROV_ONLY != 0 && !config.layering {
        return Err(FiError::nodata(
            "a utility provider layers on clusternet only when FI_PROVIDER names the pair \
             (e.g. clusternet;ofi_rxd): clusternet's own FI_EP_RDM serves otherwise",
        ));
    }
    let format = format_of(config.link);
    let want_type = hints
        .and_then(|h| h.ep.as_ref())
        .map_or(fi::FI_EP_UNSPEC, |e| e.ep_type);
    let mut out = Vec::new();
    let mut last = FiError::nodata(format!(
        "endpoint type {want_type}: clusternet offers FI_EP_RDM ({}) and FI_EP_DGRAM ({})",
        fi::FI_EP_RDM,
        fi::FI_EP_DGRAM
    ));
    for nic in nics {
        for base in [
            rdm_base(nic, config.link),
            dgram_base(nic, config.link, keyed),
        ] {
            let ty = base.ep.as_ref().map_or(0, |e| e.ep_type);
            if want_type != fi::FI_EP_UNSPEC && want_type != ty {
                continue;
            }
            match answer(version, node, service, flags, hints, &base, format, nic) {
                Ok(i) => out.push(i),
                Err(e) => last = e,
            }
        }
    }
    if out.is_empty() {
        return Err(last);
    }
    Ok(out)
}

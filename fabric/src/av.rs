//! Address vectors (fi_av(3)): names inserted by the application, each given
//! an `fi_addr_t` that send calls take and receive completions report
//! (FI_SOURCE).
//!
//! FI_AV_TABLE hands out consecutive indices from 0 in insertion order, as
//! fi_av(3) requires; FI_AV_MAP may hand out any value, and this provider
//! uses the same indices for it. An index is never reused after
//! `fi_av_remove`, so a stale `fi_addr_t` can only fail, never reach
//! another peer. Endpoints whose link needs to know its peers (the UDP
//! link's peer table) subscribe with [`Av::subscribe`].

use runtime::EthAddr;
use std::collections::HashMap;
use std::sync::{Mutex, Weak};

use crate::addr::{AddrFormat, KeyMark, Name, NameInfo};
use crate::error::{FiError, FiResult, ProvErrno};

/// Most names an address vector holds (inserted over its life).
pub const MAX_AV_ENTRIES: usize = 1 << 20;

/// `FI_ADDR_NOTAVAIL` / `FI_ADDR_UNSPEC` (both all ones, fi_av(3)).
pub const FI_ADDR_NOTAVAIL: u64 = u64::MAX;

/// The two address vector types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvKind {
    /// `FI_AV_MAP`.
    Map,
    /// `FI_AV_TABLE`.
    Table,
}

/// Told of every name an address vector gains or loses.
pub trait PeerSink: Send + Sync {
    /// `name`, telling `info`, was inserted as `addr`. An error refuses the
    /// insertion.
    fn peer_added(&self, addr: u64, name: &Name, info: &NameInfo) -> FiResult<()>;
    /// `addr` was removed.
    fn peer_removed(&self, addr: u64) {
        let _ = addr;
    }
}

#[derive(Default)]
struct State {
    entries: Vec<Option<(Name, NameInfo)>>,
    /// (MAC, EDP port) a peer's frames carry -> its first live index.
    by_wire: HashMap<EthAddr, u64>,
    sinks: Vec<Weak<dyn PeerSink>>,
}

/// An address vector. See the module documentation.
pub struct Av {
    /// Format of the names it takes.
    pub format: AddrFormat,
    /// Its type.
    pub kind: AvKind,
    /// The cluster key of this process's endpoints: names telling another
    /// are refused.
    pub key: KeyMark,
    state: Mutex<State>,
}

impl std::fmt::Debug for Av {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Av")
            .field("format", &self.format)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Av {
    /// An empty address vector for endpoints whose frames carry `key`.
    pub fn new(format: AddrFormat, kind: AvKind, key: KeyMark) -> Av {
        Av {
            format,
            kind,
            key,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Inserts the names packed in `bytes` (`count` of them, each
    /// [`AddrFormat::len`] bytes); returns each one's `fi_addr_t` or the
    /// reason it was refused (that entry gets [`FI_ADDR_NOTAVAIL`]).
    ///
    /// Errors: `FI_EINVAL` when `bytes` is shorter than `count` names.
    pub fn insert_packed(&self, bytes: &[u8], count: usize) -> FiResult<Vec<FiResult<u64>>> {
        let len = self.format.len();
        let need = count.saturating_mul(len);
        if bytes.len() < need {
            return Err(FiError::inval(format!(
                "{count} addresses of {len} bytes, in {} bytes",
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks(len)
            .take(count)
            .map(|b| {
                let info = self.format.decode_info(b);
                if let Some(f) = info.format.filter(|f| *f != self.format) {
                    return Err(link_mismatch(f, self.format));
                }
                self.format.decode(b).and_then(|n| self.insert(n, info))
            })
            .collect())
    }

    /// Inserts one name that tells `info`; returns its `fi_addr_t`.
    ///
    /// Errors: `FI_ENOSPC` once [`MAX_AV_ENTRIES`] names were inserted;
    /// `FI_EINVAL` for a name of another format; `FI_EKEYREJECTED`, naming
    /// both keys and the fix, when the name tells another cluster key than
    /// this process's.
    pub fn insert(&self, name: Name, info: NameInfo) -> FiResult<u64> {
        if name.format() != self.format {
            return Err(FiError::inval(format!(
                "address {name} is not of this address vector's format {:?}",
                self.format
            )));
        }
        if !self.key.agrees(info.key) {
            return Err(key_mismatch(&name, info.key, self.key));
        }
        let (a, sinks) = {
            let mut s = self.lock();
            if s.entries.len() >= MAX_AV_ENTRIES {
                return Err(FiError::new(
                    crate::fi::FI_ENOSPC,
                    format!("address vector full ({MAX_AV_ENTRIES} names)"),
                ));
            }
            let a = s.entries.len() as u64;
            s.entries.push(Some((name, info)));
            s.by_wire.entry(name.wire()).or_insert(a);
            s.sinks.retain(|w| w.strong_count() > 0);
            (a, s.sinks.clone())
        };
        for k in sinks.iter().filter_map(Weak::upgrade) {
            if let Err(e) = k.peer_added(a, &name, &info) {
                // Refused below (a peer table full): the address is not
                // usable, so it is not in the vector either.
                let _ = self.remove(&[a]);
                return Err(e);
            }
        }
        Ok(a)
    }

    /// Removes `addrs`.
    ///
    /// Errors: `FI_EINVAL` naming the first address that is not in the
    /// vector (the ones before it are removed).
    pub fn remove(&self, addrs: &[u64]) -> FiResult<()> {
        let mut removed = Vec::new();
        let r = self.remove_entries(addrs, &mut removed);
        let sinks: Vec<_> = self.lock().sinks.iter().filter_map(Weak::upgrade).collect();
        for k in &sinks {
            for &a in &removed {
                k.peer_removed(a);
            }
        }
        r
    }

    fn remove_entries(&self, addrs: &[u64], removed: &mut Vec<u64>) -> FiResult<()> {
        let mut s = self.lock();
        for &a in addrs {
            let Some(slot) = s.entries.get_mut(a as usize) else {
                return Err(FiError::inval(format!(
                    "fi_addr {a} is not in the address vector"
                )));
            };
            let Some((name, _)) = slot.take() else {
                return Err(FiError::inval(format!("fi_addr {a} was already removed")));
            };
            if s.by_wire.get(&name.wire()) == Some(&a) {
                s.by_wire.remove(&name.wire());
                // Another live entry with the same name takes over.
                let next = s
                    .entries
                    .iter()
                    .position(|e| e.is_some_and(|(n, _)| n == name))
                    .map(|i| i as u64);
                if let Some(n) = next {
                    s.by_wire.insert(name.wire(), n);
                }
            }
            removed.push(a);
        }
        Ok(())
    }

    /// The name behind `addr`.
    ///
    /// Errors: `FI_EINVAL` when `addr` is not (or no longer) in the vector.
    pub fn lookup(&self, addr: u64) -> FiResult<Name> {
        self.lookup_info(addr).map(|(n, _)| n)
    }

    /// The name behind `addr` and what it told when inserted.
    ///
    /// Errors: as [`Av::lookup`].
    pub fn lookup_info(&self, addr: u64) -> FiResult<(Name, NameInfo)> {
        self.lock()
            .entries
            .get(addr as usize)
            .copied()
            .flatten()
            .ok_or_else(|| FiError::inval(format!("fi_addr {addr} is not in the address vector")))
    }

    /// The `fi_addr_t` of the peer whose frames carry source `wire`, or
    /// [`FI_ADDR_NOTAVAIL`].
    pub fn reverse(&self, wire: EthAddr) -> u64 {
        self.lock()
            .by_wire
            .get(&wire)
            .copied()
            .unwrap_or(FI_ADDR_NOTAVAIL)
    }

    /// Registers `sink` for future insertions and removals; returns the
    /// names present now with their addresses.
    pub fn subscribe(&self, sink: Weak<dyn PeerSink>) -> Vec<(u64, Name, NameInfo)> {
        let mut s = self.lock();
        s.sinks.push(sink);
        s.entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| e.map(|(n, f)| (i as u64, n, f)))
            .collect()
    }
}

/// The error of inserting a name of a peer on link `theirs` (its format)
/// into an address vector of endpoints on link `ours`.
pub fn link_mismatch(theirs: AddrFormat, ours: AddrFormat) -> FiError {
    let var = |f| match f {
        AddrFormat::Edp => "packet",
        AddrFormat::Udp => "udp",
    };
    FiError::inval(format!(
        "link mismatch: the peer was started with FI_CLUSTERNET_LINK={}, this process with \
         FI_CLUSTERNET_LINK={}; every process of a job needs the same link (and cluster key)",
        var(theirs),
        var(ours)
    ))
    .with_prov(ProvErrno::Mismatch)
}

/// The error of inserting `name`, whose frames carry `theirs`, into an
/// address vector of endpoints whose frames carry `ours`: they would never
/// hear each other (the runtime drops frames without this process's key's
/// tag), so it is refused at once, saying why and what to do.
pub fn key_mismatch(name: &Name, theirs: KeyMark, ours: KeyMark) -> FiError {
    FiError::new(
        crate::fi::FI_EKEYREJECTED,
        format!(
            "cluster key mismatch: peer {name} was started with {theirs}, this process with \
             {ours}; the processes of a job must share one key: give every rank the same \
             FI_CLUSTERNET_KEY_FILE (or CLUSTERNET_KEY / CLUSTERNET_KEY_FILE), or unset it for \
             every rank"
        ),
    )
    .with_prov(ProvErrno::Mismatch)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use edp::MacAddr;

    fn name(i: u8) -> Name {
        Name::Edp {
            mac: MacAddr([2, 0, 0, 0, 0, i]),
            port: 1000 + i as u16,
        }
    }

    #[test]
    fn table_indices_are_consecutive_and_lookups_return_the_name() {
        let av = Av::new(AddrFormat::Edp, AvKind::Table, KeyMark::NoKey);
        let packed: Vec<u8> = (1..=3).flat_map(|i| name(i).encode()).collect();
        let r = av.insert_packed(&packed, 3).unwrap();
        let addrs: Vec<u64> = r.into_iter().map(Result::unwrap).collect();
        assert_eq!(addrs, [0, 1, 2]);
        for (i, a) in addrs.iter().enumerate() {
            assert_eq!(av.lookup(*a).unwrap(), name(i as u8 + 1));
        }
        assert_eq!(av.reverse(name(2).wire()), 1);
        assert_eq!(av.reverse(name(9).wire()), FI_ADDR_NOTAVAIL);
    }

    #[test]
    fn removed_addresses_fail_and_are_not_reused() {
        let av = Av::new(AddrFormat::Edp, AvKind::Map, KeyMark::NoKey);
        let a = av.insert(name(1), NameInfo::default()).unwrap();
        av.remove(&[a]).unwrap();
        assert!(av.lookup(a).is_err());
        assert_eq!(av.reverse(name(1).wire()), FI_ADDR_NOTAVAIL);
        assert!(av.remove(&[a]).is_err());
        assert_eq!(av.insert(name(1), NameInfo::default()).unwrap(), a + 1);
        assert_eq!(av.reverse(name(1).wire()), a + 1);
    }

    #[test]
    fn bad_names_get_an_error_each() {
        let av = Av::new(AddrFormat::Edp, AvKind::Map, KeyMark::NoKey);
        let mut packed = name(1).encode();
        let mut group = name(1).encode();
        group[0] = 1; // a group MAC
        packed.extend(group);
        let r = av.insert_packed(&packed, 2).unwrap();
        assert!(r[0].is_ok() && r[1].is_err());
        assert!(av.insert_packed(&packed, 3).is_err());
        let udp = Name::Udp("127.0.0.1:9".parse().unwrap());
        assert!(av.insert(udp, NameInfo::default()).is_err());
    }

    struct Sink(Mutex<Vec<(u64, Name)>>, Mutex<Vec<u64>>);
    impl PeerSink for Sink {
        fn peer_added(&self, a: u64, n: &Name, _: &NameInfo) -> FiResult<()> {
            self.0.lock().unwrap().push((a, *n));
            Ok(())
        }
        fn peer_removed(&self, a: u64) {
            self.1.lock().unwrap().push(a);
        }
    }

    #[test]
    fn subscribers_hear_of_insertions() {
        let av = Av::new(AddrFormat::Edp, AvKind::Map, KeyMark::NoKey);
        av.insert(name(1), NameInfo::default()).unwrap();
        let sink = Arc::new(Sink(Mutex::new(Vec::new()), Mutex::new(Vec::new())));
        let weak: Weak<dyn PeerSink> = Arc::downgrade(&sink) as Weak<dyn PeerSink>;
        assert_eq!(av.subscribe(weak), [(0, name(1), NameInfo::default())]);
        av.insert(name(2), NameInfo::default()).unwrap();
        assert_eq!(*sink.0.lock().unwrap(), [(1, name(2))]);
        av.remove(&[0]).unwrap();
        assert_eq!(*sink.1.lock().unwrap(), [0]);
    }

    #[test]
    fn names_of_another_cluster_key_are_refused_saying_so() {
        let mine = KeyMark::Key([1, 2, 3, 4]);
        let av = Av::new(AddrFormat::Edp, AvKind::Table, mine);
        let told = |key| NameInfo {
            format: Some(AddrFormat::Edp),
            mtu: Some(1500),
            key,
        };
        assert_eq!(av.insert(name(1), told(mine)).unwrap(), 0);
        assert_eq!(av.insert(name(2), NameInfo::default()).unwrap(), 1);
        for other in [KeyMark::NoKey, KeyMark::Key([9, 9, 9, 9])] {
            let e = av.insert(name(3), told(other)).unwrap_err();
            assert_eq!(e.code, crate::fi::FI_EKEYREJECTED);
            assert!(e.msg.contains("cluster key mismatch"), "{}", e.msg);
            assert!(e.msg.contains("FI_CLUSTERNET_KEY_FILE"), "{}", e.msg);
        }
        let packed = name(4).encode_with(&told(KeyMark::NoKey));
        let r = av.insert_packed(&packed, 1).unwrap();
        assert_eq!(r[0].as_ref().unwrap_err().code, crate::fi::FI_EKEYREJECTED);
        assert_eq!(av.lookup_info(0).unwrap(), (name(1), told(mine)));
        let udp = Av::new(AddrFormat::Udp, AvKind::Table, KeyMark::NoKey);
        let r = udp
            .insert_packed(&name(5).encode_with(&told(KeyMark::NoKey)), 1)
            .unwrap();
        let e = r[0].as_ref().unwrap_err();
        assert!(e.msg.contains("FI_CLUSTERNET_LINK=packet"), "{}", e.msg);
    }
}

//! Batched datagram I/O on any socket (packet, UDP): sendmmsg(2) with
//! gathered frames, recvmmsg(2) into caller or slot buffers, and a
//! gathered sendmsg(2) for single frames. quinn-udp's and
//! s2n-quic-platform's `io/mmsg` in role.
//!
//! An [`Mmsg`] owns the `mmsghdr`, `iovec` and `sockaddr_storage` arrays a
//! batch needs, allocated once, so a call writes only the fields it uses
//! instead of zeroing kilobytes of headers. [`Mmsg::recv_slots`] into the
//! same storage as its previous call (a busy-polled socket, turn after
//! turn) keeps the headers and iovecs it set up then, and resets only the
//! headers the kernel wrote.

use std::io::{self, IoSlice};
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr;

pub use nix::sys::socket::MsgFlags;
use nix::sys::socket::SockaddrStorage;

/// Metadata of one received datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes stored in the buffer.
    pub len: usize,
    /// The datagram was longer than the buffer and was cut (`MSG_TRUNC`).
    pub truncated: bool,
    /// Source address for IPv4/IPv6 sockets; `None` for other families.
    pub src: Option<SocketAddr>,
}

/// Reusable arrays for sendmmsg(2) / recvmmsg(2) batches on any socket.
pub struct Mmsg {
    hdrs: Vec<libc::mmsghdr>,
    iov: Vec<libc::iovec>,
    names: Vec<libc::sockaddr_storage>,
    /// What `hdrs[..rx_n]` and `iov[..rx_n]` are set up for by the last
    /// [`Mmsg::recv_slots`]: (storage address, storage length, slot,
    /// `meta.len()`); `None` after any other call changed them.
    rx_armed: Option<(usize, usize, usize, usize)>,
    rx_n: usize,
    /// Headers of that setup the kernel may have written since (their
    /// address length, flags and control length are reset before reuse);
    /// at most `rx_n`.
    rx_dirty: usize,
}

// SAFETY: the raw pointers inside the arrays are written right before a
// system call and only dereferenced (by the kernel) during it; between
// calls they are stale values that nothing reads (`recv_slots` reuses its
// iovecs only for a call lending the same storage again), so moving the
// arrays to another thread is sound.
unsafe impl Send for Mmsg {}

impl std::fmt::Debug for Mmsg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mmsg")
            .field("max_msgs", &self.hdrs.len())
            .field("max_iov", &self.iov.len())
            .finish()
    }
}

fn zeroed_hdr() -> libc::mmsghdr {
    libc::mmsghdr {
        msg_hdr: libc::msghdr {
            msg_name: ptr::null_mut(),
            msg_namelen: 0,
            msg_iov: ptr::null_mut(),
            msg_iovlen: 0,
            msg_control: ptr::null_mut(),
            msg_controllen: 0,
            msg_flags: 0,
        },
        msg_len: 0,
    }
}

fn zeroed_storage() -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain old data (integers and padding);
    // all-zero is a valid value (family AF_UNSPEC).
    unsafe { std::mem::zeroed() }
}

/// Writes `addr` into `st`; returns the length of the sockaddr written.
fn to_storage(addr: &SocketAddr, st: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned at least
            // as sockaddr_in (POSIX guarantees both).
            unsafe { ptr::write((st as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { ptr::write((st as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The IPv4/IPv6 address in `st` (of `len` bytes), if any.
fn from_storage(st: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    let len = len as usize;
    match st.ss_family as libc::c_int {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, of
            // which at least `size_of` bytes were written; sockaddr_storage
            // is suitably aligned.
            let sin = unsafe {
                ptr::read((st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>())
            };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                ptr::read((st as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>())
            };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

impl Mmsg {
    /// Arrays for batches of up to `max_msgs` datagrams using up to
    /// `max_iov` pieces in all (both at least 1).
    pub fn new(max_msgs: usize, max_iov: usize) -> Self {
        let max_msgs = max_msgs.max(1);
        Self {
            hdrs: vec![zeroed_hdr(); max_msgs],
            iov: vec![
                libc::iovec {
                    iov_base: ptr::null_mut(),
                    iov_len: 0
                };
                max_iov.max(max_msgs)
            ],
            names: vec![zeroed_storage(); max_msgs],
            rx_armed: None,
            rx_n: 0,
            rx_dirty: 0,
        }
    }

    /// Largest number of datagrams per system call.
    pub fn max_msgs(&self) -> usize {
        self.hdrs.len()
    }

    /// Sends each of `msgs` (a datagram given as its pieces, concatenated
    /// on the wire; empty pieces are skipped) in order, with sendmmsg(2):
    /// one call per [`max_msgs`](Self::max_msgs) datagrams while the kernel
    /// takes every datagram offered. `dsts` is empty for a connected or
    /// bound socket, or gives each datagram's destination.
    ///
    /// A single datagram goes with sendmsg(2) instead ([`send_one`]): the
    /// kernel's cheaper single send, for every caller of a batch of one.
    ///
    /// Returns how many datagrams went out (a short count means the rest
    /// were not sent). Errors: `InvalidInput` when `dsts` is neither empty
    /// nor as long as `msgs`, or when the first datagram has more pieces
    /// than the arrays hold (a later one ends the batch before it); the
    /// error of sendmmsg(2) when nothing was sent (`WouldBlock` on a full
    /// nonblocking socket).
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        msgs: &[&[IoSlice<'_>]],
        dsts: &[SocketAddr],
        flags: MsgFlags,
    ) -> io::Result<usize> {
        if !dsts.is_empty() && dsts.len() != msgs.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "sendmmsg: {} destinations for {} datagrams",
                    dsts.len(),
                    msgs.len()
                ),
            ));
        }
        self.rx_armed = None;
        if let [pieces] = msgs {
            // One datagram (a ping-pong's): sendmsg(2), without the batch
            // arrays; the same limit on pieces as a batch.
            let count = pieces.iter().filter(|p| !p.is_empty()).count();
            if count <= self.iov.len() {
                return send_one(fd, pieces, dsts.first(), flags).map(|_| 1);
            }
        }
        let mut total = 0;
        while total < msgs.len() {
            let mut n = 0;
            let mut used = 0;
            while total + n < msgs.len() && n < self.hdrs.len() {
                let pieces = msgs[total + n];
                let count = pieces.iter().filter(|p| !p.is_empty()).count();
                if used + count > self.iov.len() {
                    if total + n == 0 && n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!(
                                "datagram of {count} pieces: at most {} per sendmmsg",
                                self.iov.len()
                            ),
                        ));
                    }
                    break;
                }
                let first = used;
                for p in pieces.iter().filter(|p| !p.is_empty()) {
                    self.iov[used] = libc::iovec {
                        iov_base: p.as_ptr() as *mut libc::c_void,
                        iov_len: p.len(),
                    };
                    used += 1;
                }
                let (name, namelen) = match dsts.get(total + n) {
                    Some(a) => {
                        let len = to_storage(a, &mut self.names[n]);
                        (
                            (&mut self.names[n] as *mut libc::sockaddr_storage).cast(),
                            len,
                        )
                    }
                    None => (ptr::null_mut(), 0),
                };
                let h = &mut self.hdrs[n].msg_hdr;
                h.msg_name = name;
                h.msg_namelen = namelen;
                // SAFETY: first <= used <= iov.len(): inside the array.
                h.msg_iov = unsafe { self.iov.as_mut_ptr().add(first) };
                h.msg_iovlen = count;
                h.msg_control = ptr::null_mut();
                h.msg_controllen = 0;
                h.msg_flags = 0;
                n += 1;
            }
            if n == 0 {
                break;
            }
            // SAFETY: hdrs[..n] point at live iovecs over the callers'
            // buffers (only read by the kernel) and at live addresses.
            let r = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    self.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    flags.bits(),
                )
            };
            if r < 0 {
                if total == 0 {
                    return Err(io::Error::last_os_error());
                }
                break;
            }
            total += r as usize;
            if (r as usize) < n {
                break;
            }
        }
        Ok(total)
    }

    /// Sends datagrams stored in slots of `slot` bytes, as
    /// [`Mmsg::send`] does: datagram `i` is `storage[i * slot..][..lens[i]]`
    /// (one iovec each, no pieces to gather or skip), to `dsts[i]` (`dsts`
    /// empty for a connected socket). Same return and errors as
    /// [`Mmsg::send`] (`InvalidInput` for `dsts` neither empty nor as long
    /// as `lens`).
    ///
    /// Panics when a datagram lies beyond `storage`.
    pub fn send_slots(
        &mut self,
        fd: BorrowedFd<'_>,
        storage: &[u8],
        slot: usize,
        lens: &[usize],
        dsts: &[SocketAddr],
        flags: MsgFlags,
    ) -> io::Result<usize> {
        if !dsts.is_empty() && dsts.len() != lens.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "sendmmsg: {} destinations for {} datagrams",
                    dsts.len(),
                    lens.len()
                ),
            ));
        }
        self.rx_armed = None;
        if let [len] = lens {
            // One datagram: sendmsg(2), as in `send`.
            let piece = [IoSlice::new(&storage[..*len])];
            return send_one(fd, &piece, dsts.first(), flags).map(|_| 1);
        }
        let mut total = 0;
        while total < lens.len() {
            let n = (lens.len() - total).min(self.hdrs.len());
            for i in 0..n {
                let k = total + i;
                let d = &storage[k * slot..][..lens[k]];
                self.iov[i] = libc::iovec {
                    iov_base: d.as_ptr() as *mut libc::c_void,
                    iov_len: d.len(),
                };
                let (name, namelen) = match dsts.get(k) {
                    Some(a) => {
                        let len = to_storage(a, &mut self.names[i]);
                        (
                            (&mut self.names[i] as *mut libc::sockaddr_storage).cast(),
                            len,
                        )
                    }
                    None => (ptr::null_mut(), 0),
                };
                let h = &mut self.hdrs[i].msg_hdr;
                h.msg_name = name;
                h.msg_namelen = namelen;
                // SAFETY: i < n <= hdrs.len() <= iov.len(): inside the array.
                h.msg_iov = unsafe { self.iov.as_mut_ptr().add(i) };
                h.msg_iovlen = 1;
                h.msg_control = ptr::null_mut();
                h.msg_controllen = 0;
                h.msg_flags = 0;
            }
            // SAFETY: hdrs[..n] point at live iovecs over `storage` (only
            // read by the kernel) and at live addresses.
            let r = unsafe {
                libc::sendmmsg(
                    fd.as_raw_fd(),
                    self.hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    flags.bits(),
                )
            };
            if r < 0 {
                if total == 0 {
                    return Err(io::Error::last_os_error());
                }
                break;
            }
            total += r as usize;
            if (r as usize) < n {
                break;
            }
        }
        Ok(total)
    }

    /// One recvmmsg(2) into `bufs`: datagram `i` goes into `bufs[i]` and
    /// its length, truncation and source into `meta[i]`. Receives at most
    /// `min(bufs.len(), meta.len(), max_msgs)` datagrams; returns how many.
    ///
    /// Errors: those of recvmmsg(2) (`WouldBlock` when nothing is waiting
    /// on a nonblocking call).
    pub fn recv(
        &mut self,
        fd: BorrowedFd<'_>,
        bufs: &mut [&mut [u8]],
        meta: &mut [RecvMeta],
        flags: MsgFlags,
    ) -> io::Result<usize> {
        let n = bufs.len().min(meta.len()).min(self.hdrs.len());
        for (i, b) in bufs[..n].iter_mut().enumerate() {
            self.iov[i] = libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            };
        }
        self.rx_armed = None;
        self.arm_recv(n);
        self.recv_prepared(fd, n, meta, flags)
    }

    /// One recvmmsg(2) into `storage` cut into slots of `slot` bytes:
    /// datagram `i` goes to `storage[i * slot..][..slot]`. Receives at most
    /// `min(storage.len() / slot, meta.len(), max_msgs)` datagrams. A call
    /// with the same storage, slot and `meta` length as the previous call
    /// on these arrays reuses that call's headers and iovecs: it resets
    /// only the headers the kernel filled (none after an empty poll)
    /// instead of setting up all of them.
    ///
    /// Errors: as [`Mmsg::recv`]; `InvalidInput` for `slot == 0`.
    pub fn recv_slots(
        &mut self,
        fd: BorrowedFd<'_>,
        storage: &mut [u8],
        slot: usize,
        meta: &mut [RecvMeta],
        flags: MsgFlags,
    ) -> io::Result<usize> {
        let key = (storage.as_ptr() as usize, storage.len(), slot, meta.len());
        let n = if self.rx_armed == Some(key) {
            // The iovecs already point at these slots (the same memory,
            // lent again for this call) and the headers at them; the
            // kernel wrote only the headers of the datagrams it returned.
            for m in &mut self.hdrs[..self.rx_dirty] {
                let h = &mut m.msg_hdr;
                h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                h.msg_controllen = 0;
                h.msg_flags = 0;
            }
            self.rx_n
        } else {
            if slot == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "recvmmsg: slot of 0 bytes",
                ));
            }
            let n = (storage.len() / slot).min(meta.len()).min(self.hdrs.len());
            for (i, chunk) in storage.chunks_exact_mut(slot).take(n).enumerate() {
                self.iov[i] = libc::iovec {
                    iov_base: chunk.as_mut_ptr().cast(),
                    iov_len: slot,
                };
            }
            self.arm_recv(n);
            self.rx_armed = Some(key);
            self.rx_n = n;
            n
        };
        self.recv_prepared(fd, n, meta, flags)
    }

    /// Points `hdrs[..n]` at `iov[..n]` (one iovec each) and at the address
    /// storage, for a receive.
    fn arm_recv(&mut self, n: usize) {
        let iov = self.iov.as_mut_ptr();
        for i in 0..n {
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            // SAFETY: i < n <= iov.len(): inside the array.
            h.msg_iov = unsafe { iov.add(i) };
            h.msg_iovlen = 1;
            h.msg_control = ptr::null_mut();
            h.msg_controllen = 0;
            h.msg_flags = 0;
        }
        self.rx_dirty = 0;
    }

    /// recvmmsg(2) of `n` datagrams into `iov[..n]` (set by the caller
    /// from buffers borrowed mutably for the duration of the call), with
    /// `hdrs[..n]` armed ([`Mmsg::arm_recv`]).
    fn recv_prepared(
        &mut self,
        fd: BorrowedFd<'_>,
        n: usize,
        meta: &mut [RecvMeta],
        flags: MsgFlags,
    ) -> io::Result<usize> {
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: hdrs[..n] point at live iovecs over buffers the caller
        // lent mutably for this call, and at live address storage of the
        // length given; no timeout pointer.
        let r = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                flags.bits(),
                ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            // Nothing received; the first header is reset anyway before
            // its reuse (the kernel writes a header only with its datagram).
            self.rx_dirty = 1;
            return Err(e);
        }
        let r = r as usize;
        // The headers of the datagrams returned, and the one after.
        self.rx_dirty = (r + 1).min(n);
        for (i, m) in meta[..r].iter_mut().enumerate() {
            let h = &self.hdrs[i];
            let cap = self.iov[i].iov_len;
            *m = RecvMeta {
                len: (h.msg_len as usize).min(cap),
                truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
                src: from_storage(&self.names[i], h.msg_hdr.msg_namelen),
            };
        }
        Ok(r)
    }
}

/// Sends one datagram given as pieces with sendmsg(2) (no header arrays),
/// to `dst` or, with `None`, to the connected or bound destination.
///
/// Errors: those of sendmsg(2).
pub fn send_one(
    fd: BorrowedFd<'_>,
    pieces: &[IoSlice<'_>],
    dst: Option<&SocketAddr>,
    flags: MsgFlags,
) -> io::Result<usize> {
    let addr = dst.map(|a| SockaddrStorage::from(*a));
    nix::sys::socket::sendmsg(fd.as_raw_fd(), pieces, &[], flags, addr.as_ref())
        .map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    #[test]
    fn gathered_batches_to_addresses_and_back() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        let mut tx = Mmsg::new(2, 4);
        let p: Vec<[IoSlice<'_>; 3]> = (0..5u8)
            .map(|i| {
                [
                    IoSlice::new(b"head"),
                    IoSlice::new(&[]),
                    IoSlice::new(std::slice::from_ref(
                        &[b'0', b'1', b'2', b'3', b'4'][i as usize],
                    )),
                ]
            })
            .collect();
        let msgs: Vec<&[IoSlice<'_>]> = p.iter().map(|x| &x[..]).collect();
        // Five datagrams in three sendmmsg calls of at most two.
        assert_eq!(
            tx.send(a.as_fd(), &msgs, &[to; 5], MsgFlags::empty())
                .unwrap(),
            5
        );
        let mut rx = Mmsg::new(8, 8);
        let mut store = vec![0u8; 8 * 16];
        let mut meta = [RecvMeta::default(); 8];
        let mut got = Vec::new();
        while got.len() < 5 {
            match rx.recv_slots(b.as_fd(), &mut store, 16, &mut meta, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => {
                    for (i, m) in meta[..n].iter().enumerate() {
                        assert_eq!(m.src, Some(a.local_addr().unwrap()));
                        assert!(!m.truncated);
                        got.push(store[i * 16..][..m.len].to_vec());
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        let want: Vec<Vec<u8>> = (0..5).map(|i| format!("head{i}").into_bytes()).collect();
        assert_eq!(got, want);
        // Nothing left: WouldBlock, in one call.
        let e = rx
            .recv_slots(b.as_fd(), &mut store, 16, &mut meta, MsgFlags::MSG_DONTWAIT)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn truncation_is_reported_and_limits_are_checked() {
        let (a, b) = pair();
        let to = b.local_addr().unwrap();
        send_one(
            a.as_fd(),
            &[IoSlice::new(&[7u8; 40])],
            Some(&to),
            MsgFlags::empty(),
        )
        .unwrap();
        let mut rx = Mmsg::new(4, 4);
        let mut small = [0u8; 10];
        let mut meta = [RecvMeta::default(); 4];
        let mut n = 0;
        while n == 0 {
            match rx.recv(
                b.as_fd(),
                &mut [&mut small[..]],
                &mut meta,
                MsgFlags::MSG_DONTWAIT,
            ) {
                Ok(k) => n = k,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!((meta[0].len, meta[0].truncated), (10, true));
        // Too many pieces for the arrays; mismatched destinations.
        let mut tx = Mmsg::new(2, 2);
        let three = [IoSlice::new(b"a"), IoSlice::new(b"b"), IoSlice::new(b"c")];
        let e = tx
            .send(a.as_fd(), &[&three], &[to], MsgFlags::empty())
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let one = [IoSlice::new(b"a")];
        let e = tx
            .send(a.as_fd(), &[&one, &one], &[to], MsgFlags::empty())
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // A datagram that does not fit after others ends the batch before it.
        assert_eq!(
            tx.send(a.as_fd(), &[&one, &three], &[to, to], MsgFlags::empty())
                .unwrap(),
            1
        );
    }

    #[test]
    fn ipv6_addresses_round_trip() {
        let Ok(b) = UdpSocket::bind("[::1]:0") else {
            return; // no IPv6 loopback in this namespace
        };
        let a = UdpSocket::bind("[::1]:0").unwrap();
        let to = b.local_addr().unwrap();
        Mmsg::new(1, 1)
            .send(
                a.as_fd(),
                &[&[IoSlice::new(b"six")]],
                &[to],
                MsgFlags::empty(),
            )
            .unwrap();
        let mut rx = Mmsg::new(1, 1);
        let mut buf = [0u8; 8];
        let mut meta = [RecvMeta::default()];
        let n = rx
            .recv(b.as_fd(), &mut [&mut buf[..]], &mut meta, MsgFlags::empty())
            .unwrap();
        assert_eq!(n, 1);
        assert_eq!(&buf[..meta[0].len], b"six");
        assert_eq!(meta[0].src, Some(a.local_addr().unwrap()));
    }

    /// Receives from `b` into `store` (slots of 16) until `want` datagrams
    /// came; their bytes and sources.
    fn take(
        rx: &mut Mmsg,
        b: &UdpSocket,
        store: &mut [u8],
        want: usize,
    ) -> Vec<(Vec<u8>, Option<SocketAddr>)> {
        let mut meta = [RecvMeta::default(); 8];
        let mut got = Vec::new();
        while got.len() < want {
            match rx.recv_slots(b.as_fd(), store, 16, &mut meta, MsgFlags::MSG_DONTWAIT) {
                Ok(n) => got.extend(
                    meta[..n]
                        .iter()
                        .enumerate()
                        .map(|(i, m)| (store[i * 16..][..m.len].to_vec(), m.src)),
                ),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        got
    }

    #[test]
    fn slots_sent_and_received_with_headers_reused() {
        let (a, b) = pair();
        let (from, to) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let mut tx = Mmsg::new(2, 2);
        // Three datagrams of 1, 2, 3 bytes in slots of 4, two per call.
        let slots = *b"a...bb..ccc.";
        assert_eq!(
            tx.send_slots(
                a.as_fd(),
                &slots,
                4,
                &[1, 2, 3],
                &[to; 3],
                MsgFlags::empty()
            )
            .unwrap(),
            3
        );
        let e = tx
            .send_slots(a.as_fd(), &slots, 4, &[1, 2], &[to], MsgFlags::empty())
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // Receives into the same storage reuse the headers of the first
        // call (an empty poll between them too); a send through the same
        // arrays, or other storage, sets them up again.
        let mut rx = Mmsg::new(8, 8);
        let mut store = vec![0u8; 8 * 16];
        let got = take(&mut rx, &b, &mut store, 3);
        let want = |s: &[u8]| (s.to_vec(), Some(from));
        assert_eq!(got, [want(b"a"), want(b"bb"), want(b"ccc")]);
        let mut meta = [RecvMeta::default(); 8];
        let e = rx
            .recv_slots(b.as_fd(), &mut store, 16, &mut meta, MsgFlags::MSG_DONTWAIT)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        for (i, x) in [&b"dddd"[..], b"ee"].into_iter().enumerate() {
            tx.send_slots(a.as_fd(), x, 4, &[x.len()], &[to], MsgFlags::empty())
                .unwrap();
            assert_eq!(take(&mut rx, &b, &mut store, 1), [want(x)], "{i}");
        }
        rx.send_slots(a.as_fd(), b"ff", 2, &[2], &[to], MsgFlags::empty())
            .unwrap();
        assert_eq!(take(&mut rx, &b, &mut store, 1), [want(b"ff")]);
        let mut other = vec![0u8; 4 * 16];
        tx.send_slots(a.as_fd(), b"g", 1, &[1], &[to], MsgFlags::empty())
            .unwrap();
        assert_eq!(take(&mut rx, &b, &mut other, 1), [want(b"g")]);
        assert_eq!(&other[..1], b"g");
    }
}

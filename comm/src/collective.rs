//! Collectives on a [`Communicator`]: barrier, broadcast, reduce and
//! all-reduce of sums, gather and all-gather (MPI 4.0 chapter 6), over point-to-point messages in the
//! communicator's collective context (`CommConfig::context | 0x8000`), so
//! they never match the application's receives.
//!
//! Algorithms (the classic ones of MPICH, Thakur, Rabenseifner and Gropp,
//! "Optimization of Collective Communication Operations in MPICH", 2005):
//! - barrier: dissemination (Hensgen, Finkel and Manber 1988), ceil(log2 N)
//!   rounds of one send and one receive;
//! - bcast: over MAK reliable multicast once
//!   `Communicator::enable_multicast_bcast` was called (`mcast.rs`: the
//!   root sends once to the group MAC); else a binomial tree from the
//!   root, ceil(log2 N) rounds;
//! - reduce: binomial tree to the root;
//! - allreduce: recursive doubling (MPICH's choice for short vectors,
//!   Thakur et al. section 4.4), ceil(log2 N) rounds of one exchange, with
//!   the `N - 2^p` extra ranks first folded into a partner; both sides of
//!   an exchange add the same two partial sums (IEEE addition is
//!   commutative), so every rank ends with bit-identical floating-point
//!   results;
//! - gather: linear to the root; allgather: gather to rank 0, then bcast.
//!

use ctp::Transport;

use crate::{CommError, Communicator, Tag};

/// An element type `allreduce_sum` adds (sealed: `i64`, `f64`).
pub trait SumElement: Copy + sealed::Sealed {
    /// Size on the wire, bytes.
    const SIZE: usize;
    /// Little-endian bytes appended to `out`.
    fn put(self, out: &mut Vec<u8>);
    /// From `SIZE` little-endian bytes.
    fn get(b: &[u8]) -> Self;
    /// The sum (wrapping for integers, as MPI leaves overflow undefined).
    fn add(self, other: Self) -> Self;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i64 {}
    impl Sealed for f64 {}
}

impl SumElement for i64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        i64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
    fn add(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
}

impl SumElement for f64 {
    const SIZE: usize = 8;
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(b: &[u8]) -> Self {
        f64::from_le_bytes(b.try_into().expect("8 bytes"))
    }
    fn add(self, other: Self) -> Self {
        self + other
    }
}

impl<T: Transport> Communicator<T> {
    /// Blocks until every rank has entered the barrier (MPI_Barrier, MPI 4.0
    /// section 6.3); dissemination algorithm.
    ///
    /// Errors: [`CommError::PeerFailed`], [`CommError::TimedOut`], transport errors.
    pub fn barrier(&self) -> Result<(), CommError> {
        let (rank, size) = (self.rank(), self.size());
        let tag = self.next_coll_tag();
        let mut k = 1;
        while k < size {
            self.coll_send((rank + k) % size, tag, &[])?;
            self.coll_recv((rank + size - k) % size, tag)?;
            k <<= 1;
        }
        Ok(())
    }

    /// Broadcasts `data` from `root` to every rank (MPI_Bcast, section 6.4):
    /// on the root `data` is sent; on the others it is replaced by the
    /// root's. Binomial tree.
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::PeerFailed`],
    /// [`CommError::TimedOut`], transport errors.
    pub fn bcast(&self, root: usize, data: &mut Vec<u8>) -> Result<(), CommError> {
        let tag = self.next_coll_tag();
        if let Some(m) = self.mcast() {
            let size = self.size();
            if root >= size {
                return Err(CommError::InvalidRank { rank: root, size });
            }
            if self.rank() == root {
                return m.send(data);
            }
            *data = self.await_multicast(m, root)?;
            return Ok(());
        }
        self.bcast_tagged(root, data, tag)
    }

    fn bcast_tagged(&self, root: usize, data: &mut Vec<u8>, tag: Tag) -> Result<(), CommError> {
        let (rank, size) = (self.rank(), self.size());
        if root >= size {
            return Err(CommError::InvalidRank { rank: root, size });
        }
        let vr = (rank + size - root) % size;
        let mut mask = 1;
        while mask < size {
            if vr & mask != 0 {
                *data = self.coll_recv((vr - mask + root) % size, tag)?;
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if vr + mask < size {
                self.coll_send((vr + mask + root) % size, tag, data)?;
            }
            mask >>= 1;
        }
        Ok(())
    }

    /// Element-wise sum of `values` over all ranks into `values` on `root`
    /// (MPI_Reduce with MPI_SUM, section 6.9.1); on the other ranks
    /// `values` holds partial sums afterwards. Binomial tree. All ranks must
    /// pass the same length.
    ///
    /// Errors: [`CommError::InvalidRank`]; [`CommError::Collective`] when a
    /// rank's length differs; [`CommError::PeerFailed`],
    /// [`CommError::TimedOut`], transport errors.
    pub fn reduce_sum<E: SumElement>(
        &self,
        root: usize,
        values: &mut [E],
    ) -> Result<(), CommError> {
        let tag = self.next_coll_tag();
        self.reduce_tagged(root, values, tag)
    }

    fn reduce_tagged<E: SumElement>(
        &self,
        root: usize,
        values: &mut [E],
        tag: Tag,
    ) -> Result<(), CommError> {
        let (rank, size) = (self.rank(), self.size());
        if root >= size {
            return Err(CommError::InvalidRank { rank: root, size });
        }
        let vr = (rank + size - root) % size;
        let mut mask = 1;
        while mask < size {
            if vr & mask == 0 {
                let child = vr | mask;
                if child < size {
                    let src = (child + root) % size;
                    let b = self.coll_recv(src, tag)?;
                    if b.len() != values.len() * E::SIZE {
                        return Err(CommError::Collective(format!(
                            "reduce: rank {src} sent {} bytes, rank {rank} holds {} elements of {} bytes",
                            b.len(),
                            values.len(),
                            E::SIZE
                        )));
                    }
                    for (v, c) in values.iter_mut().zip(b.chunks_exact(E::SIZE)) {
                        *v = v.add(E::get(c));
                    }
                }
            } else {
                let parent = ((vr & !mask) + root) % size;
                self.coll_send(parent, tag, &encode(values))?;
                break;
            }
            mask <<= 1;
        }
        Ok(())
    }

    /// Replaces `values` on every rank by the element-wise sum over all
    /// ranks (MPI_Allreduce with MPI_SUM, section 6.9.6): recursive
    /// doubling, every rank gets the same bits (see the module
    /// documentation). All ranks must pass the same length.
    ///
    /// Errors: [`CommError::Collective`] when a rank's length differs;
    /// [`CommError::PeerFailed`], [`CommError::TimedOut`], transport errors.
    pub fn allreduce_sum<E: SumElement>(&self, values: &mut [E]) -> Result<(), CommError> {
        let (rank, size) = (self.rank(), self.size());
        let tag = self.next_coll_tag();
        // The largest power of two <= size; the first 2 * extra ranks pair
        // up, the even one of each pair handing its values to the odd one.
        let pof2 = 1usize << (usize::BITS - 1 - size.leading_zeros());
        let extra = size - pof2;
        let vrank = if rank < 2 * extra {
            if rank % 2 == 0 {
                self.coll_send(rank + 1, tag, &encode(values))?;
                let b = self.coll_recv(rank + 1, tag)?;
                return decode_into(values, &b, rank + 1, rank, "allreduce");
            }
            let b = self.coll_recv(rank - 1, tag)?;
            add_from(values, &b, rank - 1, rank)?;
            rank / 2
        } else {
            rank - extra
        };
        let real = |v: usize| if v < extra { 2 * v + 1 } else { v + extra };
        let mut mask = 1;
        while mask < pof2 {
            let peer = real(vrank ^ mask);
            self.coll_send(peer, tag, &encode(values))?;
            let b = self.coll_recv(peer, tag)?;
            add_from(values, &b, peer, rank)?;
            mask <<= 1;
        }
        if rank < 2 * extra {
            self.coll_send(rank - 1, tag, &encode(values))?;
        }
        Ok(())
    }

    /// Collects every rank's `data` on `root` (MPI_Gather, section 6.5,
    /// with per-rank lengths as MPI_Gatherv): `Some(v)` on the root with
    /// `v[r]` rank r's bytes, `None` elsewhere. Linear: the root receives
    /// from each rank in turn.
    ///
    /// Errors: [`CommError::InvalidRank`], [`CommError::PeerFailed`],
    /// [`CommError::TimedOut`], transport errors.
    pub fn gather(&self, root: usize, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>, CommError> {
        let tag = self.next_coll_tag();
        self.gather_tagged(root, data, tag)
    }

    fn gather_tagged(
        &self,
        root: usize,
        data: &[u8],
        tag: Tag,
    ) -> Result<Option<Vec<Vec<u8>>>, CommError> {
        let (rank, size) = (self.rank(), self.size());
        if root >= size {
            return Err(CommError::InvalidRank { rank: root, size });
        }
        if rank != root {
            self.coll_send(root, tag, data)?;
            return Ok(None);
        }
        (0..size)
            .map(|r| {
                if r == root {
                    Ok(data.to_vec())
                } else {
                    self.coll_recv(r, tag)
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// Every rank's `data` on every rank (MPI_Allgather, section 6.7, with
    /// per-rank lengths as MPI_Allgatherv): `v[r]` is rank r's bytes. Gather
    /// to rank 0, then a binomial bcast of the length-prefixed concatenation.
    ///
    /// Errors: [`CommError::Collective`] for a malformed concatenation;
    /// [`CommError::PeerFailed`], [`CommError::TimedOut`], transport errors.
    pub fn allgather(&self, data: &[u8]) -> Result<Vec<Vec<u8>>, CommError> {
        let tag = self.next_coll_tag();
        let mut all = Vec::new();
        if let Some(parts) = self.gather_tagged(0, data, tag)? {
            for p in &parts {
                all.extend_from_slice(&(p.len() as u64).to_le_bytes());
                all.extend_from_slice(p);
            }
        }
        self.bcast_tagged(0, &mut all, tag)?;
        let mut out = Vec::with_capacity(self.size());
        let mut rest = &all[..];
        while !rest.is_empty() {
            let bad = || CommError::Collective("allgather: truncated concatenation".into());
            let len = rest.get(..8).ok_or_else(bad)?;
            let len = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
            let part = rest.get(8..8 + len).ok_or_else(bad)?;
            out.push(part.to_vec());
            rest = &rest[8 + len..];
        }
        if out.len() != self.size() {
            return Err(CommError::Collective(format!(
                "allgather: {} parts for {} ranks",
                out.len(),
                self.size()
            )));
        }
        Ok(out)
    }
}

/// Adds the elements in `b` (from rank `src`) to `values`.
fn add_from<E: SumElement>(
    values: &mut [E],
    b: &[u8],
    src: usize,
    rank: usize,
) -> Result<(), CommError> {
    check_len::<E>(values, b, src, rank, "allreduce")?;
    for (v, c) in values.iter_mut().zip(b.chunks_exact(E::SIZE)) {
        *v = v.add(E::get(c));
    }
    Ok(())
}

/// Replaces `values` by the elements in `b` (the result, from `src`).
fn decode_into<E: SumElement>(
    values: &mut [E],
    b: &[u8],
    src: usize,
    rank: usize,
    what: &str,
) -> Result<(), CommError> {
    check_len::<E>(values, b, src, rank, what)?;
    for (v, c) in values.iter_mut().zip(b.chunks_exact(E::SIZE)) {
        *v = E::get(c);
    }
    Ok(())
}

fn check_len<E: SumElement>(
    values: &[E],
    b: &[u8],
    src: usize,
    rank: usize,
    what: &str,
) -> Result<(), CommError> {
    if b.len() != values.len() * E::SIZE {
        return Err(CommError::Collective(format!(
            "{what}: rank {src} sent {} bytes, rank {rank} holds {} elements of {} bytes",
            b.len(),
            values.len(),
            E::SIZE
        )));
    }
    Ok(())
}

fn encode<E: SumElement>(values: &[E]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * E::SIZE);
    for v in values {
        v.put(&mut out);
    }
    out
}

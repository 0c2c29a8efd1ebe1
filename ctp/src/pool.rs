//! [`BufferPool`]: spent message buffers kept for reuse, bounded in bytes.
//!
//! Not in the CTP spec (memory management only; nothing on the wire
//! changes). A large message's buffer is freshly allocated for every
//! message otherwise: the sent-commands storage drops a message's buffer
//! when it is confirmed, and a reassembly reserves the announced size for
//! each large message received. With glibc's allocator a freed buffer of a
//! megabyte or more is soon given back to the kernel (heap trimming above
//! `M_TRIM_THRESHOLD`, or `munmap` above `M_MMAP_THRESHOLD`), so the next
//! one faults in and zeroes a fresh page every 4 KiB. Measured on the comm
//! bandwidth benchmark (1 MiB messages over EDP,
//! docs/measurements/issue12-osu.txt): the pool (with comm handing its
//! buffers through) took 98 % of the page
//! faults and 11 % (MTU 1500) to 45 % (MTU 9000) of both ranks' CPU time
//! away.
//! The pool keeps such buffers (at least [`MIN_POOLED`] bytes of capacity)
//! up to a byte limit (`Config::max_spare_bytes`) and hands one back to the
//! next send or reassembly of about the same size.

/// Smallest buffer capacity kept, bytes: smaller buffers come from the
/// allocator's free lists cheaply.
pub const MIN_POOLED: usize = 64 << 10;

/// Spent buffers, bounded by the sum of their capacities.
#[derive(Debug, Default)]
pub(crate) struct BufferPool {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
    max_bytes: usize,
}

impl BufferPool {
    /// An empty pool keeping at most `max_bytes` of capacity (0 keeps none).
    pub fn new(max_bytes: u64) -> Self {
        Self {
            bufs: Vec::new(),
            bytes: 0,
            max_bytes: usize::try_from(max_bytes).unwrap_or(usize::MAX),
        }
    }

    /// Keeps `buf` (emptied) if it is large enough and fits the limit, else
    /// frees it.
    pub fn put(&mut self, mut buf: Vec<u8>) {
        let cap = buf.capacity();
        if cap < MIN_POOLED || self.bytes.saturating_add(cap) > self.max_bytes {
            return;
        }
        buf.clear();
        self.bytes += cap;
        self.bufs.push(buf);
    }

    /// An empty buffer of at least `len` bytes of capacity and at most a
    /// quarter more (so the reassembly memory counted for a message stays
    /// close to what it holds), the smallest such; `None` if there is none
    /// or `len` is below [`MIN_POOLED`].
    pub fn take(&mut self, len: usize) -> Option<Vec<u8>> {
        if len < MIN_POOLED {
            return None;
        }
        let most = len.saturating_add(len / 4);
        let (i, _) = self
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, b)| (len..=most).contains(&b.capacity()))
            .min_by_key(|(_, b)| b.capacity())?;
        let buf = self.bufs.swap_remove(i);
        self.bytes -= buf.capacity();
        Some(buf)
    }

    /// Capacity held, bytes.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Buffers held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.bufs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_large_buffers_within_the_limit_and_fits_sizes() {
        let mut p = BufferPool::new(3 * MIN_POOLED as u64);
        p.put(vec![0; 100]);
        assert_eq!((p.len(), p.bytes()), (0, 0), "small buffers are freed");
        p.put(vec![7; MIN_POOLED]);
        p.put(Vec::with_capacity(2 * MIN_POOLED));
        assert_eq!((p.len(), p.bytes()), (2, 3 * MIN_POOLED));
        p.put(Vec::with_capacity(MIN_POOLED));
        assert_eq!(p.len(), 2, "beyond the limit: freed");
        assert!(p.take(MIN_POOLED / 2).is_none(), "small requests allocate");
        assert!(
            p.take(MIN_POOLED + 1).is_none(),
            "2x the request is too large to hand out"
        );
        let b = p.take(MIN_POOLED).expect("the exact fit");
        assert!(b.is_empty() && b.capacity() >= MIN_POOLED);
        assert_eq!((p.len(), p.bytes()), (1, 2 * MIN_POOLED));
        assert!(p.take(2 * MIN_POOLED + 1).is_none());
        assert_eq!(p.take(2 * MIN_POOLED).unwrap().capacity(), 2 * MIN_POOLED);
        assert_eq!((p.len(), p.bytes()), (0, 0));
        let mut off = BufferPool::new(0);
        off.put(vec![0; MIN_POOLED]);
        assert_eq!(off.len(), 0, "a zero limit keeps nothing");
    }
}

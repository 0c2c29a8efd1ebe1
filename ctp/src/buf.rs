//! The application's buffers a receiver-driven transfer works on without a
//! copy of its own (PROTOCOL.md "Pulled messages"): the sender's body,
//! kept until the receiver has pulled it ([`SendBuf`]), and the receiver's
//! buffer the parts are placed in as they arrive ([`RecvBuf`]). A C ABI
//! wraps its raw pointers in its own audited `unsafe` module.

use std::any::Any;

/// A caller-owned receive buffer: the parts of a pulled message are copied
/// straight into it from the received frames, and it is handed back with
/// the pull's completion. `Any`, so an owner that gave a concrete type
/// (a `Vec<u8>`) can take it back as that type.
pub trait RecvBuf: Any + Send {
    /// The bytes a message may fill, from the start.
    fn bytes_mut(&mut self) -> &mut [u8];

    /// How many bytes it takes: the length of
    /// [`bytes_mut`](Self::bytes_mut), unless it grows as it is filled.
    fn room(&mut self) -> usize {
        self.bytes_mut().len()
    }

    /// Copies `bytes` to offset `off` (`off + bytes.len() <= room()`).
    fn place(&mut self, off: usize, bytes: &[u8]) {
        if let Some(d) = self.bytes_mut().get_mut(off..off + bytes.len()) {
            d.copy_from_slice(bytes);
        }
    }
}

/// A buffer that grows as it is filled, up to `want` bytes: parts landing
/// in order extend it, a part beyond a gap zero-fills the gap first (the
/// large-commands storage's rule). A spent buffer of the pool
/// (`Endpoint::take_buffer`) then costs neither page faults nor a memset
/// of its length before the bytes arrive.
#[derive(Debug, Default)]
pub struct Grow {
    /// The bytes so far (its capacity is best at least `want`).
    pub buf: Vec<u8>,
    /// Bytes it takes.
    pub want: usize,
}

impl RecvBuf for Grow {
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    fn room(&mut self) -> usize {
        self.want
    }

    fn place(&mut self, off: usize, bytes: &[u8]) {
        let end = off + bytes.len();
        if end > self.want {
            return;
        }
        if off >= self.buf.len() {
            self.buf.resize(off, 0);
            self.buf.extend_from_slice(bytes);
        } else {
            if end > self.buf.len() {
                self.buf.resize(end, 0);
            }
            self.buf[off..end].copy_from_slice(bytes);
        }
    }
}

impl RecvBuf for Vec<u8> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl RecvBuf for Box<[u8]> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

/// The body of an offered message: kept by the sender until the receiver
/// has pulled what it wants (or the message is cancelled), its parts sent
/// from it without a copy.
pub trait SendBuf: Any + Send {
    /// The message's bytes.
    fn bytes(&self) -> &[u8];
}

impl SendBuf for Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl SendBuf for Box<[u8]> {
    fn bytes(&self) -> &[u8] {
        self
    }
}

/// A buffer whose first `skip` bytes are not part of the body (room a
/// caller left for a header): the body is the rest.
#[derive(Debug)]
pub struct Tail {
    /// The buffer.
    pub buf: Vec<u8>,
    /// Bytes at its front that are not the body.
    pub skip: usize,
}

impl SendBuf for Tail {
    fn bytes(&self) -> &[u8] {
        self.buf.get(self.skip..).unwrap_or(&[])
    }
}

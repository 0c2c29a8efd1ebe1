//! What carries a protocol socket's datagrams: the engine holding its core.
//!
//! A protocol socket (CTP's `CtpSocket`, MAK's `MakSocket`) is a handle on
//! a sans-IO core living inside an engine: a slot of the process's Ethernet
//! runtime ([`EthEngine`](super::EthEngine)) or a
//! [`UdpEngine`](super::UdpEngine) of its own. The handle reaches its core
//! through the engine's [`Driver`]: it takes the engine
//! ([`Driver::with`], [`Driver::wait`]), finds its core with
//! [`core`](Carrier::core), changes it, and calls
//! [`touched`](Carrier::touched) so that what the core queued is sent.

use std::fmt::Debug;
use std::hash::Hash;
use std::io;
use std::sync::Arc;
use std::time::Instant;

use crate::driver::{Driver, Engine};
use crate::slot::SlotId;

/// A protocol socket's place in an engine. Implemented once per protocol
/// and engine kind (e.g. CTP over EDP, CTP over UDP, MAK over EDP, MAK
/// over UDP).
pub trait Carrier: Send + Sync + 'static {
    /// Peer address type (`(MacAddr, port)` over EDP, `SocketAddr` over
    /// UDP).
    type Addr: Copy + Eq + Hash + Debug + Send + 'static;
    /// The protocol core held by the engine.
    type Core;
    /// The engine the core lives in.
    type Engine: Engine;
    /// The driver of that engine.
    fn driver(&self) -> &Arc<Driver<Self::Engine>>;
    /// The core's slot in the engine ([`SlotId::FIRST`] in an engine of
    /// its own).
    fn slot(&self) -> SlotId;
    /// The core inside the engine; `None` once the slot is gone.
    fn core(e: &mut Self::Engine, slot: SlotId) -> Option<&mut Self::Core>;
    /// The core, read-only; `None` once the slot is gone.
    fn core_ref(e: &Self::Engine, slot: SlotId) -> Option<&Self::Core>;
    /// After a handle changed the core: send what it queued, update
    /// readiness and deadlines.
    ///
    /// Errors: fatal link errors.
    fn touched(e: &mut Self::Engine, slot: SlotId, now: Instant) -> io::Result<()>;
    /// Human-readable local address (for logs and `Debug`).
    fn local_name(&self) -> String;
    /// The last handle is gone: remove the core from the engine (a slot
    /// may linger until what it queued is sent).
    fn release(&self);
}

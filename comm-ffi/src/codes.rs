//! The C ABI's numbers: return codes, `comm_state` values and the receive
//! wildcards, a leaf that [`crate::ffi`] (which re-exports them) and the safe
//! `handle` side both use. cbindgen writes them into include/comm.h.

use std::ffi::c_int;

/// Success.
pub const COMM_OK: c_int = 0;
/// A NULL pointer, a rank or tag out of range, an address that does not
/// parse.
pub const COMM_ERR_ARG: c_int = -1;
/// The message was longer than the receive buffer (the buffer holds its
/// first bytes).
pub const COMM_ERR_TRUNCATED: c_int = -2;
/// The peer failed (its messages were not confirmed in time).
pub const COMM_ERR_PEER: c_int = -3;
/// A wait timed out.
pub const COMM_ERR_TIMEOUT: c_int = -4;
/// A socket error (e.g. CAP_NET_RAW missing for EDP).
pub const COMM_ERR_IO: c_int = -5;
/// Any other error of the communicator (see `comm_last_error`).
pub const COMM_ERR_OTHER: c_int = -6;
/// A bug inside the library (a Rust panic, caught at the boundary).
pub const COMM_ERR_PANIC: c_int = -7;
/// The peer was disconnected with `comm_disconnect`: writes fail until
/// `comm_reconnect`.
pub const COMM_ERR_DISCONNECTED: c_int = -8;
/// `comm_state`: nothing sent to the peer yet.
pub const COMM_STATE_UNCONNECTED: c_int = 0;
/// `comm_state`: first contact sent, no grant yet.
pub const COMM_STATE_CONNECTING: c_int = 1;
/// `comm_state`: the peer granted us a window.
pub const COMM_STATE_CONNECTED: c_int = 2;
/// `comm_state`: `comm_disconnect` was called.
pub const COMM_STATE_EXPLICIT_DISCONNECT: c_int = 3;
/// `comm_state`: messages to the peer went unconfirmed; ends by itself.
pub const COMM_STATE_IMPLICIT_DISCONNECT: c_int = 4;
/// `comm_state`: declared failed (no answer within the failure timeout);
/// ends when a restarted process at its address announces itself.
pub const COMM_STATE_FAILED: c_int = 5;
/// `source` of `comm_recv` for any rank (MPI_ANY_SOURCE).
pub const COMM_ANY_SOURCE: c_int = -1;
/// `tag` of `comm_recv` for any tag (MPI_ANY_TAG).
pub const COMM_ANY_TAG: c_int = -1;

//! Fault injection (work in progress).

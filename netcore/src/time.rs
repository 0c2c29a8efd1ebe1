//! (to be filled: see docs/ARCHITECTURE.md)

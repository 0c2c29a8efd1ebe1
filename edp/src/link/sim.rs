//! In-memory links on a virtual clock (work in progress).

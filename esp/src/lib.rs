//! esp (work in progress)

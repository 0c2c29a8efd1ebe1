//! ctp (work in progress)

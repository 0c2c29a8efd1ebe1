//! esp transport (being integrated).

use std::io;

use super::{Endpoint, SessionConfig};

fn unsupported(cfg: &SessionConfig) -> io::Error {
    io::Error::new(io::ErrorKind::Unsupported, format!("mode {} is not built yet", cfg.mode.name()))
}

pub fn connect(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    Err(unsupported(cfg))
}

pub fn accept(cfg: &SessionConfig) -> io::Result<Box<dyn Endpoint>> {
    Err(unsupported(cfg))
}

//! Machine-readable outputs beside the text report: CSV (`--csv FILE`, or
//! `-o FILE.csv`).

pub mod csv;
pub mod json;
pub mod pivot;
pub mod plot;
pub mod progress;
pub mod raw;

//! The sweep a run of several processes measures, as the command line
//! gives it: one value that `--local` (`local::LocalConfig`) and `--local
//! --hosts N` (`cluster::ClusterConfig`) embed, built once by `cli`.

use crate::modes::Mode;
use crate::patterns::Pattern;
use crate::sizes::SizeRange;

/// Which modes, which pattern, which sizes, how many iterations.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The modes (`-m`), in the order they run.
    pub modes: Vec<Mode>,
    /// The pattern (`-x`): one_one or stream for two hosts, a multi-host
    /// pattern for `--hosts N`.
    pub pattern: Pattern,
    /// The size sweep (`-s`, `-g`), bytes.
    pub size: SizeRange,
    pub grade: u32,
    /// Measured (`-c`) and warm-up (`--warmup`) iterations per size (and
    /// pair, with several hosts).
    pub count: usize,
    pub warmup: usize,
}

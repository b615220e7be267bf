//! The Docker backend's settings (built by `config` from the command line).

use std::path::PathBuf;

use super::flags::DockerRunFlags;

/// Where the Engine API is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DockerEndpoint {
    /// The engine's usual local socket (Docker's, or Podman's probed sockets).
    Default,
    Unix(String),
    Http(String),
}

/// Docker backend settings.
#[derive(Debug, Clone)]
pub struct DockerConfig {
    pub podman: bool,
    pub endpoint: DockerEndpoint,
    pub image: String,
    pub nano_cpus: Option<i64>,
    pub memory_bytes: Option<i64>,
    /// `--disk`: the size limit of each computer's writable layer (`StorageOpt size`).
    pub disk_bytes: Option<i64>,
    pub network: bool,
    pub run_flags: DockerRunFlags,
    /// `--warm-pool`: started computers kept ready for new slugs.
    pub warm_pool: usize,
    /// Where the direct supervisor channel's per-computer host directories are made
    /// (`<state-dir>/run`); `None`: the relay only (`--supervisor-channel relay`, or an
    /// engine that is not a local socket).
    pub channel_dir: Option<PathBuf>,
}

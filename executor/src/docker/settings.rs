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
    /// The server's network policy (SPEC §3.11): new computers' unless narrowed, pool
    /// members', and that of containers made before the `msc.network` label.
    pub network: shared::egress::Policy,
    /// `--egress-resolve`: names the egress gate pins to addresses.
    pub egress_pins: Vec<(String, std::net::IpAddr)>,
    /// `--egress-dns`: the egress gate's upstream resolver.
    pub egress_dns: Option<std::net::SocketAddr>,
    /// `--egress-secret`: computers made with an allow list get a placeholder per secret.
    pub egress_secrets: Vec<crate::egress::secrets::EgressSecret>,
    /// `--egress-ca-file`: a private CA the gate trusts upstream.
    pub egress_ca_file: Option<PathBuf>,
    pub run_flags: DockerRunFlags,
    /// `--warm-pool`: started computers kept ready for new slugs.
    pub warm_pool: usize,
    /// Where the direct supervisor channel's per-computer host directories are made
    /// (`<state-dir>/run`); `None`: the relay only (`--supervisor-channel relay`, or an
    /// engine that is not a local socket).
    pub channel_dir: Option<PathBuf>,
}

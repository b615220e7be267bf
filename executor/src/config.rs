//! Checked configuration: flags and environment turned into what the server runs with.
//!
//! Owns every start-up refusal (backend not built yet, both description flags, a custom
//! image without a description, a public listener without a token, bad limits), each with
//! a message that says what to pass instead. Nothing here talks to Docker.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shared::catalogue::{DescriptionError, assemble_description, usage_text};

use crate::cli::{BackendArg, Cli, TransportArg};
use crate::docker::flags::{FlagError, parse_docker_run_flags};

mod egress;
mod python;
pub use crate::docker::settings::{DockerConfig, DockerEndpoint};
pub use crate::serve::HttpLimits;
pub use crate::spec::{WasmConfig, parse_size};
pub use egress::{EgressConfig, EgressError, EgressSecret, Enforcer, network_text};
pub use python::PYTHON_IN_STATE_DIR;

/// The default image, which the built-in description describes.
pub const DEFAULT_IMAGE: &str = "debian:bookworm-slim";
/// The default shell for command mode.
pub const DEFAULT_SHELL: &str = "/bin/bash";

/// A start-up error. Printed, then the process exits with status 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Description(#[from] DescriptionError),
    #[error("--tools: {0}")]
    Tools(shared::catalogue::UnknownGroup),
    #[error(
        "--backend wasm needs --wasm-path FILE.wasm (a WASI command module); for the built-in toolbox use --backend go_busybox"
    )]
    WasmPathMissing,
    #[error(
        "--warm-pool keeps Docker/Podman computers ready; {0} computers are not kept in a pool (drop --warm-pool, or use --backend docker)"
    )]
    WarmPoolBackend(&'static str),
    #[error(
        "--warm-pool serves a local server's new computers; an executor's are made for the gateway's teams on demand (drop --warm-pool in executor mode)"
    )]
    WarmPoolExecutor,
    #[error(
        "--backend fly needs a Fly API token: run `{0}` (the token is then read from ~/.fly/config.yml), or pass --fly-token / set FLY_API_TOKEN (e.g. from `fly tokens create org`)"
    )]
    FlyToken(String),
    #[error(
        "--backend e2b needs an E2B API key: pass --e2b-api-key or set E2B_API_KEY (create one at https://e2b.dev/dashboard)"
    )]
    E2bKey,
    #[error(
        "--backend modal needs a Modal token: run `{0}` (the token is then read from ~/.modal.toml), or pass --modal-token-id and --modal-token-secret / set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"
    )]
    ModalToken(&'static str),
    #[error("--modal-cpu {0} must be between 0.125 and 64")]
    BadModalCpu(f64),
    #[error("--modal-memory {0} must be at least 128 (MiB)")]
    BadModalMemory(u32),
    #[error(transparent)]
    BadE2bPair(#[from] crate::e2b::BadPair),
    #[error("--fly-memory {0} must be at least 256 (MB)")]
    BadFlyMemory(u32),
    #[error("--wasm-path is only used with --backend wasm")]
    WasmPathUnused,
    #[error("--wasm-max-memory {0} must be between 1 and 4096 (MiB)")]
    BadWasmMemory(u64),
    #[error(
        "--wasm-shell-memory {0}: give MiB (1 to 4096) or a size such as 64m or 1g (1 MiB to 4 GiB)"
    )]
    BadShellMemory(String),
    #[error(
        "--wasm-job-output-budget {0}: give MiB (1 to 65536) or a size such as 512m or 1g (1 MiB to 64 GiB)"
    )]
    BadJobOutputBudget(String),
    #[error("--wasm-fuel must be at least 1 (omit it for no fuel limit)")]
    BadWasmFuel,
    #[error(
        "--wasm-python {0:?}: {1}; give the path of a CPython WASI module such as python-3.12.0.wasm (README: python3 on WASM computers)"
    )]
    BadWasmPython(PathBuf, String),
    #[error(
        "refusing to listen on {0} without authentication: set --auth-token (or KILNTAINERS_AUTH_TOKEN), bind to 127.0.0.1, or pass --allow-unauthenticated-http if something in front of this server authenticates"
    )]
    PublicWithoutToken(String),
    #[error("--host {0:?} is not an IP address; use e.g. 127.0.0.1, ::1 or 0.0.0.0")]
    BadHost(String),
    #[error("--engine {0:?} is not supported; use docker or podman")]
    BadEngine(String),
    #[error("--docker-host {0:?}: {1}")]
    BadDockerHost(String, String),
    #[error("--cpu {0:?} must be a positive number of CPUs such as 1 or 1.5")]
    BadCpu(String),
    #[error("--memory {0:?} must be a size such as 512m or 2g (at least 6m)")]
    BadMemory(String),
    #[error("--disk {0:?} must be a size such as 10g or 512m (at least 64m)")]
    BadDisk(String),
    #[error(transparent)]
    RunFlag(#[from] FlagError),
    #[error("--tool-name {0:?} must be 1-64 letters, digits, '_' or '-' (e.g. sandbox_exec)")]
    BadToolName(String),
    #[error("--auth-token must not be empty")]
    EmptyToken,
    #[error("--shell {0:?} must be an absolute path such as /bin/sh")]
    BadShell(String),
    #[error(
        "executor mode needs --executor-secret (or MSC_EXECUTOR_SECRET): the HS256 secret shared with the gateway, at least 32 bytes (e.g. openssl rand -hex 32)"
    )]
    ExecutorSecret,
    #[error(
        "executor mode needs --executor-name NAME (or MSC_EXECUTOR_NAME): this executor's name in the gateway's EXECUTORS, which the gateway's tokens carry as their audience"
    )]
    ExecutorName,
    #[error("--listen {0:?} is not an address such as 127.0.0.1:8436 or 0.0.0.0:8436")]
    BadListen(String),
    #[error(
        "--supervisor {0:?} is not a file; give the path of msc-supervisor (x86_64 musl), or `none` for plain Engine API exec"
    )]
    BadSupervisor(String),
    #[error(transparent)]
    Egress(#[from] EgressError),
}

/// Which backend to start.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendChoice {
    /// Docker/Podman if reachable, else the WASM toolbox (no `--backend` given).
    Auto,
    Docker,
    /// The embedded WASM toolbox (`go_busybox`).
    Toolbox,
    /// A user's WASI module (`wasm`).
    Custom(PathBuf),
    /// Fly Machines.
    Fly(Box<crate::fly::FlyConfig>),
    /// E2B sandboxes.
    E2b(Box<crate::e2b::E2bConfig>),
    /// Modal sandboxes.
    Modal(Box<crate::modal::client::ModalSettings>),
}

impl BackendChoice {
    /// Its `--backend` name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Auto | Self::Docker => "docker",
            Self::Toolbox => "go_busybox",
            Self::Custom(_) => "wasm",
            Self::Fly(_) => "fly",
            Self::E2b(_) => "e2b",
            Self::Modal(_) => "modal",
        }
    }
}

/// Everything the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// Executor mode (the REST API for a gateway), if asked for.
    pub executor: Option<ExecutorConfig>,
    pub transport: TransportArg,
    pub host: IpAddr,
    pub port: u16,
    pub default_timeout_secs: u64,
    pub output_limit: u64,
    /// `--file-limit`: the largest file streamed over HTTP.
    pub file_limit: u64,
    pub session_timeout_secs: u64,
    /// `--http-*`: the connection and body limits of both HTTP servers.
    pub http: HttpLimits,
    /// `--http-max-sessions`: live legacy MCP sessions in all.
    pub max_sessions: usize,
    /// `--http-max-sessions-per-principal` (at most `max_sessions`).
    pub max_sessions_per_principal: usize,
    /// `--max-computers-per-principal`.
    pub max_computers_per_principal: usize,
    /// `--snapshot-limit`: snapshots kept per computer (SPEC §3.12).
    pub snapshot_limit: usize,
    pub auth_token: Option<String>,
    /// The configured shell, or `None` for bash with a /bin/sh fallback.
    pub shell: Option<String>,
    pub tool_name: String,
    pub lifecycle_tools: bool,
    /// The `jobs` tool group (SPEC §3.8).
    pub jobs_tools: bool,
    /// `--tools` includes `files` (the `computer_file_*` tools).
    pub files_tools: bool,
    /// `--tools` includes `snapshots` (SPEC §3.12).
    pub snapshots_tools: bool,
    /// The exec tool's description for the backend in use (`run` picks the WASM one
    /// when it starts on WASM).
    pub exec_description: String,
    /// The exec tool's description when the backend is not Docker (the WASM toolbox, a
    /// custom module, or Fly).
    pub other_description: String,
    pub backend: BackendChoice,
    pub wasm: WasmConfig,
    pub state_dir: PathBuf,
    pub docker: DockerConfig,
    /// Where the supervisor binary placed in computers comes from.
    pub supervisor: SupervisorSource,
    /// The network policy and the egress gate's settings (SPEC §3.11).
    pub egress: EgressConfig,
}

/// Reads `ENABLE_LIFECYCLE_TOOLS` (trimmed, case-insensitive `true`).
pub fn lifecycle_enabled(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

fn parse_cpu(s: &str) -> Result<i64, ConfigError> {
    let cpus: f64 = s
        .trim()
        .parse()
        .map_err(|_| ConfigError::BadCpu(s.into()))?;
    if !(cpus.is_finite() && cpus > 0.0 && cpus <= 1024.0) {
        return Err(ConfigError::BadCpu(s.into()));
    }
    Ok((cpus * 1e9).round() as i64)
}

/// `--disk`: a size of at least 64 MiB (a computer's image needs some of it).
fn parse_disk(s: &str) -> Result<i64, ConfigError> {
    match parse_size(s) {
        Some(b) if b >= 64 << 20 => Ok(b),
        _ => Err(ConfigError::BadDisk(s.into())),
    }
}

fn parse_memory(s: &str) -> Result<i64, ConfigError> {
    match parse_size(s) {
        Some(b) if b >= 6 * 1024 * 1024 => Ok(b),
        _ => Err(ConfigError::BadMemory(s.into())),
    }
}

/// A bare number of MiB (like `--wasm-max-memory`), else a size; from 1 MiB to
/// `max_mib` MiB.
fn parse_mib_or_size(s: &str, max_mib: u64) -> Option<u64> {
    let t = s.trim();
    match t.parse::<u64>() {
        Ok(mib) if (1..=max_mib).contains(&mib) => Some(mib << 20),
        Ok(_) => None,
        Err(_) => parse_size(t)
            .and_then(|b| u64::try_from(b).ok())
            .filter(|b| (1 << 20..=max_mib << 20).contains(b)),
    }
}

/// `--wasm-shell-memory`: MiB or a size, up to 4 GiB.
fn parse_shell_memory(s: &str) -> Result<usize, ConfigError> {
    parse_mib_or_size(s, 4096)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| ConfigError::BadShellMemory(s.into()))
}

/// `--wasm-job-output-budget`: MiB or a size, up to 64 GiB.
fn parse_job_output_budget(s: &str) -> Result<u64, ConfigError> {
    parse_mib_or_size(s, 64 << 10).ok_or_else(|| ConfigError::BadJobOutputBudget(s.into()))
}

fn parse_endpoint(raw: Option<&str>) -> Result<DockerEndpoint, ConfigError> {
    let Some(raw) = raw.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(DockerEndpoint::Default);
    };
    let bad = |why: &str| ConfigError::BadDockerHost(raw.into(), why.into());
    if let Some(path) = raw.strip_prefix("unix://") {
        if path.is_empty() {
            return Err(bad(
                "a unix socket path is needed, e.g. unix:///var/run/docker.sock",
            ));
        }
        return Ok(DockerEndpoint::Unix(path.into()));
    }
    if raw.starts_with('/') {
        return Ok(DockerEndpoint::Unix(raw.into()));
    }
    for scheme in ["tcp://", "http://"] {
        if let Some(rest) = raw.strip_prefix(scheme) {
            if rest.is_empty() {
                return Err(bad("a host:port is needed, e.g. tcp://127.0.0.1:2375"));
            }
            return Ok(DockerEndpoint::Http(format!("tcp://{rest}")));
        }
    }
    if raw.starts_with("ssh://") {
        return Err(bad(
            "ssh:// is not supported; forward the socket instead: `ssh -NL /tmp/docker.sock:/var/run/docker.sock user@host` and pass --docker-host unix:///tmp/docker.sock",
        ));
    }
    if raw.starts_with("https://") {
        return Err(bad(
            "TLS endpoints are not supported yet; use a unix socket or an SSH-forwarded socket",
        ));
    }
    Err(bad("use unix:///path/to/docker.sock or tcp://host:port"))
}

/// Executor mode: where to listen, how to check the gateway's tokens, and when a
/// temporary nobody asks for goes.
#[derive(Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    pub listen: std::net::SocketAddr,
    pub secret: String,
    /// `--executor-name`: the audience of the tokens it accepts.
    pub name: String,
    /// `--executor-idle-timeout`, in seconds.
    pub idle_timeout_secs: u64,
}

impl std::fmt::Debug for ExecutorConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorConfig")
            .field("listen", &self.listen)
            .field("name", &self.name)
            .field("idle_timeout_secs", &self.idle_timeout_secs)
            .finish_non_exhaustive()
    }
}

/// Where the in-computer supervisor comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupervisorSource {
    /// Plain Engine API exec only.
    Off,
    /// The copy built into this binary (`MSC_EMBED_SUPERVISOR` at build time).
    Embedded,
    /// A file: `--supervisor PATH`, or `msc-supervisor` beside this binary.
    File(PathBuf),
}

/// The supervisor embedded at build time (empty when none was).
pub const EMBEDDED_SUPERVISOR: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/msc-supervisor"));

/// `--supervisor`: an explicit path, `none`/empty for none; by default the embedded copy,
/// else `msc-supervisor` beside this binary, else none.
fn supervisor_source(flag: Option<&str>) -> Result<SupervisorSource, ConfigError> {
    match flag.map(str::trim) {
        Some("" | "none") => Ok(SupervisorSource::Off),
        Some(p) if PathBuf::from(p).is_file() => Ok(SupervisorSource::File(PathBuf::from(p))),
        Some(p) => Err(ConfigError::BadSupervisor(p.to_owned())),
        None if !EMBEDDED_SUPERVISOR.is_empty() => Ok(SupervisorSource::Embedded),
        None => Ok(std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|d| d.join("msc-supervisor")))
            .filter(|p| p.is_file())
            .map_or(SupervisorSource::Off, SupervisorSource::File)),
    }
}

fn default_state_dir() -> PathBuf {
    match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        Some(home) => PathBuf::from(home).join(".mcp-sandbox-computer-vm-for-ai"),
        None => std::env::temp_dir().join("mcp-sandbox-computer-vm-for-ai"),
    }
}

fn backend_description(
    image: &str,
    shell: Option<&str>,
    network: &shared::egress::Policy,
    timeout: u64,
    limit: u64,
) -> String {
    let shell_text = match shell {
        None => "bash (/bin/sh when the image has no bash)".to_owned(),
        Some(s) => s.to_owned(),
    };
    let net = network_text(network);
    format!(
        "Run a command on an isolated Linux computer ({image} container: Debian 12 with apt, coreutils, {shell_text}; {net}). \
Files persist between calls on the same computer; shell state (current directory, variables, background jobs) does not, so use `working_directory` or `cd dir && …`. \
{}",
        usage_text(timeout, limit)
    )
}

/// What the exec tool says about toolbox computers (the agent plans with it): `python`
/// when a CPython WASI module is configured (`--wasm-python`).
pub fn toolbox_description(python: bool) -> String {
    let (interpreters, python_text, programs) = if python {
        (
            "no compilers and no interpreters other than python3",
            "`python3` (also `python`) is CPython 3.12 for WASI: the standard library (json, re, sqlite3, hashlib, ...), files, stdin and pipes; no pip, no sockets, no threads, no subprocess. ",
            "python python3 ",
        )
    } else {
        (
            "no compilers and no interpreters such as python or node",
            "",
            "",
        )
    };
    format!(
        "Run a command on an isolated, lightweight Linux-like computer. It is a WebAssembly sandbox (WASI), not a Linux machine: no network, no package manager (no apt, pip or npm), {interpreters}, no fork of real processes; one user, root; one processor. \
`command` runs in a POSIX/bash-like shell built into the host: pipelines, redirections (> >> < 2>&1 &> here-docs <<<), && || ; !, quoting, variables, globs, $(...), $((...)), {{a,b}}, if/for/while/until/case, [[ ]], functions, export, cd, read, xargs, env, timeout, sh -c, scripts with #!/bin/sh after chmod +x. \
Background jobs (`cmd &`) keep running between calls on the same computer (`jobs`, `wait`, `kill %1`) until the timeout of the call that started them; computer_restart and factory reset end them; their output after that call returned is dropped. \
Not supported: arrays, process substitution <(...), aliases, fg/bg job control. \
{python_text}Programs (in /bin and /usr/bin): awk base32 base64 basename cat chmod cmp comm cp cut date diff dirname du echo env expr false file find fold grep gunzip gzip head hostname id jq ln ls md5sum mkdir mktemp mv nl nproc od paste printf pwd {programs}readlink realpath rev rm rmdir sed seq sha1sum sha256sum sha512sum shuf sleep sort split stat tac tail tar tee test timeout touch tr true uname uniq wc which whoami xargs yes zcat. \
find -exec is not available (pipe into xargs). The read-only base holds /etc (os-release, passwd, group, hostname = the computer id), /bin, /usr/bin, /proc (version, cpuinfo, meminfo, and a /proc/N with cmdline, status and stat for each running kept job of yield_ms) and /dev (null zero full random urandom stdin stdout stderr); factory reset restores it and empties the rest. Output is byte-exact. \
Files persist between calls on the same computer (HOME is /root; /tmp exists); shell state does not, so use `working_directory` or `cd dir && ...`."
    )
}

/// The CPython WASI module behind `python3` on toolbox computers: `--wasm-python PATH`
/// (refused at once when it is not a WebAssembly file), else `<state-dir>/python.wasm`
/// when there is one ([`python::in_state_dir`]).
fn wasm_python(flag: Option<&Path>, state_dir: &Path) -> Result<Option<PathBuf>, ConfigError> {
    if let Some(path) = flag {
        python::check(path)
            .map_err(|why| ConfigError::BadWasmPython(path.to_path_buf(), why.to_string()))?;
        return Ok(Some(path.to_path_buf()));
    }
    Ok(python::in_state_dir(state_dir))
}

/// The Fly settings, with the token found in the flags, the environment or the flyctl
/// login cache (none: a start-up error naming the login command).
fn fly_config(cli: &Cli) -> Result<crate::fly::FlyConfig, ConfigError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let (token, source) = crate::fly::find_token(cli.fly_token.as_deref(), home.as_deref())
        .ok_or_else(|| ConfigError::FlyToken(crate::fly::login_hint(&cli.fly_cli)))?;
    tracing::info!(source, "using the Fly API token from {source}");
    if cli.fly_memory < 256 {
        return Err(ConfigError::BadFlyMemory(cli.fly_memory));
    }
    Ok(crate::fly::FlyConfig {
        api_url: cli.fly_api_url.trim_end_matches('/').to_owned(),
        token,
        app: cli.fly_app.clone().filter(|a| !a.trim().is_empty()),
        org: cli
            .fly_org
            .clone()
            .filter(|o| !o.trim().is_empty())
            .unwrap_or_else(|| "personal".into()),
        machines: shared::providers::computers::fly::FlySettings {
            region: cli.fly_region.clone().filter(|r| !r.trim().is_empty()),
            image: cli
                .fly_image
                .clone()
                .unwrap_or_else(|| crate::fly::DEFAULT_IMAGE.into()),
            cpu_kind: match cli.fly_cpu_kind {
                Some(crate::cli::FlyCpuKind::Performance) => "performance".into(),
                _ => "shared".into(),
            },
            cpus: cli.fly_cpus.unwrap_or(1).max(1),
            memory_mb: cli.fly_memory,
            rootfs_size_gb: cli.fly_rootfs_size,
            sync_exec_secs: cli.fly_sync_exec_secs.clamp(1, 55),
        },
    })
}

/// The E2B settings (the key from the flag or `E2B_API_KEY`).
fn e2b_config(cli: &Cli) -> Result<crate::e2b::E2bConfig, ConfigError> {
    let api_key = cli
        .e2b_api_key
        .clone()
        .or_else(|| std::env::var("E2B_API_KEY").ok())
        .map(|k| k.trim().to_owned())
        .filter(|k| !k.is_empty())
        .ok_or(ConfigError::E2bKey)?;
    Ok(crate::e2b::E2bConfig {
        api_url: cli.e2b_api_url.trim_end_matches('/').to_owned(),
        sandbox_url: cli
            .e2b_sandbox_url
            .clone()
            .filter(|u| !u.trim().is_empty())
            .map(|u| u.trim_end_matches('/').to_owned()),
        api_key,
        template: cli.e2b_template.clone(),
        sandbox_timeout_secs: cli.e2b_sandbox_timeout.max(1),
        metadata: crate::e2b::parse_pairs(&cli.e2b_metadata, "--e2b-metadata")
            .map_err(ConfigError::BadE2bPair)?,
        env: crate::e2b::parse_pairs(&cli.e2b_env, "--e2b-env").map_err(ConfigError::BadE2bPair)?,
    })
}

/// The Modal settings, with the token found in the flags, the environment or the Modal
/// CLI's `~/.modal.toml` (none: a start-up error naming the login command).
fn modal_config(cli: &Cli) -> Result<crate::modal::client::ModalSettings, ConfigError> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let (token_id, token_secret, source) = crate::modal::find_token(
        cli.modal_token_id.as_deref(),
        cli.modal_token_secret.as_deref(),
        home.as_deref(),
    )
    .ok_or(ConfigError::ModalToken(crate::modal::LOGIN_HINT))?;
    tracing::info!(source, "using the Modal token from {source}");
    if !(0.125..=64.0).contains(&cli.modal_cpu) {
        return Err(ConfigError::BadModalCpu(cli.modal_cpu));
    }
    if cli.modal_memory < 128 {
        return Err(ConfigError::BadModalMemory(cli.modal_memory));
    }
    let defaults = crate::modal::client::ModalSettings::default();
    Ok(crate::modal::client::ModalSettings {
        server_url: std::env::var("MODAL_SERVER_URL")
            .ok()
            .map(|u| u.trim().trim_end_matches('/').to_owned())
            .filter(|u| !u.is_empty())
            .unwrap_or(defaults.server_url),
        token_id,
        token_secret,
        app_name: cli
            .modal_app_name
            .clone()
            .filter(|a| !a.trim().is_empty())
            .unwrap_or(defaults.app_name),
        image: cli.image.trim().to_owned(),
        image_builder_version: defaults.image_builder_version,
        cpu: Some(cli.modal_cpu),
        memory_mb: Some(cli.modal_memory),
        gpu: cli.gpu.clone().filter(|g| !g.trim().is_empty()),
        region: cli.region.clone().filter(|r| !r.trim().is_empty()),
        sandbox_timeout_secs: cli.sandbox_timeout,
    })
}

/// What the exec tool says on Fly computers.
fn fly_description(f: &crate::fly::FlyConfig, timeout: u64, limit: u64) -> String {
    format!(
        "Run a command on an isolated Linux computer (a Fly Machine, image {}, {} CPU x{}, {} MB; network access on). \
Files persist between calls on the same computer (permanent computers keep their root filesystem across restarts); shell state does not, so use `working_directory` or `cd dir && ...`. {}",
        f.machines.image,
        f.machines.cpu_kind,
        f.machines.cpus,
        f.machines.memory_mb,
        usage_text(timeout, limit)
    )
}

/// What the exec tool says on WASM computers.
fn wasm_backend_description(
    backend: &BackendChoice,
    python: bool,
    timeout: u64,
    limit: u64,
) -> String {
    let body = match backend {
        BackendChoice::Custom(path) => format!(
            "Run a command on an isolated WebAssembly computer: the WASI program {} runs with `args` as its arguments (`command` is passed as `-c COMMAND`). \
No network; files persist between calls on the same computer under its `/`.",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ),
        _ => toolbox_description(python),
    };
    format!("{body} {}", usage_text(timeout, limit))
}

/// `--http-max-body` and the `--http-*-timeout`s (their ranges are checked by clap).
fn http_limits(cli: &Cli) -> HttpLimits {
    HttpLimits {
        max_body: usize::try_from(cli.http_max_body).unwrap_or(usize::MAX),
        header_timeout: Duration::from_secs(cli.http_header_timeout),
        body_timeout: Duration::from_secs(cli.http_body_timeout),
        idle_timeout: Duration::from_secs(cli.http_idle_timeout),
    }
}

impl Config {
    /// Checks the flags; `lifecycle_env` is the value of `ENABLE_LIFECYCLE_TOOLS`.
    pub fn from_cli(cli: &Cli, lifecycle_env: Option<&str>) -> Result<Self, ConfigError> {
        let backend = match cli.backend {
            // `--engine podman` asks for containers: no quiet fallback to WASM.
            None if cli.engine.trim() != "docker" => BackendChoice::Docker,
            None => BackendChoice::Auto,
            Some(BackendArg::Docker) => BackendChoice::Docker,
            Some(BackendArg::E2b) => BackendChoice::E2b(Box::new(e2b_config(cli)?)),
            Some(BackendArg::Fly) => BackendChoice::Fly(Box::new(fly_config(cli)?)),
            Some(BackendArg::GoBusybox) => BackendChoice::Toolbox,
            Some(BackendArg::Modal) => BackendChoice::Modal(Box::new(modal_config(cli)?)),
            Some(BackendArg::Wasm) => {
                BackendChoice::Custom(cli.wasm_path.clone().ok_or(ConfigError::WasmPathMissing)?)
            }
        };
        let groups = shared::catalogue::Groups::parse(cli.tools.as_deref().unwrap_or(""))
            .map_err(ConfigError::Tools)?;
        if cli.wasm_path.is_some() && !matches!(backend, BackendChoice::Custom(_)) {
            return Err(ConfigError::WasmPathUnused);
        }
        if !(1..=4096).contains(&cli.wasm_max_memory) {
            return Err(ConfigError::BadWasmMemory(cli.wasm_max_memory));
        }
        if cli.wasm_fuel == Some(0) {
            return Err(ConfigError::BadWasmFuel);
        }
        let podman = match cli.engine.trim() {
            "docker" => false,
            "podman" => true,
            other => return Err(ConfigError::BadEngine(other.into())),
        };
        let host: IpAddr = cli
            .host
            .trim()
            .parse()
            .map_err(|_| ConfigError::BadHost(cli.host.clone()))?;
        let auth_token = match cli.auth_token.as_deref() {
            None => None,
            Some(t) if t.trim().is_empty() => return Err(ConfigError::EmptyToken),
            Some(t) => Some(t.trim().to_owned()),
        };
        if cli.transport == TransportArg::Http
            && !host.is_loopback()
            && auth_token.is_none()
            && !cli.allow_unauthenticated_http
        {
            return Err(ConfigError::PublicWithoutToken(
                std::net::SocketAddr::new(host, cli.port).to_string(),
            ));
        }
        let name_ok = !cli.tool_name.is_empty()
            && cli.tool_name.len() <= 64
            && cli
                .tool_name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !name_ok {
            return Err(ConfigError::BadToolName(cli.tool_name.clone()));
        }
        if let Some(shell) = &cli.shell
            && !shell.starts_with('/')
        {
            return Err(ConfigError::BadShell(shell.clone()));
        }
        let egress = EgressConfig::from_cli(cli, |name| std::env::var(name).ok())?;
        // What only the egress gate enforces, or `none` where a backend cannot confine
        // its computers: refused now, never silently unenforced (SPEC §3.11).
        let enforcer = match backend {
            BackendChoice::Auto | BackendChoice::Docker => Enforcer::Gate,
            BackendChoice::Toolbox | BackendChoice::Custom(_) => Enforcer::Wasm,
            BackendChoice::Fly(_) => Enforcer::Fly,
            BackendChoice::E2b(_) => Enforcer::E2b,
            BackendChoice::Modal(_) => Enforcer::Modal,
        };
        egress.enforceable(enforcer, backend.name())?;
        let image = cli.image.trim().to_owned();
        // Only Docker computers are described by the built-in text about the default image;
        // Modal's description names the image it runs.
        let on_docker = matches!(backend, BackendChoice::Auto | BackendChoice::Docker);
        if cli.warm_pool > 0 {
            if !on_docker {
                return Err(ConfigError::WarmPoolBackend(backend.name()));
            }
            if matches!(cli.mode, Some(crate::cli::ModeArg::Executor)) {
                return Err(ConfigError::WarmPoolExecutor);
            }
        }
        let custom = (on_docker && image != DEFAULT_IMAGE).then_some(image.as_str());
        let exec_description = assemble_description(
            &backend_description(
                &image,
                cli.shell.as_deref(),
                &egress.policy,
                cli.timeout,
                cli.output_limit,
            ),
            custom,
            cli.tool_instruction_override.as_deref(),
            cli.extended_tool_instruction.as_deref(),
        )?;
        let state_dir = cli.state_dir.clone().unwrap_or_else(default_state_dir);
        let python = wasm_python(cli.wasm_python.as_deref(), &state_dir)?;
        let backend_text = match &backend {
            BackendChoice::Fly(f) => fly_description(f, cli.timeout, cli.output_limit),
            BackendChoice::E2b(e) => format!(
                "Run a command on an isolated Linux computer (an E2B sandbox, template {}; network access on). \
Files persist between calls on the same computer (permanent computers are paused, not killed, when idle, and resumed on use); shell state does not, so use `working_directory` or `cd dir && ...`. {}",
                e.template,
                usage_text(cli.timeout, cli.output_limit)
            ),
            BackendChoice::Modal(m) => format!(
                "Run a command on an isolated Linux computer (a Modal sandbox, image {}, {} CPU, {} MiB{}; network access on). \
Files persist between calls on the same computer and across computer_restart (a filesystem snapshot); a sandbox lives at most {} s, after which the computer starts afresh; shell state does not persist, so use `working_directory` or `cd dir && ...`. {}",
                m.image,
                cli.modal_cpu,
                cli.modal_memory,
                m.gpu
                    .as_deref()
                    .map(|g| format!(", GPU {g}"))
                    .unwrap_or_default(),
                m.sandbox_timeout_secs,
                usage_text(cli.timeout, cli.output_limit)
            ),
            other => {
                wasm_backend_description(other, python.is_some(), cli.timeout, cli.output_limit)
            }
        };
        let other_description = assemble_description(
            &backend_text,
            None,
            cli.tool_instruction_override.as_deref(),
            cli.extended_tool_instruction.as_deref(),
        )?;
        let wasm = WasmConfig {
            python,
            max_memory_bytes: usize::try_from(cli.wasm_max_memory << 20).unwrap_or(usize::MAX),
            shell_memory_bytes: parse_shell_memory(&cli.wasm_shell_memory)?,
            job_output_budget_bytes: parse_job_output_budget(&cli.wasm_job_output_budget)?,
            fuel: cli.wasm_fuel,
            cache_dir: cli
                .wasm_cache_dir
                .clone()
                .unwrap_or_else(|| state_dir.join("cache")),
        };
        let endpoint = parse_endpoint(cli.docker_host.as_deref())?;
        // A host directory is only the engine's too when the engine is a local socket.
        let channel_dir = (cli.supervisor_channel == crate::cli::ChannelArg::Auto
            && !matches!(endpoint, DockerEndpoint::Http(_)))
        .then(|| state_dir.join("run"));
        let docker = DockerConfig {
            podman,
            endpoint,
            channel_dir,
            image,
            nano_cpus: cli.cpu.as_deref().map(parse_cpu).transpose()?,
            memory_bytes: cli.memory.as_deref().map(parse_memory).transpose()?,
            disk_bytes: cli.disk.as_deref().map(parse_disk).transpose()?,
            network: egress.policy.clone(),
            egress_pins: egress.resolve.clone(),
            egress_dns: egress.dns,
            egress_secrets: egress.secrets.clone(),
            egress_ca_file: egress.ca_file.clone(),
            run_flags: parse_docker_run_flags(&cli.docker_run_flags)?,
            warm_pool: usize::try_from(cli.warm_pool).unwrap_or(0),
        };
        egress.writable_root(docker.run_flags.read_only)?;
        let supervisor = supervisor_source(cli.supervisor.as_deref())?;
        let executor = match cli.mode {
            None | Some(crate::cli::ModeArg::Completions) => None,
            Some(crate::cli::ModeArg::Executor) => {
                let secret = cli
                    .executor_secret
                    .clone()
                    .filter(|s| s.trim().len() >= shared::executor_api::MIN_SECRET_LEN)
                    .ok_or(ConfigError::ExecutorSecret)?;
                let listen = cli
                    .listen
                    .parse()
                    .map_err(|_| ConfigError::BadListen(cli.listen.clone()))?;
                let name = cli
                    .executor_name
                    .as_deref()
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .ok_or(ConfigError::ExecutorName)?;
                Some(ExecutorConfig {
                    listen,
                    secret: secret.trim().to_owned(),
                    name: name.to_owned(),
                    idle_timeout_secs: cli.executor_idle_timeout,
                })
            }
        };
        Ok(Self {
            executor,
            transport: cli.transport,
            host,
            port: cli.port,
            default_timeout_secs: cli.timeout,
            output_limit: cli.output_limit,
            file_limit: cli.file_limit,
            session_timeout_secs: cli.session_timeout,
            http: http_limits(cli),
            max_sessions: usize::try_from(cli.http_max_sessions).unwrap_or(usize::MAX),
            max_sessions_per_principal: usize::try_from(
                cli.http_max_sessions_per_principal
                    .min(cli.http_max_sessions),
            )
            .unwrap_or(usize::MAX),
            max_computers_per_principal: usize::try_from(cli.max_computers_per_principal)
                .unwrap_or(usize::MAX),
            snapshot_limit: usize::try_from(cli.snapshot_limit).unwrap_or(usize::MAX),
            auth_token,
            shell: cli.shell.clone(),
            tool_name: cli.tool_name.clone(),
            lifecycle_tools: groups.lifecycle || lifecycle_enabled(lifecycle_env),
            jobs_tools: groups.jobs,
            files_tools: groups.files,
            snapshots_tools: groups.snapshots,
            exec_description,
            other_description,
            backend,
            wasm,
            state_dir,
            docker,
            supervisor,
            egress,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cfg(args: &[&str]) -> Result<Config, ConfigError> {
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        Config::from_cli(&Cli::try_parse_from(argv).unwrap(), None)
    }

    #[test]
    fn defaults_match_the_seed() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.port, 8435);
        assert_eq!(c.default_timeout_secs, 120);
        assert_eq!(c.output_limit, 2_097_152);
        assert_eq!(c.session_timeout_secs, 300);
        assert_eq!(c.docker.image, DEFAULT_IMAGE);
        assert_eq!(c.docker.network, shared::egress::Policy::All);
        assert_eq!(c.egress, EgressConfig::default());
        assert_eq!(c.tool_name, "terminal_execute");
        assert!(!c.lifecycle_tools);
        assert_eq!(c.http, HttpLimits::default());
        assert_eq!((c.max_sessions, c.max_sessions_per_principal), (1024, 256));
    }

    /// Issue 46: an executor accepts only tokens for its own name (SPEC §5), so it must
    /// know it; and its idle reaper's timeout is an hour unless set.
    #[test]
    fn issue_46_executor_mode_needs_its_name() {
        let secret = "--executor-secret=0123456789abcdef0123456789abcdef";
        assert!(matches!(
            cfg(&["executor", secret]),
            Err(ConfigError::ExecutorName)
        ));
        assert!(matches!(
            cfg(&["executor", secret, "--executor-name= "]),
            Err(ConfigError::ExecutorName)
        ));
        let ex = |args: &[&str]| cfg(args).unwrap().executor.unwrap();
        let named = ex(&["executor", secret, "--executor-name=fra-1"]);
        assert_eq!(
            (named.name.as_str(), named.idle_timeout_secs),
            ("fra-1", 3600)
        );
        let old_flag = ex(&["executor", secret, "--executor-audience=fra-2"]);
        assert_eq!(old_flag.name, "fra-2");
        let idle = ex(&[
            "executor",
            secret,
            "--executor-name=a",
            "--executor-idle-timeout=90",
        ]);
        assert_eq!(idle.idle_timeout_secs, 90);
    }

    #[test]
    fn http_limits_are_checked() {
        let c = cfg(&[
            "--http-max-body=4096",
            "--http-header-timeout=2",
            "--http-body-timeout=3",
            "--http-idle-timeout=4",
            "--http-max-sessions=5",
        ])
        .unwrap();
        assert_eq!(c.http.max_body, 4096);
        assert_eq!(c.http.header_timeout, Duration::from_secs(2));
        assert_eq!(c.http.body_timeout, Duration::from_secs(3));
        assert_eq!(c.http.idle_timeout, Duration::from_secs(4));
        assert_eq!((c.max_sessions, c.max_sessions_per_principal), (5, 5));
        for bad in [
            "--http-max-body=0",
            "--http-max-body=16m",
            "--http-header-timeout=0",
            "--http-body-timeout=-1",
            "--http-idle-timeout=0",
            "--http-max-sessions=0",
            "--http-max-sessions-per-principal=0",
        ] {
            let e = Cli::try_parse_from(["x", bad]).map(|_| ()).unwrap_err();
            let name = bad.split('=').next().unwrap();
            assert!(e.to_string().contains(name), "{bad}: {e}");
        }
    }

    #[test]
    fn wasm_backends_and_their_flags() {
        assert_eq!(cfg(&[]).unwrap().backend, BackendChoice::Auto);
        assert_eq!(
            cfg(&["--engine", "podman"]).unwrap().backend,
            BackendChoice::Docker
        );
        assert_eq!(
            cfg(&["--backend", "docker"]).unwrap().backend,
            BackendChoice::Docker
        );
        let c = cfg(&["--backend", "go_busybox", "--wasm-max-memory", "64"]).unwrap();
        assert_eq!(c.backend, BackendChoice::Toolbox);
        assert_eq!(c.wasm.max_memory_bytes, 64 << 20);
        assert!(c.other_description.contains("WebAssembly"));
        let c = cfg(&[
            "--backend",
            "wasm",
            "--wasm-path",
            "/m/x.wasm",
            "--wasm-fuel",
            "5",
        ])
        .unwrap();
        assert_eq!(c.backend, BackendChoice::Custom("/m/x.wasm".into()));
        assert_eq!(c.wasm.fuel, Some(5));
        assert!(c.other_description.contains("x.wasm"));
        assert!(matches!(
            cfg(&["--backend", "wasm"]),
            Err(ConfigError::WasmPathMissing)
        ));
        assert!(matches!(
            cfg(&["--wasm-path", "/m/x.wasm"]),
            Err(ConfigError::WasmPathUnused)
        ));
        assert!(matches!(
            cfg(&["--backend", "go_busybox", "--wasm-max-memory", "0"]),
            Err(ConfigError::BadWasmMemory(0))
        ));
        assert!(matches!(
            cfg(&["--backend", "go_busybox", "--wasm-fuel", "0"]),
            Err(ConfigError::BadWasmFuel)
        ));
    }

    #[test]
    fn the_warm_pool_is_for_docker_computers_of_a_local_server() {
        assert_eq!(cfg(&[]).unwrap().docker.warm_pool, 0);
        assert_eq!(cfg(&["--warm-pool", "8"]).unwrap().docker.warm_pool, 8);
        assert!(Cli::try_parse_from(["x", "--warm-pool", "65"]).is_err());
        assert!(Cli::try_parse_from(["x", "--warm-pool", "-1"]).is_err());
        assert!(matches!(
            cfg(&["--backend", "go_busybox", "--warm-pool", "2"]),
            Err(ConfigError::WarmPoolBackend("go_busybox"))
        ));
        assert!(matches!(
            cfg(&["--backend", "docker", "--warm-pool", "2", "executor"]),
            Err(ConfigError::WarmPoolExecutor)
        ));
        // Issue 19: the shell's memory budget, 64 MiB by default; MiB or a size.
        let shell = |v: &str| cfg(&["--backend", "go_busybox", "--wasm-shell-memory", v]);
        assert_eq!(
            cfg(&["--backend", "go_busybox"])
                .unwrap()
                .wasm
                .shell_memory_bytes,
            64 << 20
        );
        assert_eq!(shell("16").unwrap().wasm.shell_memory_bytes, 16 << 20);
        assert_eq!(shell("512m").unwrap().wasm.shell_memory_bytes, 512 << 20);
        assert_eq!(shell("1g").unwrap().wasm.shell_memory_bytes, 1 << 30);
        for bad in ["0", "512k", "5000", "8g", "lots"] {
            assert!(
                matches!(shell(bad), Err(ConfigError::BadShellMemory(_))),
                "{bad}"
            );
        }
        // Issue 46: the budget of WASM jobs' unread output, 256 MiB by default.
        let budget = |v: &str| cfg(&["--backend", "go_busybox", "--wasm-job-output-budget", v]);
        assert_eq!(
            cfg(&["--backend", "go_busybox"])
                .unwrap()
                .wasm
                .job_output_budget_bytes,
            256 << 20
        );
        assert_eq!(budget("8").unwrap().wasm.job_output_budget_bytes, 8 << 20);
        assert_eq!(budget("2g").unwrap().wasm.job_output_budget_bytes, 2 << 30);
        for bad in ["0", "512k", "70000", "65g", "lots"] {
            assert!(
                matches!(budget(bad), Err(ConfigError::BadJobOutputBudget(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn issue_46_disk_takes_a_size_of_at_least_64m() {
        let disk = |v: &str| cfg(&[&format!("--disk={v}")]).map(|c| c.docker.disk_bytes);
        assert_eq!(disk("10g").ok().flatten(), Some(10 << 30));
        assert_eq!(disk("512m").ok().flatten(), Some(512 << 20));
        assert_eq!(cfg(&[]).ok().and_then(|c| c.docker.disk_bytes), None);
        for bad in ["1m", "0", "-5g", "lots"] {
            assert!(matches!(disk(bad), Err(ConfigError::BadDisk(_))), "{bad}");
        }
    }

    #[test]
    fn start_up_refusals() {
        assert!(matches!(
            cfg(&[
                "--tool-instruction-override",
                "a",
                "--extended-tool-instruction",
                "b"
            ]),
            Err(ConfigError::Description(DescriptionError::BothGiven))
        ));
        assert!(matches!(
            cfg(&["--image", "alpine"]),
            Err(ConfigError::Description(
                DescriptionError::CustomImageNeedsOverride(_)
            ))
        ));
        assert!(cfg(&["--image", "alpine", "--tool-instruction-override", "Alpine"]).is_ok());
        assert!(matches!(
            cfg(&["--transport", "http", "--host", "0.0.0.0"]),
            Err(ConfigError::PublicWithoutToken(_))
        ));
        assert!(
            cfg(&[
                "--transport",
                "http",
                "--host",
                "0.0.0.0",
                "--auth-token",
                "t"
            ])
            .is_ok()
        );
        assert!(
            cfg(&[
                "--transport",
                "http",
                "--host",
                "0.0.0.0",
                "--allow-unauthenticated-http"
            ])
            .is_ok()
        );
        assert!(matches!(
            cfg(&["--engine", "lxc"]),
            Err(ConfigError::BadEngine(_))
        ));
        assert!(matches!(
            cfg(&["--docker-host", "ssh://me@h"]),
            Err(ConfigError::BadDockerHost(..))
        ));
        assert!(matches!(cfg(&["--cpu=-1"]), Err(ConfigError::BadCpu(_))));
        assert!(matches!(
            cfg(&["--memory", "1k"]),
            Err(ConfigError::BadMemory(_))
        ));
        assert!(matches!(
            cfg(&["--tool-name", "a b"]),
            Err(ConfigError::BadToolName(_))
        ));
        assert!(matches!(
            cfg(&["--shell", "bash"]),
            Err(ConfigError::BadShell(_))
        ));
    }

    #[test]
    fn sizes_and_endpoints() {
        assert_eq!(parse_size("512m"), Some(512 << 20));
        assert_eq!(parse_size("2G"), Some(2 << 30));
        assert_eq!(parse_size("1.5g"), Some(3 << 29));
        assert_eq!(parse_size("100mb"), Some(100 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size("-1m"), None);
        assert_eq!(
            parse_endpoint(Some("unix:///s.sock")).unwrap(),
            DockerEndpoint::Unix("/s.sock".into())
        );
        assert_eq!(
            parse_endpoint(Some("tcp://h:2375")).unwrap(),
            DockerEndpoint::Http("tcp://h:2375".into())
        );
        assert_eq!(parse_endpoint(None).unwrap(), DockerEndpoint::Default);
        assert!(parse_endpoint(Some("npipe:////./pipe/docker")).is_err());
    }

    /// A fresh directory under the system's temporary one, removed by the caller.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("msc-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn executor_mode_refuses_a_short_secret_or_a_listen_that_is_not_ip_and_port() {
        let name = "--executor-name=fra-1";
        let short = format!("--executor-secret=  {}  ", "s".repeat(31));
        assert!(matches!(
            cfg(&["executor", &short, name]),
            Err(ConfigError::ExecutorSecret)
        ));
        let good = format!("--executor-secret= {} ", "s".repeat(32));
        let ex = cfg(&["executor", &good, name]).unwrap().executor.unwrap();
        assert_eq!(ex.secret, "s".repeat(32), "trimmed");
        assert_eq!(ex.listen, "127.0.0.1:8436".parse().unwrap());
        assert!(!format!("{ex:?}").contains(&"s".repeat(32)), "{ex:?}");
        let e = cfg(&["executor", &good, name, "--listen=localhost:8436"]).unwrap_err();
        assert!(matches!(e, ConfigError::BadListen(ref l) if l == "localhost:8436"));
        assert!(
            e.to_string().starts_with("--listen \"localhost:8436\""),
            "{e}"
        );
        // Without executor mode the executor flags are not checked and not used.
        assert!(cfg(&[&short]).unwrap().executor.is_none());
    }

    #[test]
    fn an_auth_token_of_spaces_is_refused_and_a_good_one_is_trimmed() {
        assert!(matches!(
            cfg(&["--auth-token=   "]),
            Err(ConfigError::EmptyToken)
        ));
        let c = cfg(&["--auth-token= tok \n"]).unwrap();
        assert_eq!(c.auth_token.as_deref(), Some("tok"));
    }

    #[test]
    fn a_host_must_be_an_ip_and_a_public_one_names_its_port_when_refused() {
        let e = cfg(&["--host=localhost"]).unwrap_err();
        assert!(matches!(e, ConfigError::BadHost(ref h) if h == "localhost"));
        assert!(e.to_string().contains("not an IP address"), "{e}");
        assert_eq!(
            cfg(&["--host= ::1 "]).unwrap().host,
            "::1".parse::<IpAddr>().unwrap()
        );
        // Loopback over HTTP needs no token; a public address does, and says which.
        assert!(cfg(&["--transport=http", "--host=::1"]).is_ok());
        let e = cfg(&["--transport=http", "--host=0.0.0.0", "--port=9000"]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("refusing to listen on 0.0.0.0:9000 without authentication"),
            "{e}"
        );
        // An IPv6 address is written as one listens on it.
        let e = cfg(&["--transport=http", "--host=::", "--port=9000"]).unwrap_err();
        assert!(e.to_string().contains("listen on [::]:9000 "), "{e}");
        // Over stdio the host is not listened on at all.
        assert!(cfg(&["--host=0.0.0.0"]).is_ok());
    }

    #[test]
    fn docker_host_forms_and_why_the_others_are_refused() {
        assert_eq!(
            parse_endpoint(Some("/run/podman/podman.sock")).unwrap(),
            DockerEndpoint::Unix("/run/podman/podman.sock".into())
        );
        assert_eq!(
            parse_endpoint(Some(" http://h:2375 ")).unwrap(),
            DockerEndpoint::Http("tcp://h:2375".into())
        );
        assert_eq!(parse_endpoint(Some("  ")).unwrap(), DockerEndpoint::Default);
        for (raw, why) in [
            ("unix://", "a unix socket path is needed"),
            ("tcp://", "a host:port is needed"),
            ("http://", "a host:port is needed"),
            ("https://h:2376", "TLS endpoints are not supported"),
            ("ssh://me@h", "ssh -NL"),
            (
                "h:2375",
                "use unix:///path/to/docker.sock or tcp://host:port",
            ),
        ] {
            let e = parse_endpoint(Some(raw)).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--docker-host {raw:?}: ")), "{e}");
            assert!(e.contains(why), "{raw}: {e}");
        }
    }

    #[test]
    fn the_supervisor_socket_directory_is_used_only_with_a_local_engine() {
        let dir = |args: &[&str]| {
            let mut all = vec!["--state-dir=/srv/msc"];
            all.extend_from_slice(args);
            cfg(&all).unwrap().docker.channel_dir
        };
        let run = Some(PathBuf::from("/srv/msc/run"));
        assert_eq!(dir(&[]), run);
        assert_eq!(dir(&["--docker-host=unix:///x.sock"]), run);
        assert_eq!(dir(&["--docker-host=tcp://h:2375"]), None);
        assert_eq!(dir(&["--supervisor-channel=relay"]), None);
        let c = cfg(&["--state-dir=/srv/msc"]).unwrap();
        assert_eq!(c.wasm.cache_dir, PathBuf::from("/srv/msc/cache"));
        let c = cfg(&["--state-dir=/srv/msc", "--wasm-cache-dir=/c"]).unwrap();
        assert_eq!(c.wasm.cache_dir, PathBuf::from("/c"));
    }

    #[test]
    fn cpus_become_nano_cpus_and_nonsense_is_refused() {
        let cpus = |v: &str| cfg(&[&format!("--cpu={v}")]).map(|c| c.docker.nano_cpus);
        assert_eq!(cpus("1.5").unwrap(), Some(1_500_000_000));
        assert_eq!(cpus(" 2 ").unwrap(), Some(2_000_000_000));
        assert_eq!(cpus("0.001").unwrap(), Some(1_000_000));
        assert_eq!(cpus("1024").unwrap(), Some(1_024_000_000_000));
        assert_eq!(cfg(&[]).unwrap().docker.nano_cpus, None);
        for bad in ["0", "1025", "NaN", "inf", "two", "1,5"] {
            let e = cpus(bad).unwrap_err();
            assert!(matches!(e, ConfigError::BadCpu(ref v) if v == bad), "{bad}");
            assert!(e.to_string().starts_with(&format!("--cpu {bad:?}")), "{e}");
        }
    }

    #[test]
    fn tool_groups_come_from_tools_and_an_unknown_one_is_named() {
        let on = |c: Config| {
            (
                c.jobs_tools,
                c.files_tools,
                c.lifecycle_tools,
                c.snapshots_tools,
            )
        };
        assert_eq!(
            on(cfg(&["--tools=jobs, FILES"]).unwrap()),
            (true, true, false, false)
        );
        assert_eq!(on(cfg(&["--tools=all"]).unwrap()), (true, true, true, true));
        assert_eq!(
            on(cfg(&["--tools="]).unwrap()),
            (false, false, false, false)
        );
        assert_eq!(
            on(cfg(&["--tools=snapshots"]).unwrap()),
            (false, false, false, true)
        );
        let cli = Cli::try_parse_from(["x", "--tools=exec"]).unwrap();
        assert_eq!(
            on(Config::from_cli(&cli, Some("true")).unwrap()),
            (false, false, true, false),
            "ENABLE_LIFECYCLE_TOOLS adds the lifecycle group"
        );
        let e = cfg(&["--tools=jobs,ports"]).unwrap_err();
        assert!(matches!(e, ConfigError::Tools(ref g) if g.0 == "ports"));
        assert!(
            e.to_string()
                .starts_with("--tools: unknown tool group \"ports\""),
            "{e}"
        );
        assert_eq!(cfg(&[]).unwrap().snapshot_limit, 20);
        assert_eq!(cfg(&["--snapshot-limit=3"]).unwrap().snapshot_limit, 3);
        assert!(Cli::try_parse_from(["x", "--snapshot-limit=0"]).is_err());
    }

    #[test]
    fn a_tool_name_is_1_to_64_safe_characters() {
        assert_eq!(
            cfg(&["--tool-name=sandbox_exec"]).unwrap().tool_name,
            "sandbox_exec"
        );
        let longest = "a-".repeat(32);
        assert_eq!(
            cfg(&[&format!("--tool-name={longest}")]).unwrap().tool_name,
            longest
        );
        for bad in [format!("{longest}a"), "run.cmd".into(), "é".into()] {
            let e = cfg(&[&format!("--tool-name={bad}")]).unwrap_err();
            assert!(
                matches!(e, ConfigError::BadToolName(ref n) if *n == bad),
                "{bad}"
            );
        }
    }

    #[test]
    fn no_network_is_applied_and_described_and_the_last_flag_wins() {
        let c = cfg(&["--no-network"]).unwrap();
        assert_eq!(c.docker.network, shared::egress::Policy::None);
        assert!(
            c.exec_description.contains("no network access"),
            "{}",
            c.exec_description
        );
        let c = cfg(&["--no-network", "--network"]).unwrap();
        assert_eq!(c.docker.network, shared::egress::Policy::All);
        assert!(c.exec_description.contains("network access on"));
    }

    #[test]
    fn issue_38_an_allow_list_is_the_servers_policy_and_the_description_says_it() {
        let c = cfg(&["--egress-allow=pypi.org, *.npmjs.org"]).unwrap();
        let policy = shared::egress::Policy::allow(["pypi.org", "*.npmjs.org"]).unwrap();
        assert_eq!(c.egress.policy, policy);
        assert_eq!(c.docker.network, policy);
        assert!(
            c.exec_description.contains(
                "network: only pypi.org, *.npmjs.org (others are blocked and reported in network_blocked)"
            ),
            "{}",
            c.exec_description
        );
        assert!(matches!(
            cfg(&["--no-network", "--egress-allow=pypi.org"]),
            Err(ConfigError::Egress(EgressError::NoNetworkWithAllow))
        ));
        // Pins, a resolver and a CA need no allow list; a secret does.
        let c = cfg(&["--egress-resolve=a.test=10.0.0.1", "--egress-dns=10.0.0.2"]).unwrap();
        assert_eq!(c.egress.policy, shared::egress::Policy::All);
        assert_eq!(c.egress.resolve.len(), 1);
        let e = cfg(&["--egress-secret=PATH=api.github.com"]).unwrap_err();
        assert!(
            matches!(e, ConfigError::Egress(EgressError::SecretWithoutAllow)),
            "{e}"
        );
        // A secret goes to allowed hosts only, and needs a writable root (the gate's CA
        // goes into the computer's trust stores).
        let c = cfg(&[
            "--egress-allow=api.github.com",
            "--egress-secret=PATH=api.github.com",
        ])
        .unwrap();
        assert_eq!(c.docker.egress_secrets.len(), 1);
        let e = cfg(&[
            "--egress-allow=pypi.org",
            "--egress-secret=PATH=api.github.com",
        ])
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("its host api.github.com is not allowed by --egress-allow"),
            "{e}"
        );
        let e = cfg(&[
            "--egress-allow=api.github.com",
            "--egress-secret=PATH=api.github.com",
            "--docker-run-flag=--read-only",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("--read-only"), "{e}");
        let e = cfg(&[
            "--egress-allow=api.github.com",
            "--egress-secret=MSC_TEST_SURELY_UNSET_38=api.github.com",
        ])
        .unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--egress-secret MSC_TEST_SURELY_UNSET_38: the environment variable MSC_TEST_SURELY_UNSET_38 is not set"
            ),
            "{e}"
        );
    }

    #[test]
    fn issue_38_what_a_backend_cannot_enforce_is_refused_at_start() {
        let allow = "--egress-allow=pypi.org";
        // Docker/Podman (or the engine found at start) enforce it all.
        assert!(cfg(&[allow]).is_ok());
        assert!(cfg(&["--backend=docker", allow]).is_ok());
        assert!(cfg(&["--engine=podman", allow]).is_ok());
        // WASM computers have no network: `none` is fine, an allow list is meaningless.
        assert!(cfg(&["--backend=go_busybox", "--no-network"]).is_ok());
        let e = cfg(&["--backend=go_busybox", allow]).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Egress(EgressError::Backend {
                    flag: "--egress-allow",
                    backend: "go_busybox",
                    ..
                })
            ),
            "{e}"
        );
        assert!(e.to_string().contains("no network at all"), "{e}");
        assert!(e.to_string().contains("use --backend docker"), "{e}");
        let e = cfg(&[
            "--backend=go_busybox",
            allow,
            "--egress-secret=PATH=pypi.org",
        ])
        .unwrap_err();
        assert!(e.to_string().starts_with("--egress-secret cannot"), "{e}");
        // Fly has no egress control: neither an allow list nor none.
        let fly = |extra: &str| cfg(&["--backend=fly", "--fly-token=t", extra]);
        for flag in [allow, "--no-network"] {
            let e = fly(flag).unwrap_err();
            assert!(
                e.to_string()
                    .contains("Fly Machines have no egress control"),
                "{flag}: {e}"
            );
        }
        assert!(fly("--network").is_ok());
        // E2B holds allow lists and no network in its own rules; not a rule with a port,
        // nor a secret.
        let e2b = |extra: &[&str]| {
            let mut args = vec!["--backend=e2b", "--e2b-api-key=k"];
            args.extend_from_slice(extra);
            cfg(&args)
        };
        assert!(e2b(&[allow]).is_ok());
        assert!(e2b(&["--no-network"]).is_ok());
        let e = e2b(&["--egress-allow=pypi.org,github.com:22"]).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "--egress-allow github.com:22: e2b allow lists name hosts and networks without ports"
            ),
            "{e}"
        );
        let e = e2b(&[allow, "--egress-secret=PATH=pypi.org"]).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Egress(EgressError::Backend {
                    backend: "e2b",
                    flag: "--egress-secret",
                    ..
                })
            ),
            "{e}"
        );
        // Modal likewise (NetworkAccess).
        let modal = |extra: &[&str]| {
            let mut args = vec![
                "--backend=modal",
                "--modal-token-id=id",
                "--modal-token-secret=secret",
            ];
            args.extend_from_slice(extra);
            cfg(&args)
        };
        assert!(modal(&["--no-network"]).is_ok());
        assert!(modal(&[allow]).is_ok());
        let e = modal(&["--egress-allow=github.com:22"]).unwrap_err();
        assert!(
            e.to_string().contains("modal allow lists name hosts"),
            "{e}"
        );
        let e = modal(&[allow, "--egress-secret=PATH=pypi.org"]).unwrap_err();
        assert!(
            matches!(
                e,
                ConfigError::Egress(EgressError::Backend {
                    flag: "--egress-secret",
                    backend: "modal",
                    ..
                })
            ),
            "{e}"
        );
    }

    #[test]
    fn the_supervisor_is_off_with_none_and_a_missing_file_is_named() {
        for off in ["--supervisor=none", "--supervisor= none ", "--supervisor="] {
            assert_eq!(
                cfg(&[off]).unwrap().supervisor,
                SupervisorSource::Off,
                "{off}"
            );
        }
        let e = cfg(&["--supervisor=/nonexistent/msc-supervisor"]).unwrap_err();
        assert!(
            matches!(e, ConfigError::BadSupervisor(ref p) if p == "/nonexistent/msc-supervisor")
        );
        assert!(e.to_string().contains("`none`"), "{e}");
        let dir = scratch("supervisor");
        let file = dir.join("msc-supervisor");
        std::fs::write(&file, b"\x7fELF").unwrap();
        let picked = cfg(&[&format!("--supervisor={}", file.display())]).map(|c| c.supervisor);
        // A directory is not a supervisor.
        let a_dir = cfg(&[&format!("--supervisor={}", dir.display())]).map(|c| c.supervisor);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(picked.unwrap(), SupervisorSource::File(file));
        assert!(matches!(a_dir, Err(ConfigError::BadSupervisor(_))));
    }

    #[test]
    fn cloud_backends_check_their_settings_at_start_up() {
        let fly = |mem: &str| {
            cfg(&[
                "--backend=fly",
                "--fly-token=t",
                &format!("--fly-memory={mem}"),
            ])
        };
        let e = fly("255").unwrap_err();
        assert!(matches!(e, ConfigError::BadFlyMemory(255)));
        assert_eq!(e.to_string(), "--fly-memory 255 must be at least 256 (MB)");
        let c = fly("256").unwrap();
        assert_eq!(c.backend.name(), "fly");
        assert!(
            c.other_description.contains("256 MB"),
            "{}",
            c.other_description
        );
        let modal = |extra: &str| {
            cfg(&[
                "--backend=modal",
                "--modal-token-id=id",
                "--modal-token-secret=secret",
                extra,
            ])
        };
        assert!(matches!(
            modal("--modal-cpu=0.1"),
            Err(ConfigError::BadModalCpu(_))
        ));
        assert!(matches!(
            modal("--modal-cpu=64.5"),
            Err(ConfigError::BadModalCpu(_))
        ));
        assert!(matches!(
            modal("--modal-memory=127"),
            Err(ConfigError::BadModalMemory(127))
        ));
        assert_eq!(modal("--modal-cpu=0.125").unwrap().backend.name(), "modal");
        let e2b = |extra: &str| cfg(&["--backend=e2b", "--e2b-api-key=k", extra]);
        let e = e2b("--e2b-metadata=team").unwrap_err();
        assert_eq!(e.to_string(), "--e2b-metadata \"team\" must be KEY=VALUE");
        let BackendChoice::E2b(c) = e2b("--e2b-env=A=1,B=2").unwrap().backend else {
            panic!("not e2b")
        };
        assert_eq!(c.env, [("A".into(), "1".into()), ("B".into(), "2".into())]);
        let BackendChoice::E2b(c) = e2b("--e2b-sandbox-timeout=0").unwrap().backend else {
            panic!("not e2b")
        };
        assert_eq!(c.sandbox_timeout_secs, 1);
        // A key of spaces is no key, whatever the environment holds.
        assert!(matches!(
            cfg(&["--backend=e2b", "--e2b-api-key=  "]),
            Err(ConfigError::E2bKey)
        ));
    }

    #[test]
    fn a_wasm_python_that_is_not_webassembly_is_refused_saying_why() {
        let dir = scratch("python");
        let module = |name: &str, bytes: &[u8]| {
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let good = module("good.wasm", b"\0asm\x01\0\0\0");
        let text = module("text.wasm", b"print(1)\n");
        let short = module("short.wasm", b"\0a");
        let python = |p: &Path| {
            cfg(&[
                "--backend=go_busybox",
                &format!("--state-dir={}", dir.display()),
                &format!("--wasm-python={}", p.display()),
            ])
        };
        let why = |p: &Path| match python(p) {
            Err(ConfigError::BadWasmPython(got, why)) => {
                assert_eq!(got, p);
                why
            }
            other => panic!("{}: {other:?}", p.display()),
        };
        let found_good = python(&good).map(|c| c.wasm.python);
        let no_magic = why(&text);
        let too_short = why(&short);
        let a_dir = why(&dir);
        let missing = python(&dir.join("missing.wasm")).is_err();
        // In the state directory, a module that is not WebAssembly is skipped, a good one used.
        let state = |bytes: &[u8]| {
            module(PYTHON_IN_STATE_DIR, bytes);
            cfg(&[
                "--backend=go_busybox",
                &format!("--state-dir={}", dir.display()),
            ])
            .map(|c| c.wasm.python)
        };
        let skipped = state(b"junk");
        let used = state(b"\0asm\x01\0\0\0");
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(found_good.unwrap(), Some(good));
        assert!(no_magic.contains("no \\0asm magic"), "{no_magic}");
        assert!(too_short.contains("too short"), "{too_short}");
        assert_eq!(a_dir, "not a file");
        assert!(missing);
        assert_eq!(skipped.unwrap(), None);
        assert_eq!(used.unwrap(), Some(dir.join(PYTHON_IN_STATE_DIR)));
    }

    #[test]
    fn lifecycle_env_is_trimmed_and_case_insensitive() {
        assert!(lifecycle_enabled(Some(" TRUE \n")));
        assert!(lifecycle_enabled(Some("true")));
        assert!(!lifecycle_enabled(Some("1")));
        assert!(!lifecycle_enabled(None));
    }
}

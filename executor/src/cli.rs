//! The command line: the seed's flags, same names and defaults (SPEC §4).
//!
//! Owns parsing only. Turning flags into a checked [`crate::config::Config`] is `config`'s job.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum BackendArg {
    Docker,
    E2b,
    Fly,
    GoBusybox,
    Modal,
    Wasm,
}

/// What the process serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ModeArg {
    /// The REST API a gateway calls (`shared::executor_api`), instead of MCP.
    Executor,
    /// Print a shell completion script (`completions bash|zsh|fish`) and exit.
    Completions,
}

/// The shells `completions` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionShell {
    fn generator(self) -> clap_complete::Shell {
        match self {
            Self::Bash => clap_complete::Shell::Bash,
            Self::Zsh => clap_complete::Shell::Zsh,
            Self::Fish => clap_complete::Shell::Fish,
        }
    }
}

/// `completions` without its shell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "completions needs the shell: `mcp-sandbox-computer-vm-for-ai completions bash` (or zsh, fish)"
)]
pub struct NoShell;

/// `completions SHELL`: the completion script of this command line for `shell`, or what
/// to pass when no shell was given.
pub fn completions(shell: Option<CompletionShell>) -> Result<Vec<u8>, NoShell> {
    let shell = shell.ok_or(NoShell)?;
    let mut cmd = <Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    clap_complete::generate(
        shell.generator(),
        &mut cmd,
        "mcp-sandbox-computer-vm-for-ai",
        &mut out,
    );
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    Stdio,
    Http,
}

/// `--supervisor-channel`: how the server reaches a computer's supervisor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ChannelArg {
    /// A unix socket in a per-computer host directory when the engine is on this host,
    /// else the relay.
    Auto,
    /// Always one long-lived exec through the engine.
    Relay,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FlyCpuKind {
    Shared,
    Performance,
}

/// MCP server providing isolated Linux sandboxes for LLM agent shell execution.
#[derive(Debug, Clone, Parser)]
#[command(name = "mcp-sandbox-computer-vm-for-ai", version, about)]
pub struct Cli {
    /// `executor`: serve the executor REST API for a gateway (--listen, --executor-secret)
    /// instead of MCP; `completions SHELL`: print a shell completion script.
    #[arg(value_enum)]
    pub mode: Option<ModeArg>,
    /// With `completions`: the shell to print a completion script for.
    #[arg(value_enum, value_name = "SHELL")]
    pub completion_shell: Option<CompletionShell>,

    // ---- executor mode ----
    /// Executor mode: address to listen on.
    #[arg(long, default_value = "127.0.0.1:8436", help_heading = "executor mode")]
    pub listen: String,
    /// Executor mode: the HS256 secret shared with the gateway (at least 32 bytes).
    #[arg(
        long,
        env = "MSC_EXECUTOR_SECRET",
        hide_env_values = true,
        help_heading = "executor mode"
    )]
    pub executor_secret: Option<String>,
    /// Executor mode: this executor's name, as the gateway's EXECUTORS names it: the
    /// audience of the tokens it accepts (a token for another executor is refused).
    #[arg(
        long,
        env = "MSC_EXECUTOR_NAME",
        alias = "executor-audience",
        help_heading = "executor mode"
    )]
    pub executor_name: Option<String>,
    /// Executor mode: seconds after which a temporary computer that no request named is
    /// removed (its gateway stopped asking for it: deleted it while this executor was out
    /// of reach, or lost it). Keep it longer than the gateway's SESSION_TIMEOUT_SECS.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=604_800), help_heading = "executor mode")]
    pub executor_idle_timeout: u64,

    // ---- core options ----
    /// Backend to use [default: docker, or the embedded WebAssembly toolbox (go_busybox) when
    /// no Docker/Podman engine is reachable].
    #[arg(long, value_enum, help_heading = "core options")]
    pub backend: Option<BackendArg>,
    /// MCP transport.
    #[arg(
        long,
        value_enum,
        default_value = "stdio",
        help_heading = "core options"
    )]
    pub transport: TransportArg,
    /// HTTP bind address (HTTP mode only).
    #[arg(long, default_value = "127.0.0.1", help_heading = "core options")]
    pub host: String,
    /// HTTP listen port (HTTP mode only).
    #[arg(long, default_value_t = 8435, help_heading = "core options")]
    pub port: u16,
    /// Default exec timeout in seconds.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400), help_heading = "core options")]
    pub timeout: u64,
    /// Max combined stdout+stderr bytes per exec (2 MiB).
    #[arg(long, default_value_t = 2_097_152, value_parser = clap::value_parser!(u64).range(1..=1_073_741_824), help_heading = "core options")]
    pub output_limit: u64,
    /// Largest file streamed by GET/PUT /v1/files over HTTP, in bytes (1 GiB).
    #[arg(long, default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(1..), help_heading = "core options")]
    pub file_limit: u64,
    /// Idle session timeout in seconds (HTTP sessions, and unused temporary computers of stateless callers).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..), help_heading = "core options")]
    pub session_timeout: u64,
    /// Bearer token for /mcp.
    #[arg(
        long,
        env = "KILNTAINERS_AUTH_TOKEN",
        hide_env_values = true,
        help_heading = "core options"
    )]
    pub auth_token: Option<String>,
    /// Explicitly allow a non-loopback listener without built-in auth.
    #[arg(long, help_heading = "core options")]
    pub allow_unauthenticated_http: bool,
    /// Shell binary for command mode (e.g. /bin/bash, /bin/sh). Default: /bin/bash, falling back to /bin/sh when the image has no bash.
    #[arg(long, help_heading = "core options")]
    pub shell: Option<String>,
    /// Enable network access in sandboxes (default).
    #[arg(long, overrides_with = "no_network", help_heading = "core options")]
    pub network: bool,
    /// Disable network access in sandboxes.
    #[arg(long, overrides_with = "network", help_heading = "core options")]
    pub no_network: bool,

    // ---- network policy (SPEC §3.11) ----
    /// Allow-list mode: computers may connect only where a rule says (repeatable, or
    /// comma-separated). A rule is a host name (pypi.org), `*.` plus a domain (any
    /// subdomain), either with an optional :port (without one, 80 and 443), an IP address
    /// or a CIDR. Loopback, link-local, private ranges and this host stay refused unless a
    /// rule names them exactly. Docker/Podman only.
    #[arg(
        long = "egress-allow",
        value_name = "RULE",
        env = "MSC_EGRESS_ALLOW",
        value_delimiter = ',',
        help_heading = "network policy"
    )]
    pub egress_allow: Vec<String>,
    /// Pins a name to an address for the egress gate, like curl's --resolve (repeatable):
    /// NAME=IP. A pinned name may reach a private address.
    #[arg(
        long = "egress-resolve",
        value_name = "NAME=IP",
        help_heading = "network policy"
    )]
    pub egress_resolve: Vec<String>,
    /// The egress gate's upstream DNS resolver: an IP address, or IP:port (port 53 by
    /// default) [default: the system's].
    #[arg(long, value_name = "ADDR", help_heading = "network policy")]
    pub egress_dns: Option<String>,
    /// A secret computers use without holding it (repeatable): NAME=HOST[,HOST...]. The
    /// value is read at start from this server's environment variable NAME; inside each
    /// computer NAME holds a placeholder that the egress gate replaces with the value in
    /// requests to the listed hosts only (headers, URL userinfo, query; HTTPS through a
    /// per-server CA the computers trust). Needs --egress-allow naming those hosts.
    #[arg(
        long = "egress-secret",
        value_name = "NAME=HOST[,HOST...]",
        help_heading = "network policy"
    )]
    pub egress_secret: Vec<String>,
    /// CA certificates (PEM) the egress gate also trusts when it verifies upstream servers
    /// (a private CA), besides the system roots.
    #[arg(long, value_name = "PATH", help_heading = "network policy")]
    pub egress_ca_file: Option<PathBuf>,
    /// Rename the exec tool (e.g. sandbox_exec, the older project's name).
    #[arg(long, default_value = shared::catalogue::EXEC_TOOL, help_heading = "core options")]
    pub tool_name: String,
    /// Tool groups to serve, comma-separated: exec (always on), jobs (terminal_job and
    /// `yield_ms` for long-running commands), files (computer_file_read, _write and
    /// _edit), lifecycle (the computer_* tools and the
    /// dashboard; ENABLE_LIFECYCLE_TOOLS=true adds it too), snapshots (computer_snapshot,
    /// _fork, _restore, computer_snapshots, computer_snapshot_delete), or all. Default:
    /// exec.
    #[arg(long, env = "MCP_SANDBOX_TOOLS", value_parser = any_string, help_heading = "core options")]
    pub tools: Option<String>,
    /// Where fly.json, permanent WASM computers and caches live.
    #[arg(long, env = "MCP_SANDBOX_STATE_DIR", help_heading = "core options")]
    pub state_dir: Option<PathBuf>,
    /// Most computers one principal may have (one --auth-token, stdio or the anonymous
    /// caller is one principal on a local server; a gateway's team in executor mode):
    /// its permanent computers and this server's temporaries. Past it, a call that would
    /// create one is refused until some are deleted.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000), help_heading = "core options")]
    pub max_computers_per_principal: u64,
    /// Snapshots kept per computer (group snapshots); past it, computer_snapshot is
    /// refused until one is deleted.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000), help_heading = "core options")]
    pub snapshot_limit: u64,

    // ---- http limits ----
    /// Largest JSON request body over HTTP (/mcp, the executor API), in bytes (16 MiB);
    /// bigger bodies get 413. /v1/files uploads are bounded by --file-limit instead.
    #[arg(long, default_value_t = 16 << 20, value_parser = clap::value_parser!(u64).range(1024..=1 << 30), help_heading = "http limits")]
    pub http_max_body: u64,
    /// Seconds a client may take to send a request's headers (from its first byte, or from
    /// connecting); slower clients are disconnected.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600), help_heading = "http limits")]
    pub http_header_timeout: u64,
    /// Seconds a request body may send nothing (and it must average 1 KiB/s after that
    /// long); a stalled body gets 408. Never applies to a request being answered.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600), help_heading = "http limits")]
    pub http_body_timeout: u64,
    /// Seconds a keep-alive connection may wait for its next request before it is closed.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400), help_heading = "http limits")]
    pub http_idle_timeout: u64,
    /// Most live MCP sessions (legacy `initialize` sessions of --transport http); past it,
    /// `initialize` gets 503 with Retry-After.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000), help_heading = "http limits")]
    pub http_max_sessions: u64,
    /// Most live MCP sessions of one principal (one --auth-token is one principal; without
    /// a token, every caller is the anonymous one); at most --http-max-sessions.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000), help_heading = "http limits")]
    pub http_max_sessions_per_principal: u64,

    /// The static in-computer supervisor (msc-supervisor, x86_64 musl) to place in new
    /// computers for millisecond exec. Default: the copy built into this binary, else
    /// msc-supervisor next to it; `none` turns it off (Engine API exec only).
    #[arg(long, env = "MSC_SUPERVISOR", value_parser = any_string, help_heading = "docker backend options")]
    pub supervisor: Option<String>,

    // ---- tool description ----
    /// Replace the entire terminal_execute tool description.
    #[arg(long, help_heading = "tool description")]
    pub tool_instruction_override: Option<String>,
    /// Append to the backend's default tool description.
    #[arg(long, help_heading = "tool description")]
    pub extended_tool_instruction: Option<String>,

    // ---- docker backend options ----
    /// Container engine: docker or podman. Choosing podman asks for containers: without
    /// --backend it waits for Podman instead of falling back to WebAssembly computers.
    #[arg(
        long,
        default_value = "docker",
        help_heading = "docker backend options"
    )]
    pub engine: String,
    /// Engine API address: unix:///path/to.sock, tcp://host:2375, http://host:2375.
    #[arg(long, env = "DOCKER_HOST", help_heading = "docker backend options")]
    pub docker_host: Option<String>,
    /// Docker image.
    #[arg(
        long,
        default_value = "debian:bookworm-slim",
        help_heading = "docker backend options"
    )]
    pub image: String,
    /// Docker CPU limit (e.g. "1.5").
    #[arg(long, help_heading = "docker backend options")]
    pub cpu: Option<String>,
    /// Docker memory limit (e.g. "512m").
    #[arg(long, help_heading = "docker backend options")]
    pub memory: Option<String>,
    /// Disk limit of each Docker computer's own files (its writable layer), e.g. "10g".
    /// Needs a storage driver with per-container quotas: overlay2 on xfs mounted with
    /// pquota, btrfs, zfs or devicemapper; the start is refused where the engine cannot
    /// (plain overlay2 on ext4). Default: none (a computer can fill the engine's disk).
    #[arg(long, help_heading = "docker backend options")]
    pub disk: Option<String>,
    /// Additional `docker run` flag. Repeatable (e.g. --docker-run-flag "--pids-limit=256").
    #[arg(
        long = "docker-run-flag",
        allow_hyphen_values = true,
        help_heading = "docker backend options"
    )]
    pub docker_run_flags: Vec<String>,
    /// Started computers to keep ready for new computers whose id the server picks (a call
    /// without computer_id, computer_create without one): one is handed out in
    /// milliseconds instead of being created and started. Each costs an idle container
    /// (a few MiB). At most 64; 0 turns it off.
    #[arg(long, env = "MSC_WARM_POOL", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=64), help_heading = "docker backend options")]
    pub warm_pool: u64,
    /// How execs reach a computer's supervisor: `auto` uses a unix socket in a per-computer
    /// directory under <state-dir>/run, bind-mounted into the computer, when the engine is
    /// a local socket (an exec then never crosses the engine), and falls back to `relay`
    /// (one long-lived exec through the engine) wherever that cannot work: a remote
    /// --docker-host, a server inside a container, a user namespace.
    #[arg(long, env = "MSC_SUPERVISOR_CHANNEL", value_enum, default_value_t = ChannelArg::Auto, help_heading = "docker backend options")]
    pub supervisor_channel: ChannelArg,

    // ---- fly backend options ----
    /// flyctl/fly executable (used only to print the exact login command).
    #[arg(long, default_value = "fly", help_heading = "fly backend options")]
    pub fly_cli: String,
    /// Fly App that owns sandbox Machines.
    #[arg(long, env = "FLY_APP_NAME", help_heading = "fly backend options")]
    pub fly_app: Option<String>,
    /// Fly API token (default: FLY_API_TOKEN or FLY_TOKEN).
    #[arg(long, hide_env_values = true, help_heading = "fly backend options")]
    pub fly_token: Option<String>,
    /// Base OCI image for sandbox Machines.
    #[arg(long, help_heading = "fly backend options")]
    pub fly_image: Option<String>,
    /// Region for newly created Machines.
    #[arg(long, env = "FLY_REGION", help_heading = "fly backend options")]
    pub fly_region: Option<String>,
    #[arg(long, value_enum, help_heading = "fly backend options")]
    pub fly_cpu_kind: Option<FlyCpuKind>,
    #[arg(long, help_heading = "fly backend options")]
    pub fly_cpus: Option<u32>,
    /// Memory per Machine in MB.
    #[arg(long, default_value_t = 512, help_heading = "fly backend options")]
    pub fly_memory: u32,
    /// Optional root filesystem size in GB.
    #[arg(long, help_heading = "fly backend options")]
    pub fly_rootfs_size: Option<u32>,
    /// Fly organization for the generated app [default: personal].
    #[arg(long, env = "FLY_ORG", help_heading = "fly backend options")]
    pub fly_org: Option<String>,
    /// Machines API base URL (a simulator or a proxy).
    #[arg(
        long,
        env = "FLY_API_URL",
        default_value = "https://api.machines.dev",
        hide = true
    )]
    pub fly_api_url: String,
    /// Commands whose timeout is longer run in the background on the machine and are polled.
    #[arg(
        long,
        env = "MSC_FLY_SYNC_EXEC_SECS",
        default_value_t = 50,
        hide = true
    )]
    pub fly_sync_exec_secs: u64,

    // ---- e2b backend options ----
    /// E2B API key (overrides E2B_API_KEY).
    #[arg(long, hide_env_values = true, help_heading = "e2b backend options")]
    pub e2b_api_key: Option<String>,
    /// E2B template name or ID.
    #[arg(long, default_value = "base", help_heading = "e2b backend options")]
    pub e2b_template: String,
    /// Sandbox lifetime timeout in seconds.
    #[arg(long, default_value_t = 3600, help_heading = "e2b backend options")]
    pub e2b_sandbox_timeout: u64,
    /// Metadata key=value pairs (repeatable).
    #[arg(long, help_heading = "e2b backend options")]
    pub e2b_metadata: Vec<String>,
    /// Environment variable key=value pairs (repeatable).
    #[arg(long, help_heading = "e2b backend options")]
    pub e2b_env: Vec<String>,
    /// E2B control-plane URL (a simulator or a proxy).
    #[arg(
        long,
        env = "E2B_API_URL",
        default_value = "https://api.e2b.app",
        hide = true
    )]
    pub e2b_api_url: String,
    /// One envd host for every sandbox (sent with E2b-Sandbox-Id), instead of per-sandbox hosts.
    #[arg(long, env = "E2B_SANDBOX_URL", hide = true)]
    pub e2b_sandbox_url: Option<String>,

    // ---- modal backend options ----
    /// Modal token id (default: MODAL_TOKEN_ID, else the active profile of ~/.modal.toml).
    #[arg(long, hide_env_values = true, help_heading = "modal backend options")]
    pub modal_token_id: Option<String>,
    /// Modal token secret (default: MODAL_TOKEN_SECRET, else ~/.modal.toml).
    #[arg(long, hide_env_values = true, help_heading = "modal backend options")]
    pub modal_token_secret: Option<String>,
    /// Modal app that holds the sandboxes (created when missing) [default: kilntainers].
    #[arg(long, help_heading = "modal backend options")]
    pub modal_app_name: Option<String>,
    /// CPU cores (fractional).
    #[arg(long, default_value_t = 1.0, help_heading = "modal backend options")]
    pub modal_cpu: f64,
    /// Memory in MiB.
    #[arg(long, default_value_t = 512, help_heading = "modal backend options")]
    pub modal_memory: u32,
    /// GPU type (e.g. "A10G", "H100").
    #[arg(long, help_heading = "modal backend options")]
    pub gpu: Option<String>,
    /// Geographic region (e.g. "us-east").
    #[arg(long, help_heading = "modal backend options")]
    pub region: Option<String>,
    /// Sandbox lifetime timeout in seconds (max 86400).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=86_400), help_heading = "modal backend options")]
    pub sandbox_timeout: u64,

    // ---- wasm backend options ----
    /// Path to the .wasm file to execute (required for the wasm backend).
    #[arg(long, help_heading = "wasm backend options")]
    pub wasm_path: Option<PathBuf>,
    /// Max WASM memory in MiB.
    #[arg(long, default_value_t = 256, help_heading = "wasm backend options")]
    pub wasm_max_memory: u64,
    /// Memory budget of the toolbox's host shell per command (variables, `$(...)` captures, words being built; beyond it the command ends with 137): MiB, or a size such as 64m or 1g (at least 1 MiB).
    #[arg(long, default_value = "64", help_heading = "wasm backend options")]
    pub wasm_shell_memory: String,
    /// CPython WASI module that runs `python3` and `python` on WASM toolbox computers (e.g. python-3.12.0.wasm) [default: <state-dir>/python.wasm when present].
    #[arg(long, env = "MSC_WASM_PYTHON", help_heading = "wasm backend options")]
    pub wasm_python: Option<PathBuf>,
    /// Most unread output of kept jobs (`yield_ms`) that WASM computers' jobs may hold in
    /// this server, all jobs together: MiB, or a size such as 512m or 1g (at least 1 MiB).
    /// Past it, the biggest buffers lose their oldest bytes (`dropped_bytes`).
    #[arg(long, default_value = "256", help_heading = "wasm backend options")]
    pub wasm_job_output_budget: String,
    /// WASM instruction fuel limit (default: unlimited).
    #[arg(long, help_heading = "wasm backend options")]
    pub wasm_fuel: Option<u64>,
    /// Where compiled WebAssembly modules are cached [default: <state-dir>/cache].
    #[arg(
        long,
        env = "MSC_WASM_CACHE_DIR",
        help_heading = "wasm backend options"
    )]
    pub wasm_cache_dir: Option<PathBuf>,
}

/// Accepts any value, the empty string included (clap refuses empty values by default).
fn any_string(s: &str) -> Result<String, std::convert::Infallible> {
    Ok(s.to_owned())
}

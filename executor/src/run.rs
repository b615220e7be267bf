//! Start-up and shutdown: build the backend and the dispatcher, serve a transport, and
//! remove this server's temporary computers on the way out (EOF, SIGTERM, SIGINT).

use std::sync::Arc;
use std::time::Duration;

use shared::capabilities::BackendKind;
use shared::catalogue::ToolNames;
use shared::mcp::{Dispatcher, ServerConfig};

use crate::backend::Backend;
use crate::cli::TransportArg;
use crate::computers::{Computers, ExecDefaults, SessionHost};
use crate::config::{BackendChoice, Config, EMBEDDED_SUPERVISOR, SupervisorSource};
use crate::docker::Docker;
use crate::http::{HttpState, SessionCaps, app};
use crate::instance::{self, host_name};
use crate::place::Place;

/// How often, after the start, leftovers of servers that died are looked for again.
const REAP_AGAIN: Duration = Duration::from_secs(30);

/// Errors that stop the server (printed by `main`).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "cannot use the state directory {path}: {source}; pass --state-dir (or MCP_SANDBOX_STATE_DIR) pointing at a writable directory"
    )]
    StateDir {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Docker(#[from] crate::docker::DockerError),
    #[error(transparent)]
    Wasm(#[from] crate::wasm::WasmError),
    #[error(transparent)]
    Fly(#[from] crate::fly::FlyBackendError),
    #[error(transparent)]
    E2b(#[from] crate::e2b::E2bBackendError),
    #[error(transparent)]
    Modal(#[from] crate::modal::ModalBackendError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("executor: {0}")]
    Executor(String),
    /// No engine answered, and the network flags need one (SPEC §3.11: never silently
    /// unenforced on the WebAssembly fallback).
    #[error(
        "no container engine is reachable ({why}), and {flag} needs Docker/Podman computers (their connections go through this server's egress gate; WebAssembly computers have no network to confine): start Docker or Podman, or drop {flag}"
    )]
    EgressNeedsEngine { flag: &'static str, why: String },
}

/// The dispatcher for a configuration.
pub fn dispatcher(config: &Config) -> Dispatcher {
    let groups = shared::catalogue::Groups {
        jobs: config.jobs_tools,
        files: config.files_tools,
        lifecycle: config.lifecycle_tools,
        snapshots: config.snapshots_tools,
    };
    let mut instructions = String::from(
        "Each computer is an isolated Linux machine with a stable id. Run commands with the exec tool; \
         omit computer_id to use your default computer (this session's; without sessions, your user's).",
    );
    if groups.jobs {
        instructions.push_str(
            " For builds, test suites, servers and interactive programs, pass `yield_ms`: a command still running then becomes a job that terminal_job follows (output, stdin, signals). Clients of the MCP Tasks extension get a task for such a command instead.",
        );
    }
    if groups.files {
        instructions.push_str(
            " Move files as bytes with computer_file_read, computer_file_write and computer_file_edit (4 MiB per call; bigger files in appended slices).",
        );
    }
    if groups.snapshots {
        instructions.push_str(
            " Before a risky change, keep the computer's files with computer_snapshot; go back with computer_restore, or try alternatives side by side with computer_fork.",
        );
    }
    instructions.push_str(&format!(" Tool groups: {}.", groups.names().join(", ")));
    Dispatcher::new(ServerConfig {
        name: "mcp-sandbox-computer-vm-for-ai".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        names: ToolNames::with_groups(config.tool_name.clone(), groups),
        exec_description: config.exec_description.clone(),
        instructions: Some(instructions),
        dashboard_html: Some(shared::dashboard::HTML.into()),
        // The Tasks extension rides on jobs (`computers/tasks.rs`).
        tasks: true,
    })
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// A WASM backend: the toolbox, or the user's module (checked now: a bad module stops the
/// start with a clear error).
async fn wasm_backend(
    config: &Config,
    custom: Option<&std::path::Path>,
) -> Result<Backend, RunError> {
    let wasm = crate::wasm::open(
        custom,
        &config.wasm,
        &config.state_dir,
        instance::current(),
        host_name(),
    )
    .await?;
    Ok(Backend::Wasm(wasm))
}

/// Runs the server until its transport ends or a signal arrives.
pub async fn run(mut config: Config) -> Result<(), RunError> {
    let backend = match config.backend.clone() {
        BackendChoice::Docker => Backend::Docker(docker_backend(&config).await?),
        BackendChoice::Toolbox => wasm_backend(&config, None).await?,
        BackendChoice::Custom(path) => wasm_backend(&config, Some(&path)).await?,
        BackendChoice::E2b(e2b) => {
            Backend::E2b(crate::e2b::open(*e2b, instance::current(), host_name()).await?)
        }
        BackendChoice::Modal(m) => {
            Backend::Modal(crate::modal::Modal::open(*m, instance::current(), host_name()).await?)
        }
        BackendChoice::Fly(fly) => Backend::Fly(
            crate::fly::open(*fly, &config.state_dir, instance::current(), host_name()).await?,
        ),
        BackendChoice::Auto => {
            let probe = tokio::time::timeout(Duration::from_secs(5), docker_backend(&config)).await;
            // Without an engine, what only the egress gate enforces stops the start.
            let gate = config.egress.needs_gate();
            match (probe, gate) {
                (Ok(Ok(docker)), _) => Backend::Docker(docker),
                // The engine is there but cannot hold --disk: say so, not "no engine".
                (
                    Ok(Err(e @ RunError::Docker(crate::docker::DockerError::DiskLimit { .. }))),
                    _,
                ) => {
                    return Err(e);
                }
                (Ok(Err(e)), Some(flag)) => {
                    return Err(RunError::EgressNeedsEngine {
                        flag,
                        why: e.to_string(),
                    });
                }
                (Err(_), Some(flag)) => {
                    return Err(RunError::EgressNeedsEngine {
                        flag,
                        why: "it did not answer within 5 s".into(),
                    });
                }
                (Ok(Err(e)), None) => {
                    eprintln!(
                        "mcp-sandbox-computer-vm-for-ai: no container engine is reachable ({e}); using the embedded WebAssembly toolbox (--backend go_busybox). Start Docker or Podman for full Linux computers, or pass --backend docker to require them."
                    );
                    wasm_backend(&config, None).await?
                }
                (Err(_), None) => {
                    eprintln!(
                        "mcp-sandbox-computer-vm-for-ai: the container engine did not answer within 5 s; using the embedded WebAssembly toolbox (--backend go_busybox). Pass --backend docker to wait for it instead."
                    );
                    wasm_backend(&config, None).await?
                }
            }
        }
    };
    if config.docker.warm_pool > 0 && backend.kind() != BackendKind::Docker {
        eprintln!(
            "mcp-sandbox-computer-vm-for-ai: --warm-pool is ignored: there is no container engine, and WebAssembly computers start in microseconds without one."
        );
    }
    if backend.kind() != BackendKind::Docker {
        config.exec_description = config.other_description.clone();
    }
    serve(config, backend).await
}

async fn docker_backend(config: &Config) -> Result<Docker, RunError> {
    let supervisor = match &config.supervisor {
        SupervisorSource::Off => None,
        SupervisorSource::Embedded => {
            tracing::info!("placing the built-in supervisor in new computers");
            Some(EMBEDDED_SUPERVISOR.to_vec())
        }
        SupervisorSource::File(path) => match std::fs::read(path) {
            Ok(bytes) => {
                tracing::info!(path = %path.display(), "placing the supervisor in new computers");
                Some(bytes)
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the supervisor; using Engine API exec");
                None
            }
        },
    };
    let docker = Docker::connect(config.docker.clone(), instance::current(), host_name())
        .await?
        .with_supervisor(supervisor)
        .with_pool(config.docker.warm_pool);
    // `--disk` where the storage driver cannot hold it: refused before any computer.
    docker.check_disk_limit().await?;
    Ok(docker)
}

async fn serve(config: Config, backend: Backend) -> Result<(), RunError> {
    let computers = Arc::new(Computers::new(
        backend,
        ExecDefaults {
            timeout_secs: config.default_timeout_secs,
            output_limit: usize::try_from(config.output_limit).unwrap_or(usize::MAX),
            shell: config.shell.clone(),
            // Executor mode has no sessions: its temporaries (all stateless) idle out after
            // --executor-idle-timeout.
            session_timeout_secs: config
                .executor
                .as_ref()
                .map_or(config.session_timeout_secs, |ex| ex.idle_timeout_secs),
            list_jobs: config.jobs_tools,
            max_computers: config.max_computers_per_principal,
            network: config.egress.policy.clone(),
            snapshot_limit: config.snapshot_limit,
        },
        host_name(),
    ));
    {
        let c = computers.clone();
        tokio::spawn(async move {
            if let Err(e) = c.reap_orphans().await {
                tracing::warn!(error = %e, "could not look for temporaries of dead servers");
            }
            c.backend().background();
            // Again now and then: what a killed server's last requests made after the
            // first look (the engine finishing a create it had been sent, or rolling one
            // back and leaving its host directory) is caught by a later one.
            loop {
                tokio::time::sleep(REAP_AGAIN).await;
                if let Err(e) = c.reap_orphans().await {
                    tracing::debug!(error = %e, "could not look for leftovers of dead servers");
                }
            }
        });
    }
    if let Some(ex) = &config.executor {
        let state = Arc::new(
            crate::api::ApiState::new(computers.clone(), ex.secret.as_bytes(), &ex.name)
                .map_err(|e| RunError::Executor(e.to_string()))?
                .with_file_limit(config.file_limit)
                .with_max_body(config.http.max_body),
        );
        let listener = tokio::net::TcpListener::bind(ex.listen)
            .await
            .map_err(|source| RunError::Listen {
                addr: ex.listen.to_string(),
                source,
            })?;
        // The gateway's Team Durable Object owns the lifetime of the temporaries it places
        // (its alarm deletes them). Defence in depth: one that no request named for
        // `--executor-idle-timeout` (its gateway stopped asking) goes here too.
        let reaper = {
            let c = computers.clone();
            let every = Duration::from_millis((ex.idle_timeout_secs * 1000 / 4).clamp(250, 30_000));
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    c.reap_idle().await;
                }
            })
        };
        tracing::info!(addr = %ex.listen, "executor API listening (/v1)");
        eprintln!(
            "mcp-sandbox-computer-vm-for-ai executor listening on http://{}/v1",
            listener.local_addr()?
        );
        crate::serve::serve(
            listener,
            crate::api::app(state),
            config.http,
            shutdown_signal(),
        )
        .await?;
        reaper.abort();
        computers.shutdown().await;
        return Ok(());
    }
    let dispatcher = Arc::new(dispatcher(&config));
    match config.transport {
        TransportArg::Stdio => {
            let host = SessionHost::new(computers.clone(), "stdio", false);
            tokio::select! {
                r = crate::stdio::serve(dispatcher, host.clone()) => { r?; }
                _ = shutdown_signal() => { tracing::info!("signal received, shutting down"); }
            }
        }
        TransportArg::Http => {
            let addr = std::net::SocketAddr::new(config.host, config.port);
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| RunError::Listen {
                    addr: addr.to_string(),
                    source,
                })?;
            let state = Arc::new(
                HttpState::new(
                    dispatcher,
                    computers.clone(),
                    config.auth_token.clone(),
                    config.host,
                    config.lifecycle_tools,
                    Duration::from_secs(config.session_timeout_secs),
                )
                .with_file_limit(config.file_limit)
                .with_limits(
                    config.http.max_body,
                    SessionCaps {
                        total: config.max_sessions,
                        per_principal: config.max_sessions_per_principal,
                    },
                ),
            );
            let reaper = {
                let s = state.clone();
                let every = Duration::from_millis(
                    (config.session_timeout_secs * 1000 / 4).clamp(250, 5000),
                );
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(every);
                    loop {
                        tick.tick().await;
                        s.expire().await;
                    }
                })
            };
            tracing::info!(%addr, "listening (MCP endpoint /mcp)");
            eprintln!(
                "mcp-sandbox-computer-vm-for-ai listening on http://{}/mcp",
                listener.local_addr()?
            );
            crate::serve::serve(listener, app(state.clone()), config.http, shutdown_signal())
                .await?;
            reaper.abort();
            state.close_all().await;
        }
    }
    computers.shutdown().await;
    Ok(())
}

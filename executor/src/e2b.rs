//! E2B computers from the local binary (`--backend e2b`): the shared sans-I/O client
//! (`shared::providers::e2b`) over reqwest.
//!
//! A computer is a sandbox of `--e2b-template`, tagged in its metadata (`mcp_computer`,
//! `mcp_temporary`, owner instance/host on temporaries) and found again by it. Permanent
//! computers are created with auto-pause, so the sandbox timeout pauses them instead of
//! killing them; every attach `connect`s, which resumes a paused sandbox and refreshes its
//! envd token. Commands go through envd's `process.Process/Start` (Connect, JSON).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::providers::e2b::{E2bClient, E2bError, ListedSandbox, NewSandbox, Sandbox};
use shared::result::{ExecOutcome, OutputCollector, Stream, TIMEOUT_EXIT_CODE};

use crate::backend::tags;
use crate::docker::ContainerRecord;
use crate::docker::exec::ExecSpec;
use crate::fly::Reqwest;

/// Errors of the E2B backend.
#[derive(Debug, thiserror::Error)]
pub enum E2bBackendError {
    #[error(transparent)]
    Api(#[from] E2bError),
    #[error(
        "computer {0:?} does not exist; create it with computer_create or pass it to the exec tool"
    )]
    NotFound(String),
}

/// E2B settings from the command line.
#[derive(Clone, PartialEq, Eq)]
pub struct E2bConfig {
    pub api_url: String,
    /// One envd host for every sandbox (plus the sandbox headers), or per-sandbox hosts.
    pub sandbox_url: Option<String>,
    pub api_key: String,
    pub template: String,
    pub sandbox_timeout_secs: u64,
    pub metadata: Vec<(String, String)>,
    pub env: Vec<(String, String)>,
}

impl std::fmt::Debug for E2bConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bConfig")
            .field("api_url", &self.api_url)
            .field("sandbox_url", &self.sandbox_url)
            .field("api_key", &"<redacted>")
            .field("template", &self.template)
            .field("sandbox_timeout_secs", &self.sandbox_timeout_secs)
            .finish_non_exhaustive()
    }
}

/// Parses `k=v` pairs (`--e2b-metadata`, `--e2b-env`; each flag may hold several, comma
/// separated).
pub fn parse_pairs(values: &[String], flag: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for v in values.iter().flat_map(|v| v.split(',')) {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        match v.split_once('=') {
            Some((k, val)) if !k.trim().is_empty() => {
                out.push((k.trim().to_owned(), val.trim().to_owned()));
            }
            _ => return Err(format!("{flag} {v:?} must be KEY=VALUE")),
        }
    }
    Ok(out)
}

/// The E2B backend.
#[derive(Debug, Clone)]
pub struct E2b {
    client: Arc<E2bClient<Reqwest>>,
    cfg: E2bConfig,
    instance: String,
    host: String,
    /// Connected sandboxes (with their envd token) by computer id.
    sandboxes: Arc<Mutex<HashMap<String, Sandbox>>>,
}

impl E2b {
    /// Checks the key (one list call) and returns the backend.
    pub async fn open(
        cfg: E2bConfig,
        instance: String,
        host: String,
    ) -> Result<Self, E2bBackendError> {
        let client = E2bClient::new(
            cfg.api_url.clone(),
            cfg.sandbox_url.clone(),
            cfg.api_key.clone(),
            Reqwest::new(),
        );
        client
            .list(&[(tags::MANAGED, "true")], &["running", "paused"])
            .await?;
        Ok(Self {
            client: Arc::new(client),
            cfg,
            instance,
            host,
            sandboxes: Arc::default(),
        })
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn record(&self, s: &ListedSandbox) -> Option<ContainerRecord> {
        Some(ContainerRecord {
            computer_id: s.metadata.get(tags::ID)?.clone(),
            container_id: s.sandbox_id.clone(),
            temporary: s.metadata.get(tags::TEMPORARY).map(String::as_str) == Some("true"),
            instance: s.metadata.get(tags::INSTANCE).cloned(),
            host: s.metadata.get(tags::HOST).cloned(),
            image: s.template_id.clone(),
            state: match s.state.as_str() {
                "running" => "running".to_owned(),
                other => other.to_owned(),
            },
            created_at: s.started_at.clone().unwrap_or_default(),
        })
    }

    async fn listed(&self, id: &str) -> Result<Option<ListedSandbox>, E2bBackendError> {
        Ok(self
            .client
            .list(&[(tags::ID, id)], &["running", "paused"])
            .await?
            .into_iter()
            .next())
    }

    pub async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, E2bBackendError> {
        Ok(self.listed(id).await?.and_then(|s| self.record(&s)))
    }

    pub async fn list(&self) -> Result<Vec<ContainerRecord>, E2bBackendError> {
        Ok(self
            .client
            .list(&[(tags::MANAGED, "true")], &["running", "paused"])
            .await?
            .iter()
            .filter_map(|s| self.record(s))
            .collect())
    }

    pub async fn create(
        &self,
        id: &str,
        temporary: bool,
    ) -> Result<ContainerRecord, E2bBackendError> {
        let mut metadata = tags::of(id, temporary, &self.instance, &self.host);
        metadata.extend(self.cfg.metadata.iter().cloned());
        let sandbox = self
            .client
            .create(&NewSandbox {
                template_id: self.cfg.template.clone(),
                timeout_secs: self.cfg.sandbox_timeout_secs,
                metadata,
                env_vars: self.cfg.env.clone(),
                auto_pause: !temporary,
                secure: true,
            })
            .await?;
        self.remember(id, sandbox.clone());
        Ok(ContainerRecord {
            computer_id: id.to_owned(),
            container_id: sandbox.sandbox_id,
            temporary,
            instance: temporary.then(|| self.instance.clone()),
            host: temporary.then(|| self.host.clone()),
            image: sandbox.template_id,
            state: "running".into(),
            created_at: String::new(),
        })
    }

    fn remember(&self, id: &str, s: Sandbox) {
        self.sandboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), s);
    }

    fn forget(&self, id: &str) {
        self.sandboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// Connects (resuming a paused sandbox) and remembers the fresh envd token.
    async fn connect(&self, id: &str) -> Result<Sandbox, E2bBackendError> {
        let listed = self
            .listed(id)
            .await?
            .ok_or_else(|| E2bBackendError::NotFound(id.to_owned()))?;
        let s = self
            .client
            .connect(&listed.sandbox_id, self.cfg.sandbox_timeout_secs)
            .await?;
        self.remember(id, s.clone());
        Ok(s)
    }

    pub async fn start(&self, id: &str) -> Result<(), E2bBackendError> {
        self.connect(id).await.map(|_| ())
    }

    /// E2B has no restart: the sandbox is paused and resumed.
    pub async fn restart(&self, id: &str) -> Result<(), E2bBackendError> {
        let listed = self
            .listed(id)
            .await?
            .ok_or_else(|| E2bBackendError::NotFound(id.to_owned()))?;
        if listed.state == "running" {
            self.client.pause(&listed.sandbox_id).await?;
        }
        self.forget(id);
        self.connect(id).await.map(|_| ())
    }

    pub async fn remove(&self, id: &str) -> Result<(), E2bBackendError> {
        if let Some(s) = self.listed(id).await? {
            self.client.kill(&s.sandbox_id).await?;
        }
        self.forget(id);
        Ok(())
    }

    pub async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
    ) -> Result<ContainerRecord, E2bBackendError> {
        self.remove(id).await?;
        self.create(id, temporary).await
    }

    pub async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, E2bBackendError> {
        let cached = self
            .sandboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned();
        let sandbox = match cached {
            Some(s) => s,
            None => self.connect(id).await?,
        };
        let argv = crate::fly::program_argv(spec);
        let started = Instant::now();
        let timeout_ms = u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX);
        let run = |s: Sandbox| {
            let argv = argv.clone();
            async move {
                self.client
                    .run(
                        &s,
                        &argv[0],
                        &argv[1..],
                        &[],
                        None,
                        spec.stdin.as_deref().map(str::as_bytes),
                        timeout_ms,
                        spec.output_limit + 1,
                    )
                    .await
            }
        };
        let out = match run(sandbox).await {
            // A stale token or a paused sandbox: connect again once.
            Err(E2bError::Conflict(_) | E2bError::Rpc { .. } | E2bError::NotFound(_)) => {
                let s = self.connect(id).await?;
                run(s).await?
            }
            other => other?,
        };
        let timed_out = started.elapsed() + Duration::from_millis(50) >= spec.timeout
            && out
                .error
                .as_deref()
                .is_some_and(|e| e.contains("deadline") || e.contains("canceled"));
        if timed_out && let Some(pid) = out.pid {
            // The deadline ended the stream; make sure the process does not live on.
            let s = self
                .sandboxes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(id)
                .cloned();
            if let Some(s) = s
                && let Err(e) = self.client.kill_process(&s, pid).await
            {
                tracing::warn!(computer_id = id, pid, error = %e, "could not kill the timed-out command");
            }
        }
        let exit_code = if timed_out {
            TIMEOUT_EXIT_CODE
        } else {
            out.exit_code
        };
        let mut collector = OutputCollector::new(spec.output_limit);
        collector.push(Stream::Stdout, &out.stdout);
        collector.push(Stream::Stderr, &out.stderr);
        let (stdout, stderr, truncated) = collector.finish();
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code,
            duration_ms: started.elapsed().as_millis() as u64,
            truncated_at: (truncated || out.truncated).then_some(spec.output_limit as u64),
            timed_out_after: timed_out.then_some(spec.timeout.as_secs()),
        })
    }
}

//! Computers as E2B sandboxes of one template, tagged in their metadata (`mcp_computer`,
//! `mcp_temporary`, the owner on temporaries) and found again by it. Permanent computers
//! are created with auto-pause, so the sandbox timeout pauses them instead of killing
//! them; every attach `connect`s, which resumes a paused sandbox and refreshes its envd
//! token. Commands go through envd's `process.Process/Start` (Connect, JSON); files that
//! are bigger than one exec's slice move through envd's `/files` and
//! `filesystem.Filesystem/Stat` (`crate::files::over_exec` checks and commits by exec).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::{CloudComputers, Computer, ComputersError, NetworkError, Owner, ProviderExec, tags};
use crate::egress::Policy;
use crate::files::over_exec::{OverExec, PathInfo, PathKind};
use crate::providers::HttpTransport;
use crate::providers::e2b::{
    E2bClient, E2bError, EntryKind, ListedSandbox, NewSandbox, RunIo, Sandbox,
};
use crate::result::{ExecOutcome, OutputCollector, Stream, TIMEOUT_EXIT_CODE};

/// What a new sandbox looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct E2bSettings {
    pub template: String,
    pub sandbox_timeout_secs: u64,
    /// Extra metadata on every sandbox.
    pub metadata: Vec<(String, String)>,
    /// Environment of every command.
    pub env: Vec<(String, String)>,
}

impl Default for E2bSettings {
    fn default() -> Self {
        Self {
            template: "base".to_owned(),
            sandbox_timeout_secs: 3600,
            metadata: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// The computers of one E2B team.
pub struct E2bComputers<T: HttpTransport> {
    client: E2bClient<T>,
    settings: E2bSettings,
    owner: Owner,
    /// Connected sandboxes (with their envd token) by computer id.
    sandboxes: Mutex<HashMap<String, Sandbox>>,
}

impl<T: HttpTransport> std::fmt::Debug for E2bComputers<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bComputers")
            .field("client", &self.client)
            .field("template", &self.settings.template)
            .finish_non_exhaustive()
    }
}

const LIVE: [&str; 2] = ["running", "paused"];

impl<T: HttpTransport> E2bComputers<T> {
    pub fn new(client: E2bClient<T>, settings: E2bSettings, owner: Owner) -> Self {
        Self {
            client,
            settings,
            owner,
            sandboxes: Mutex::default(),
        }
    }

    pub fn settings(&self) -> &E2bSettings {
        &self.settings
    }

    /// One list call: checks that the API key works.
    pub async fn check(&self) -> Result<(), E2bError> {
        self.client.list(&[(tags::MANAGED, "true")], &LIVE).await?;
        Ok(())
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sandbox>> {
        self.sandboxes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn record(s: &ListedSandbox) -> Option<Computer> {
        Some(Computer {
            computer_id: s.metadata.get(tags::ID)?.clone(),
            provider_id: s.sandbox_id.clone(),
            temporary: s.metadata.get(tags::TEMPORARY).map(String::as_str) == Some("true"),
            instance: s.metadata.get(tags::INSTANCE).cloned(),
            host: s.metadata.get(tags::HOST).cloned(),
            image: s.template_id.clone(),
            state: s.state.as_str().into(),
            created_at: s.started_at.clone().unwrap_or_default(),
            team: s.metadata.get(tags::TEAM).cloned(),
            // Made with a policy of its own: its tag; else the open network.
            network: Some(
                s.metadata
                    .get(tags::NETWORK)
                    .and_then(|text| serde_json::from_str(text).ok())
                    .unwrap_or(Policy::All),
            ),
        })
    }

    async fn listed(&self, id: &str) -> Result<Option<ListedSandbox>, ComputersError> {
        Ok(self
            .client
            .list(&[(tags::ID, id)], &LIVE)
            .await?
            .into_iter()
            .next())
    }

    /// Connects (resuming a paused sandbox) and remembers the fresh envd token.
    async fn connect(&self, id: &str) -> Result<Sandbox, ComputersError> {
        let listed = self
            .listed(id)
            .await?
            .ok_or_else(|| ComputersError::NotFound(id.to_owned()))?;
        let s = self
            .client
            .connect(&listed.sandbox_id, self.settings.sandbox_timeout_secs)
            .await?;
        self.cache().insert(id.to_owned(), s.clone());
        Ok(s)
    }
}

impl<T: HttpTransport> E2bComputers<T> {
    /// Runs `call` on computer `id`'s sandbox (connected first if it is not yet), once
    /// more after a fresh connect when the sandbox was paused or its token went stale.
    async fn on_sandbox<R, F, Fut>(&self, id: &str, call: F) -> Result<R, ComputersError>
    where
        F: Fn(Sandbox) -> Fut,
        Fut: std::future::Future<Output = Result<R, E2bError>>,
    {
        let cached = self.cache().get(id).cloned();
        let sandbox = match cached {
            Some(s) => s,
            None => self.connect(id).await?,
        };
        match call(sandbox).await {
            Err(E2bError::Conflict(_) | E2bError::NotFound(_)) | Err(E2bError::Rpc { .. }) => {
                let s = self.connect(id).await?;
                Ok(call(s).await?)
            }
            other => Ok(other?),
        }
    }
}

/// envd's refusal of a file call in the agent's words; any other failure is the provider's.
fn file_refusal(path: &str, e: ComputersError) -> OverExec<ComputersError> {
    match e {
        ComputersError::E2b(E2bError::File {
            status: 404,
            message,
        }) => OverExec::NoSuchFile(format!(
            "{path} does not exist on this computer ({message}); list its directory with terminal_execute: ls"
        )),
        ComputersError::E2b(E2bError::File { status: 507, .. }) => OverExec::Refused(format!(
            "{path}: the computer's disk is full; nothing changed (free space, e.g. remove files under /tmp)"
        )),
        ComputersError::E2b(E2bError::File { message, .. }) => {
            OverExec::Refused(format!("{path}: {message}; nothing changed"))
        }
        other => OverExec::Shell(other),
    }
}

/// The tag of a command's process (its nonce), also in its environment as [`JOB_ENV`].
fn tag_of(ex: &ProviderExec) -> String {
    format!("msc-{:016x}", ex.nonce)
}

/// Marks every process of one command (inherited by its children), so that killing the
/// command also kills what it left in the background.
const JOB_ENV: &str = "MSC_JOB";

/// Kills every process whose environment has `MSC_JOB=$1` (envd signals one pid only).
const TREE_KILLER: &str = r#"for p in /proc/[0-9]*; do tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -qx "MSC_JOB=$1" && kill -9 "${p#/proc/}" 2>/dev/null; done; true"#;

impl<T: HttpTransport> E2bComputers<T> {
    /// Runs [`TREE_KILLER`] for the command tagged `tag`.
    async fn kill_tree(&self, s: &Sandbox, tag: &str) {
        let args = [
            "-c".to_owned(),
            TREE_KILLER.to_owned(),
            "msc-kill".to_owned(),
            tag.to_owned(),
        ];
        let _ = self
            .client
            .run(s, "/bin/sh", &args, &[], None, None, 10_000, 4096)
            .await;
    }
}

impl<T: HttpTransport> CloudComputers for E2bComputers<T> {
    fn kind(&self) -> crate::capabilities::BackendKind {
        crate::capabilities::BackendKind::E2b
    }

    fn now_ms(&self) -> u64 {
        self.client.transport().now_ms()
    }

    async fn prepare(&self) -> Result<(), ComputersError> {
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<Computer>, ComputersError> {
        Ok(self.listed(id).await?.as_ref().and_then(Self::record))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Computer>, ComputersError> {
        Ok(self
            .client
            .list(&[(tags::MANAGED, "true")], &LIVE)
            .await?
            .iter()
            .filter_map(Self::record)
            .filter(|c| c.computer_id.starts_with(prefix))
            .collect())
    }

    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
    ) -> Result<Computer, ComputersError> {
        // Checked before anything is made: a rule E2B cannot hold is refused.
        crate::providers::e2b::NetworkRules::of(network).map_err(NetworkError::from)?;
        let mut metadata = tags::of(id, temporary, &self.owner, team);
        if *network != Policy::All {
            metadata.push((
                tags::NETWORK.to_owned(),
                serde_json::to_string(network).unwrap_or_default(),
            ));
        }
        metadata.extend(self.settings.metadata.iter().cloned());
        let sandbox = self
            .client
            .create(&NewSandbox {
                template_id: self.settings.template.clone(),
                timeout_secs: self.settings.sandbox_timeout_secs,
                metadata,
                env_vars: self.settings.env.clone(),
                auto_pause: !temporary,
                secure: true,
                network: network.clone(),
            })
            .await?;
        self.cache().insert(id.to_owned(), sandbox.clone());
        Ok(Computer {
            computer_id: id.to_owned(),
            provider_id: sandbox.sandbox_id,
            temporary,
            instance: temporary.then(|| self.owner.instance.clone()),
            host: temporary.then(|| self.owner.host.clone()),
            image: sandbox.template_id,
            state: crate::lifecycle::ComputerState::Running,
            created_at: String::new(),
            team: team.map(str::to_owned),
            network: Some(network.clone()),
        })
    }

    async fn start(&self, id: &str) -> Result<(), ComputersError> {
        self.connect(id).await.map(|_| ())
    }

    /// E2B has no restart: the sandbox is paused and resumed.
    async fn restart(&self, id: &str) -> Result<(), ComputersError> {
        let listed = self
            .listed(id)
            .await?
            .ok_or_else(|| ComputersError::NotFound(id.to_owned()))?;
        if listed.state == "running" {
            self.client.pause(&listed.sandbox_id).await?;
        }
        self.cache().remove(id);
        self.connect(id).await.map(|_| ())
    }

    /// Kills the sandbox; a missing computer is not an error.
    async fn remove(&self, id: &str) -> Result<(), ComputersError> {
        if let Some(s) = self.listed(id).await? {
            self.client.kill(&s.sandbox_id).await?;
        }
        self.cache().remove(id);
        Ok(())
    }

    /// Kills the command of `ex` and what it started (a cancelled call); best effort.
    async fn kill(&self, id: &str, ex: &ProviderExec) {
        let cached = self.cache().get(id).cloned();
        if let Some(s) = cached {
            let tag = tag_of(ex);
            let _ = self.client.kill_tagged(&s, &tag).await;
            self.kill_tree(&s, &tag).await;
        }
    }

    fn moves_files(&self) -> bool {
        true
    }

    async fn file_stat(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Option<PathInfo>, OverExec<ComputersError>> {
        let entry = self
            .on_sandbox(id, |s| async move { self.client.stat(&s, path).await })
            .await
            .map_err(|e| file_refusal(path, e))?;
        Ok(entry.map(|e| PathInfo {
            kind: match e.kind {
                EntryKind::File => PathKind::File,
                EntryKind::Directory => PathKind::Directory,
                EntryKind::Symlink | EntryKind::Other => PathKind::Other,
            },
            size: e.size,
            mode: e.mode,
            mtime_secs: e.mtime_secs,
        }))
    }

    async fn file_download(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Vec<u8>, OverExec<ComputersError>> {
        self.on_sandbox(id, |s| async move { self.client.download(&s, path).await })
            .await
            .map_err(|e| file_refusal(path, e))
    }

    async fn file_upload(
        &self,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), OverExec<ComputersError>> {
        let bytes = &bytes;
        self.on_sandbox(id, |s| async move {
            self.client.upload(&s, path, bytes.clone()).await
        })
        .await
        .map_err(|e| file_refusal(path, e))
    }

    /// Runs one command; at its timeout the stream ends and the process is killed by pid
    /// (envd may keep it otherwise).
    async fn exec(&self, id: &str, ex: &ProviderExec) -> Result<ExecOutcome, ComputersError> {
        let cached = self.cache().get(id).cloned();
        let sandbox = match cached {
            Some(s) => s,
            None => self.connect(id).await?,
        };
        let Some((cmd, args)) = ex.argv.split_first() else {
            return Err(E2bError::Rpc {
                code: "invalid_argument".into(),
                message: "empty command".into(),
            }
            .into());
        };
        let clock = self.client.transport();
        let started = clock.now_ms();
        let tag = tag_of(ex);
        let envs = [(JOB_ENV.to_owned(), tag.clone())];
        let envs = &envs;
        let io = RunIo {
            stdin: ex.stdin.as_deref().map(str::as_bytes),
            timeout_ms: ex.timeout_ms,
            output_limit: ex.output_limit + 1,
            tag: Some(&tag),
        };
        let run =
            |s: Sandbox| async move { self.client.run_tagged(&s, cmd, args, envs, None, io).await };
        let out = match run(sandbox).await {
            // A stale token or a paused sandbox: connect again once.
            Err(E2bError::Conflict(_) | E2bError::Rpc { .. } | E2bError::NotFound(_)) => {
                let s = self.connect(id).await?;
                run(s).await?
            }
            other => other?,
        };
        let timed_out = clock.now_ms().saturating_sub(started) + 50 >= ex.timeout_ms
            && out
                .error
                .as_deref()
                .is_some_and(|e| e.contains("deadline") || e.contains("canceled"));
        if timed_out {
            // The deadline ended the stream; make sure the command does not live on (best
            // effort: the result says it timed out either way).
            let s = self.cache().get(id).cloned();
            if let Some(s) = s {
                if let Some(pid) = out.pid {
                    let _ = self.client.kill_process(&s, pid).await;
                }
                self.kill_tree(&s, &tag).await;
            }
        }
        let exit_code = if timed_out {
            TIMEOUT_EXIT_CODE
        } else {
            out.exit_code
        };
        let mut collector = OutputCollector::new(ex.output_limit);
        collector.push(Stream::Stdout, &out.stdout);
        collector.push(Stream::Stderr, &out.stderr);
        let (stdout, stderr, truncated) = collector.finish();
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code,
            duration_ms: clock.now_ms().saturating_sub(started),
            truncated_at: (truncated || out.truncated).then_some(ex.output_limit as u64),
            timed_out_after: timed_out.then_some(ex.timeout_ms / 1000),
            oom_killed: false,
        })
    }
}

//! Computers as Fly Machines: machine name = computer id, tagged in `config.metadata`;
//! temporaries get a disposable root filesystem, permanent ones `rootfs.persist = always`.
//!
//! Exec: every command is a job on the machine ([`JOB`]). The first exec request starts it
//! and waits up to `sync_exec_secs` for it (the exec endpoint's proxy does not hold a
//! request much longer than a minute), so a short command costs one request; a longer one
//! is polled by further requests, each waiting up to `sync_exec_secs`, until it ends or its
//! timeout kills its process group (output so far kept, 124). Polls and the kill are safe to
//! repeat, so server errors on them are retried.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::{CloudComputers, Computer, ComputersError, NetworkError, Owner, ProviderExec, tags};
use crate::egress::Policy;
use crate::providers::HttpTransport;
use crate::providers::fly::{ExecOutput, FlyClient, FlyError, Machine, MachineSpec};
use crate::result::{ExecOutcome, OutputCollector, Stream, TIMEOUT_EXIT_CODE};

/// The image of a computer machine unless configured otherwise.
pub const DEFAULT_IMAGE: &str = "docker.io/library/debian:bookworm-slim";

/// How long one exec request waits for a command before polling takes over.
pub const DEFAULT_SYNC_EXEC_SECS: u64 = 50;

/// The main process of a computer machine: sleeps, exits at once on SIGTERM.
const KEEPALIVE: &str = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";

/// What a new machine looks like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlySettings {
    pub region: Option<String>,
    pub image: String,
    /// `shared` or `performance`.
    pub cpu_kind: String,
    pub cpus: u32,
    pub memory_mb: u32,
    pub rootfs_size_gb: Option<u32>,
    /// Commands with a longer timeout run in the background and are polled.
    pub sync_exec_secs: u64,
}

impl Default for FlySettings {
    fn default() -> Self {
        Self {
            region: None,
            image: DEFAULT_IMAGE.to_owned(),
            cpu_kind: "shared".to_owned(),
            cpus: 1,
            memory_mb: 512,
            rootfs_size_gb: None,
            sync_exec_secs: DEFAULT_SYNC_EXEC_SECS,
        }
    }
}

/// The computers of one Fly app.
pub struct FlyComputers<T: HttpTransport> {
    client: FlyClient<T>,
    app: String,
    settings: FlySettings,
    owner: Owner,
    /// Machine ids by computer id (a computer's machine changes only on factory reset).
    ids: Mutex<HashMap<String, String>>,
    /// [`CloudComputers::prepare`] creates the app in this org when it is missing.
    create_app_in: Option<String>,
    app_ready: Mutex<bool>,
}

impl<T: HttpTransport> std::fmt::Debug for FlyComputers<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlyComputers")
            .field("client", &self.client)
            .field("app", &self.app)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<T: HttpTransport> FlyComputers<T> {
    pub fn new(client: FlyClient<T>, app: String, settings: FlySettings, owner: Owner) -> Self {
        Self {
            client,
            app,
            settings,
            owner,
            ids: Mutex::default(),
            create_app_in: None,
            app_ready: Mutex::new(false),
        }
    }

    /// Lets [`CloudComputers::prepare`] create the app in `org` when it is missing (once).
    pub fn creating_app_in(mut self, org: impl Into<String>) -> Self {
        self.create_app_in = Some(org.into());
        self
    }

    pub fn app(&self) -> &str {
        &self.app
    }

    pub fn settings(&self) -> &FlySettings {
        &self.settings
    }

    /// Creates the app in `org` unless it exists; true when it was created.
    pub async fn ensure_app(&self, org: &str) -> Result<bool, FlyError> {
        if self.client.get_app(&self.app).await?.is_some() {
            return Ok(false);
        }
        match self.client.create_app(&self.app, org).await {
            Ok(()) => Ok(true),
            // Made meanwhile by another caller of ours.
            Err(FlyError::NameTaken(_)) if self.client.get_app(&self.app).await?.is_some() => {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(m: &Machine) -> Option<Computer> {
        let state = match m.state.as_str() {
            "started" => "running",
            "created" | "starting" => "created",
            other => other,
        };
        Some(Computer {
            computer_id: m.metadata.get(tags::ID)?.clone(),
            provider_id: m.id.clone(),
            temporary: m.metadata.get(tags::TEMPORARY).map(String::as_str) == Some("true"),
            instance: m.metadata.get(tags::INSTANCE).cloned(),
            host: m.metadata.get(tags::HOST).cloned(),
            image: m.image.clone().unwrap_or_default(),
            state: state.into(),
            created_at: m.created_at.clone().unwrap_or_default(),
            team: m.metadata.get(tags::TEAM).cloned(),

            network: None,
        })
    }

    fn live(m: &Machine) -> bool {
        !matches!(m.state.as_str(), "destroyed" | "destroying")
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>, ComputersError> {
        let found = self
            .client
            .list_machines(&self.app, &[(tags::ID, id)])
            .await?
            .into_iter()
            .find(Self::live);
        let mut ids = self.ids();
        match &found {
            Some(m) => ids.insert(id.to_owned(), m.id.clone()),
            None => ids.remove(id),
        };
        Ok(found)
    }

    async fn machine_id(&self, id: &str) -> Result<String, ComputersError> {
        let cached = self.ids().get(id).cloned();
        match cached {
            Some(m) => Ok(m),
            None => self
                .machine(id)
                .await?
                .map(|m| m.id)
                .ok_or_else(|| ComputersError::NotFound(id.to_owned())),
        }
    }
}

impl<T: HttpTransport> CloudComputers for FlyComputers<T> {
    fn kind(&self) -> crate::capabilities::BackendKind {
        crate::capabilities::BackendKind::Fly
    }

    fn now_ms(&self) -> u64 {
        self.client.transport().now_ms()
    }

    async fn prepare(&self) -> Result<(), ComputersError> {
        let Some(org) = &self.create_app_in else {
            return Ok(());
        };
        if *self
            .app_ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            return Ok(());
        }
        self.ensure_app(org).await?;
        *self
            .app_ready
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        Ok(())
    }

    async fn find(&self, id: &str) -> Result<Option<Computer>, ComputersError> {
        Ok(self.machine(id).await?.as_ref().and_then(Self::record))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<Computer>, ComputersError> {
        Ok(self
            .client
            .list_machines(&self.app, &[(tags::MANAGED, "true")])
            .await?
            .iter()
            .filter(|m| Self::live(m))
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
        if *network != Policy::All {
            return Err(NetworkError::Unconfinable(network.clone()).into());
        }
        let s = &self.settings;
        let spec = MachineSpec {
            name: id.to_owned(),
            region: s.region.clone(),
            image: s.image.clone(),
            cpu_kind: s.cpu_kind.clone(),
            cpus: s.cpus,
            memory_mb: s.memory_mb,
            rootfs_persist: Some(if temporary { "never" } else { "always" }.to_owned()),
            rootfs_size_gb: s.rootfs_size_gb,
            metadata: tags::of(id, temporary, &self.owner, team),
            init_exec: Some(vec!["/bin/sh".into(), "-c".into(), KEEPALIVE.into()]),
        };
        let mut m = match self.client.create_machine(&self.app, &spec).await {
            Ok(m) => m,
            Err(FlyError::Conflict(_)) => {
                // Another server made it first: use theirs (the lifecycle policy decides).
                return self
                    .find(id)
                    .await?
                    .ok_or_else(|| ComputersError::NotFound(id.to_owned()));
            }
            Err(e) => return Err(e.into()),
        };
        self.client.wait(&self.app, &m.id, "started", 120).await?;
        self.ids().insert(id.to_owned(), m.id.clone());
        m.state = "started".into();
        Self::record(&m).ok_or_else(|| ComputersError::NotFound(id.to_owned()))
    }

    /// Starts a stopped or suspended machine and waits until it runs.
    async fn start(&self, id: &str) -> Result<(), ComputersError> {
        let m = self
            .machine(id)
            .await?
            .ok_or_else(|| ComputersError::NotFound(id.to_owned()))?;
        if m.state != "started" {
            if m.state != "starting" {
                self.client.start(&self.app, &m.id).await?;
            }
            self.client.wait(&self.app, &m.id, "started", 120).await?;
        }
        Ok(())
    }

    async fn restart(&self, id: &str) -> Result<(), ComputersError> {
        let mid = self.machine_id(id).await?;
        self.client.restart(&self.app, &mid).await?;
        self.client.wait(&self.app, &mid, "started", 120).await?;
        Ok(())
    }

    /// Destroys the machine (forced) and waits until its name is free; a missing computer
    /// is not an error.
    async fn remove(&self, id: &str) -> Result<(), ComputersError> {
        if let Some(m) = self.machine(id).await? {
            match self.client.destroy(&self.app, &m.id, true).await {
                Ok(()) => self.client.wait(&self.app, &m.id, "destroyed", 60).await?,
                Err(FlyError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.ids().remove(id);
        Ok(())
    }

    /// Kills the job of `ex` (a cancelled call); best effort.
    async fn kill(&self, id: &str, ex: &ProviderExec) {
        if let Ok(mid) = self.machine_id(id).await {
            let _ = self
                .client
                .exec_idempotent(&self.app, &mid, &job_argv("kill", ex, 1), 30)
                .await;
        }
    }

    /// Runs one command as a job on the machine (see the module docs).
    async fn exec(&self, id: &str, ex: &ProviderExec) -> Result<ExecOutcome, ComputersError> {
        let mut mid = self.machine_id(id).await?;
        let clock = self.client.transport();
        let started = clock.now_ms();
        let deadline = started.saturating_add(ex.timeout_ms);
        let job = job_id(ex);
        let window = |now: u64| {
            (deadline.saturating_sub(now) / 1000).clamp(1, self.settings.sync_exec_secs.max(1))
        };
        let job_argv = |mode: &str, wait: u64| job_argv(mode, ex, wait);
        let wait = window(started);
        let stdin = Some(ex.stdin.as_deref().unwrap_or(""));
        let start = job_argv("start", wait);
        let mut out = match self
            .client
            .exec(&self.app, &mid, &start, stdin, wait + 15)
            .await
        {
            // The remembered machine is gone (factory reset by another server): look the
            // computer up again; a 404 means the command did not run.
            Err(FlyError::NotFound(_)) => {
                self.ids().remove(id);
                mid = self.machine_id(id).await?;
                self.client
                    .exec(&self.app, &mid, &start, stdin, wait + 15)
                    .await?
            }
            other => other?,
        };
        let mut timed_out = false;
        while still_running(&out, &job) {
            let now = clock.now_ms();
            if now >= deadline {
                timed_out = true;
                out = self
                    .client
                    .exec_idempotent(&self.app, &mid, &job_argv("kill", 1), 30)
                    .await?;
                break;
            }
            let wait = window(now);
            out = self
                .client
                .exec_idempotent(&self.app, &mid, &job_argv("poll", wait), wait + 15)
                .await?;
        }
        let exit_code = if timed_out {
            TIMEOUT_EXIT_CODE
        } else {
            match out.exit_signal {
                Some(sig) if out.exit_code <= 0 => 128 + sig,
                _ => out.exit_code,
            }
        };
        let mut collector = OutputCollector::new(ex.output_limit);
        collector.push(Stream::Stdout, &decode_stream(&out.stdout));
        collector.push(
            Stream::Stderr,
            &decode_stream(&strip_marker(&out.stderr, &job)),
        );
        let (stdout, stderr, truncated) = collector.finish();
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code,
            duration_ms: clock.now_ms().saturating_sub(started),
            truncated_at: truncated.then_some(ex.output_limit as u64),
            timed_out_after: timed_out.then_some(ex.timeout_ms / 1000),
            oom_killed: false,
        })
    }
}

/// The job of a command: its nonce.
fn job_id(ex: &ProviderExec) -> String {
    format!("{:016x}", ex.nonce)
}

/// The argv that runs [`JOB`] in `mode` for command `ex`.
fn job_argv(mode: &str, ex: &ProviderExec, wait: u64) -> Vec<String> {
    // The machine kills the job by itself a little after its timeout, should this server
    // be gone by then.
    let hard_limit = ex.timeout_ms / 1000 + 10;
    let mut v = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        JOB.to_owned(),
        "msc-job".to_owned(),
        mode.to_owned(),
        job_id(ex),
        wait.to_string(),
        (ex.output_limit + 1).to_string(),
        hard_limit.to_string(),
    ];
    if mode == "start" {
        v.extend(ex.argv.iter().cloned());
    }
    v
}

/// The job runner on the machine: `JOB MODE JOB_ID WAIT LIMIT HARD_LIMIT [PROGRAM...]`.
/// `start` saves stdin and starts the program in its own session with its output in
/// files; `start` and `poll` wait up to WAIT seconds for it (looking every 5 ms for the
/// first 100 ms, then every 50 ms); when it has ended, its output
/// (at most LIMIT bytes of each stream) is printed and the status is the program's; the
/// output is base64 behind [`B64`] when the image has `base64` and `tr` (Fly's exec API
/// returns strings, so raw bytes would not survive), raw otherwise; when
/// not, the last stderr line is `msc-running JOB_ID`. `kill` kills the job's process group
/// and prints what it wrote so far. `start` also leaves a watchdog that kills the job after
/// HARD_LIMIT seconds unless it ended (its pid file is gone).
const JOB: &str = r#"m=$1 j=$2 w=$3 l=$4 t=$5; shift 5; d=/tmp/.msc-jobs; f=$d/$j
show() { if command -v base64 >/dev/null 2>&1 && command -v tr >/dev/null 2>&1; then
    printf msc-b64:; head -c "$l" "$f.out" 2>/dev/null | base64 | tr -d '\n'
    { printf msc-b64:; head -c "$l" "$f.err" 2>/dev/null | base64 | tr -d '\n'; echo; } >&2
  else head -c "$l" "$f.out" 2>/dev/null; head -c "$l" "$f.err" >&2 2>/dev/null; fi; }
case $m in
start) mkdir -p "$d" && cat > "$f.in" || exit 125
  setsid sh -c 'f=$1; shift; "$@" < "$f.in" > "$f.out" 2> "$f.err"; echo $? > "$f.tmp"; mv "$f.tmp" "$f.rc"' msc "$f" "$@" < /dev/null > /dev/null 2>&1 &
  echo $! > "$f.pid"
  ( sleep "$t"; [ -e "$f.pid" ] && kill -9 "-$(cat "$f.pid")" ) < /dev/null > /dev/null 2>&1 & ;;
kill) p=$(cat "$f.pid" 2>/dev/null); [ -n "$p" ] && { kill -9 "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; }
  show; rm -f "$f".*; exit 124 ;;
esac
i=0; while [ ! -e "$f.rc" ] && [ "$i" -lt 20 ]; do sleep 0.005; i=$((i + 1)); done
i=2; n=$((w * 20))
while [ ! -e "$f.rc" ] && [ "$i" -lt "$n" ]; do sleep 0.05; i=$((i + 1)); done
if [ -e "$f.rc" ]; then show; r=$(cat "$f.rc"); rm -f "$f".*; exit "$r"; fi
echo "msc-running $j" >&2; exit 0"#;

/// Marks a stream the job runner printed as base64.
const B64: &str = "msc-b64:";

/// The bytes of one stream as the job runner printed it.
fn decode_stream(printed: &str) -> Vec<u8> {
    use base64::Engine as _;
    match printed.strip_prefix(B64) {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64.trim_end())
            .unwrap_or_else(|_| printed.as_bytes().to_vec()),
        None => printed.as_bytes().to_vec(),
    }
}

/// Did the job runner say the job is still running?
fn still_running(out: &ExecOutput, job: &str) -> bool {
    out.stderr
        .trim_end()
        .ends_with(&format!("msc-running {job}"))
}

/// `stderr` without the runner's marker line.
fn strip_marker(stderr: &str, job: &str) -> String {
    stderr
        .strip_suffix(&format!("msc-running {job}\n"))
        .unwrap_or(stderr)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_recognised_and_removed() {
        let out = ExecOutput {
            stderr: "warning\nmsc-running 00000000000000ff\n".into(),
            ..Default::default()
        };
        assert!(still_running(&out, "00000000000000ff"));
        assert!(!still_running(&out, "00000000000000fe"));
        assert_eq!(strip_marker(&out.stderr, "00000000000000ff"), "warning\n");
    }

    #[test]
    fn streams_come_back_byte_exact() {
        assert_eq!(decode_stream("msc-b64://4="), vec![0xff, 0xfe]);
        assert_eq!(decode_stream("msc-b64:aGkK\n"), b"hi\n");
        assert_eq!(decode_stream("msc-b64:"), b"");
        assert_eq!(decode_stream("plain\n"), b"plain\n");
        assert_eq!(decode_stream("msc-b64:not base64!"), b"msc-b64:not base64!");
    }
}

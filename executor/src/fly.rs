//! Fly Machines computers from the local binary (`--backend fly`): the shared sans-I/O
//! client (`shared::providers::fly`) over reqwest.
//!
//! Owns the token lookup (flags, env, the flyctl login cache), the app (given, or generated
//! once and remembered in `<state-dir>/fly.json`), the mapping computer ↔ machine (machine
//! name = computer id, metadata tags), and exec on a machine: short commands through one
//! exec request; commands whose timeout is longer than what the exec endpoint's proxy
//! allows run in the background inside the machine and are polled (see [`Fly::exec`]).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::providers::fly::{FlyClient, FlyError, Machine, MachineSpec, default_app_name};
use shared::providers::{HttpRequest, HttpResponse, HttpTransport};
use shared::result::{ExecOutcome, OutputCollector, Stream, TIMEOUT_EXIT_CODE};

use crate::backend::tags;
use crate::docker::ContainerRecord;
use crate::docker::exec::ExecSpec;

/// The image of a computer machine unless `--fly-image` says otherwise.
pub const DEFAULT_IMAGE: &str = "docker.io/library/debian:bookworm-slim";

/// The main process of a computer machine: sleeps, exits at once on SIGTERM.
const KEEPALIVE: &str = "trap 'exit 0' TERM INT; while :; do sleep 86400 & wait $!; done";

/// Runs the program in `$2…` in directory `$1` (126 with the reason when it is missing).
const CD_WRAPPER: &str = "cd -- \"$1\" 2>/dev/null || { echo \"cd: $1: No such file or directory\" >&2; exit 126; }; shift; exec \"$@\"";

/// Errors of the Fly backend.
#[derive(Debug, thiserror::Error)]
pub enum FlyBackendError {
    #[error(transparent)]
    Api(#[from] FlyError),
    #[error(
        "computer {0:?} does not exist; create it with computer_create or pass it to the exec tool"
    )]
    NotFound(String),
    #[error("cannot read or write {path}: {detail}")]
    State { path: String, detail: String },
}

/// Fly settings from the command line.
#[derive(Clone, PartialEq, Eq)]
pub struct FlyConfig {
    pub api_url: String,
    pub token: String,
    pub app: Option<String>,
    pub org: String,
    pub region: Option<String>,
    pub image: String,
    pub cpu_kind: String,
    pub cpus: u32,
    pub memory_mb: u32,
    pub rootfs_size_gb: Option<u32>,
    /// Commands with a longer timeout run in the background and are polled.
    pub sync_exec_secs: u64,
}

impl std::fmt::Debug for FlyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlyConfig")
            .field("api_url", &self.api_url)
            .field("token", &"<redacted>")
            .field("app", &self.app)
            .field("org", &self.org)
            .field("region", &self.region)
            .field("image", &self.image)
            .finish_non_exhaustive()
    }
}

/// The token and where it came from (for the start-up log).
pub fn find_token(flag: Option<&str>, home: Option<&Path>) -> Option<(String, &'static str)> {
    let from_env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    if let Some(t) = flag.filter(|t| !t.trim().is_empty()) {
        return Some((t.trim().to_owned(), "--fly-token"));
    }
    if let Some(t) = from_env("FLY_API_TOKEN") {
        return Some((t.trim().to_owned(), "FLY_API_TOKEN"));
    }
    if let Some(t) = from_env("FLY_TOKEN") {
        return Some((t.trim().to_owned(), "FLY_TOKEN"));
    }
    let config = home?.join(".fly").join("config.yml");
    let text = std::fs::read_to_string(config).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("access_token:"))
        .map(|v| v.trim().trim_matches(|c| c == '"' || c == '\'').to_owned())
        .filter(|v| !v.is_empty())
        .map(|t| (t, "the flyctl login (~/.fly/config.yml)"))
}

/// reqwest as the client's transport.
#[derive(Debug, Clone)]
pub struct Reqwest(reqwest::Client);

impl Reqwest {
    pub fn new() -> Self {
        Self(
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_else(|_| reqwest::Client::new()),
        )
    }
}

impl Default for Reqwest {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpTransport for Reqwest {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, String> {
        let method =
            reqwest::Method::from_bytes(req.method.as_bytes()).map_err(|e| e.to_string())?;
        let mut b = self.0.request(method, &req.url);
        for (k, v) in &req.headers {
            b = b.header(k, v);
        }
        if let Some(body) = req.body {
            b = b.body(body);
        }
        let resp = b.send().await.map_err(|e| e.without_url().to_string())?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = resp
            .bytes()
            .await
            .map_err(|e| e.without_url().to_string())?;
        Ok(HttpResponse {
            status,
            headers,
            body: body.to_vec(),
        })
    }

    async fn sleep(&self, millis: u64) {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }
}

/// The Fly backend.
#[derive(Debug, Clone)]
pub struct Fly {
    client: Arc<FlyClient<Reqwest>>,
    cfg: FlyConfig,
    app: String,
    instance: String,
    host: String,
    /// Machine ids by computer id (a computer's machine changes only on factory reset).
    ids: Arc<Mutex<HashMap<String, String>>>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct FlyState {
    app: String,
    org: String,
}

impl Fly {
    /// Connects: checks the token and makes sure the app exists (creating and remembering
    /// a generated one on first use).
    pub async fn open(
        cfg: FlyConfig,
        state_dir: &Path,
        instance: String,
        host: String,
    ) -> Result<Self, FlyBackendError> {
        let client = FlyClient::new(cfg.api_url.clone(), cfg.token.clone(), Reqwest::new());
        let state_file = state_dir.join("fly.json");
        let app = match &cfg.app {
            Some(app) => {
                if client.get_app(app).await?.is_none() {
                    client.create_app(app, &cfg.org).await?;
                    tracing::info!(app, org = cfg.org, "created the Fly app");
                }
                app.clone()
            }
            None => match read_state(&state_file)? {
                Some(s) if client.get_app(&s.app).await?.is_some() => s.app,
                _ => {
                    let app = default_app_name(rand::random());
                    client.create_app(&app, &cfg.org).await?;
                    write_state(
                        &state_file,
                        &FlyState {
                            app: app.clone(),
                            org: cfg.org.clone(),
                        },
                    )?;
                    tracing::info!(
                        app,
                        org = cfg.org,
                        "created a Fly app for computers (remembered in fly.json)"
                    );
                    app
                }
            },
        };
        Ok(Self {
            client: Arc::new(client),
            cfg,
            app,
            instance,
            host,
            ids: Arc::default(),
        })
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    fn record(&self, m: &Machine) -> Option<ContainerRecord> {
        let id = m.metadata.get(tags::ID)?.clone();
        let state = match m.state.as_str() {
            "started" => "running",
            "created" | "starting" => "created",
            other => other,
        };
        Some(ContainerRecord {
            computer_id: id,
            container_id: m.id.clone(),
            temporary: m.metadata.get(tags::TEMPORARY).map(String::as_str) == Some("true"),
            instance: m.metadata.get(tags::INSTANCE).cloned(),
            host: m.metadata.get(tags::HOST).cloned(),
            image: m.image.clone().unwrap_or_default(),
            state: state.to_owned(),
            created_at: m.created_at.clone().unwrap_or_default(),
        })
    }

    fn live(m: &Machine) -> bool {
        !matches!(m.state.as_str(), "destroyed" | "destroying")
    }

    async fn machine(&self, id: &str) -> Result<Option<Machine>, FlyBackendError> {
        let found = self
            .client
            .list_machines(&self.app, &[(tags::ID, id)])
            .await?
            .into_iter()
            .find(Self::live);
        let mut ids = self.ids.lock().unwrap_or_else(|p| p.into_inner());
        match &found {
            Some(m) => ids.insert(id.to_owned(), m.id.clone()),
            None => ids.remove(id),
        };
        Ok(found)
    }

    async fn machine_id(&self, id: &str) -> Result<String, FlyBackendError> {
        let cached = self
            .ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned();
        match cached {
            Some(m) => Ok(m),
            None => self
                .machine(id)
                .await?
                .map(|m| m.id)
                .ok_or_else(|| FlyBackendError::NotFound(id.to_owned())),
        }
    }

    pub async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, FlyBackendError> {
        Ok(self.machine(id).await?.and_then(|m| self.record(&m)))
    }

    pub async fn list(&self) -> Result<Vec<ContainerRecord>, FlyBackendError> {
        Ok(self
            .client
            .list_machines(&self.app, &[(tags::MANAGED, "true")])
            .await?
            .iter()
            .filter(|m| Self::live(m))
            .filter_map(|m| self.record(m))
            .collect())
    }

    pub async fn create(
        &self,
        id: &str,
        temporary: bool,
    ) -> Result<ContainerRecord, FlyBackendError> {
        let metadata = tags::of(id, temporary, &self.instance, &self.host);
        let spec = MachineSpec {
            name: id.to_owned(),
            region: self.cfg.region.clone(),
            image: self.cfg.image.clone(),
            cpu_kind: self.cfg.cpu_kind.clone(),
            cpus: self.cfg.cpus,
            memory_mb: self.cfg.memory_mb,
            rootfs_persist: Some(if temporary { "never" } else { "always" }.to_owned()),
            rootfs_size_gb: self.cfg.rootfs_size_gb,
            metadata,
            init_exec: Some(vec!["/bin/sh".into(), "-c".into(), KEEPALIVE.into()]),
        };
        let m = match self.client.create_machine(&self.app, &spec).await {
            Ok(m) => m,
            Err(FlyError::Conflict(_)) => {
                // Another server made it first: use theirs (the lifecycle policy decides).
                return self
                    .find(id)
                    .await?
                    .ok_or_else(|| FlyBackendError::NotFound(id.to_owned()));
            }
            Err(e) => return Err(e.into()),
        };
        self.client.wait(&self.app, &m.id, "started", 120).await?;
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned(), m.id.clone());
        let mut m = m;
        m.state = "started".into();
        self.record(&m)
            .ok_or_else(|| FlyBackendError::NotFound(id.to_owned()))
    }

    pub async fn start(&self, id: &str) -> Result<(), FlyBackendError> {
        let m = self
            .machine(id)
            .await?
            .ok_or_else(|| FlyBackendError::NotFound(id.to_owned()))?;
        if m.state != "started" {
            if m.state != "starting" {
                self.client.start(&self.app, &m.id).await?;
            }
            self.client.wait(&self.app, &m.id, "started", 120).await?;
        }
        Ok(())
    }

    pub async fn restart(&self, id: &str) -> Result<(), FlyBackendError> {
        let mid = self.machine_id(id).await?;
        self.client.restart(&self.app, &mid).await?;
        self.client.wait(&self.app, &mid, "started", 120).await?;
        Ok(())
    }

    pub async fn remove(&self, id: &str) -> Result<(), FlyBackendError> {
        if let Some(m) = self.machine(id).await? {
            match self.client.destroy(&self.app, &m.id, true).await {
                Ok(()) => {
                    // The name is free again only once the machine is gone.
                    self.client.wait(&self.app, &m.id, "destroyed", 60).await?;
                }
                Err(FlyError::NotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.ids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        Ok(())
    }

    /// Destroys the machine and makes a fresh one with the same id and kind.
    pub async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
    ) -> Result<ContainerRecord, FlyBackendError> {
        self.remove(id).await?;
        self.create(id, temporary).await
    }

    /// Runs one command as a job on the machine ([`JOB`]): the first exec request starts
    /// it and waits up to `sync_exec_secs` for it (the exec endpoint's proxy does not hold a
    /// request much longer than a minute), so a short command costs one request; a longer
    /// one is polled by further requests, each waiting up to `sync_exec_secs`, until it
    /// ends or its timeout kills its process group (output so far kept, 124). Polls and the
    /// kill are safe to repeat, so server errors on them are retried.
    pub async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, FlyBackendError> {
        let mid = self.machine_id(id).await?;
        let started = Instant::now();
        let deadline = started + spec.timeout;
        let job = format!("{:016x}", rand::random::<u64>());
        let limit = (spec.output_limit + 1).to_string();
        let window = |now: Instant| {
            deadline
                .saturating_duration_since(now)
                .as_secs()
                .clamp(1, self.cfg.sync_exec_secs)
        };
        let job_argv = |mode: &str, wait: u64| -> Vec<String> {
            let mut v = vec![
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                JOB.to_owned(),
                "msc-job".to_owned(),
                mode.to_owned(),
                job.clone(),
                wait.to_string(),
                limit.clone(),
            ];
            if mode == "start" {
                v.extend(program_argv(spec));
            }
            v
        };
        let wait = window(started);
        let mut out = self
            .client
            .exec(
                &self.app,
                &mid,
                &job_argv("start", wait),
                Some(spec.stdin.as_deref().unwrap_or("")),
                wait + 15,
            )
            .await?;
        let mut timed_out = false;
        while still_running(&out, &job) {
            let now = Instant::now();
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
        let mut collector = OutputCollector::new(spec.output_limit);
        collector.push(Stream::Stdout, out.stdout.as_bytes());
        collector.push(Stream::Stderr, strip_marker(&out.stderr, &job).as_bytes());
        let (stdout, stderr, truncated) = collector.finish();
        Ok(ExecOutcome {
            stdout,
            stderr,
            exit_code,
            duration_ms: started.elapsed().as_millis() as u64,
            truncated_at: truncated.then_some(spec.output_limit as u64),
            timed_out_after: timed_out.then_some(spec.timeout.as_secs()),
        })
    }
}

/// The job runner on the machine: `JOB MODE JOB_ID WAIT LIMIT [PROGRAM...]`.
/// `start` saves stdin and starts the program in its own session with its output in
/// files; `start` and `poll` wait up to WAIT seconds for it; when it has ended, its output
/// (at most LIMIT bytes of each stream) is printed and the status is the program's; when
/// not, the last stderr line is `msc-running JOB_ID`. `kill` kills the job's process group
/// and prints what it wrote so far.
const JOB: &str = r#"m=$1 j=$2 w=$3 l=$4; shift 4; d=/tmp/.msc-jobs; f=$d/$j
show() { head -c "$l" "$f.out" 2>/dev/null; head -c "$l" "$f.err" >&2 2>/dev/null; }
case $m in
start) mkdir -p "$d" && cat > "$f.in" || exit 125
  setsid sh -c 'f=$1; shift; "$@" < "$f.in" > "$f.out" 2> "$f.err"; echo $? > "$f.tmp"; mv "$f.tmp" "$f.rc"' msc "$f" "$@" < /dev/null > /dev/null 2>&1 &
  echo $! > "$f.pid" ;;
kill) p=$(cat "$f.pid" 2>/dev/null); [ -n "$p" ] && { kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null; }
  show; rm -f "$f".*; exit 124 ;;
esac
i=0; n=$((w * 20))
while [ ! -e "$f.rc" ] && [ "$i" -lt "$n" ]; do sleep 0.05; i=$((i + 1)); done
if [ -e "$f.rc" ]; then show; r=$(cat "$f.rc"); rm -f "$f".*; exit "$r"; fi
echo "msc-running $j" >&2; exit 0"#;

/// Did the job runner say the job is still running?
fn still_running(out: &shared::providers::fly::ExecOutput, job: &str) -> bool {
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

/// The argv run on the machine: the cd wrapper, then the program (`bash -c` for a shell
/// command when the image has bash, else `sh -c`; or the caller's argv).
pub(crate) fn program_argv(spec: &ExecSpec) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        CD_WRAPPER.to_owned(),
        "msc-exec".to_owned(),
        spec.working_directory
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| "/".into()),
    ];
    match &spec.shell_command {
        Some((Some(shell), command)) => {
            argv.extend([shell.clone(), "-c".into(), command.clone()]);
        }
        Some((None, command)) => {
            argv.extend([
                "/bin/sh".into(),
                "-c".into(),
                "if [ -x /bin/bash ]; then exec /bin/bash -c \"$1\"; else exec /bin/sh -c \"$1\"; fi"
                    .into(),
                "sh".into(),
                command.clone(),
            ]);
        }
        None => argv.extend(spec.argv.iter().cloned()),
    }
    argv
}

fn read_state(path: &Path) -> Result<Option<FlyState>, FlyBackendError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| FlyBackendError::State {
                path: path.display().to_string(),
                detail: e.to_string(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FlyBackendError::State {
            path: path.display().to_string(),
            detail: e.to_string(),
        }),
    }
}

fn write_state(path: &Path, s: &FlyState) -> Result<(), FlyBackendError> {
    let err = |e: &dyn std::fmt::Display| FlyBackendError::State {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(&e))?;
    }
    let bytes = serde_json::to_vec_pretty(s).map_err(|e| err(&e))?;
    std::fs::write(path, bytes).map_err(|e| err(&e))
}

/// The exact command that logs in, for the start-up error.
pub fn login_hint(fly_cli: &str) -> String {
    format!("{fly_cli} auth login")
}

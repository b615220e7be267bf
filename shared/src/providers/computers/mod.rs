//! Our computers on a cloud provider, over the sans-I/O clients: which machine or sandbox
//! is which computer (metadata [`tags`]), the lifecycle operations, and running one command.
//!
//! Both the local binary (`--backend fly|e2b`) and the Worker (computers placed directly on
//! Fly or E2B) use [`fly::FlyComputers`] and [`e2b::E2bComputers`]; they differ only in the
//! transport, in the ids (the Worker prefixes each with its team) and in the [`Owner`]
//! written on temporaries.

pub mod e2b;
pub mod fly;

use std::future::Future;

use super::e2b::E2bError;
use super::fly::FlyError;
use crate::capabilities::BackendKind;
use crate::egress::Policy;
use crate::files::over_exec::{OverExec, PathInfo, no_file_api};
use crate::maybe_send::{MaybeSend, MaybeSync};
use crate::result::ExecOutcome;

/// Metadata keys that tag a cloud computer (Fly machine metadata, E2B sandbox metadata).
pub mod tags {
    pub const MANAGED: &str = "mcp_sandbox";
    pub const ID: &str = "mcp_computer";
    pub const TEMPORARY: &str = "mcp_temporary";
    pub const INSTANCE: &str = "mcp_instance";
    pub const HOST: &str = "mcp_host";
    /// The team an executor made the computer for (absent for a local server's).
    pub const TEAM: &str = "mcp_team";
    /// The computer's network policy (SPEC §3.11), JSON, when it is not `all` (E2B).
    pub const NETWORK: &str = "mcp_network";

    /// The tags of computer `id` (of `team`, when an executor makes it for one);
    /// temporaries also name the server that owns them (so the next start on that host
    /// can reap them when that server died).
    pub fn of(
        id: &str,
        temporary: bool,
        owner: &super::Owner,
        team: Option<&str>,
    ) -> Vec<(String, String)> {
        let mut t = vec![
            (MANAGED.to_owned(), "true".to_owned()),
            (ID.to_owned(), id.to_owned()),
            (TEMPORARY.to_owned(), temporary.to_string()),
        ];
        if let Some(team) = team {
            t.push((TEAM.to_owned(), team.to_owned()));
        }
        if temporary {
            t.push((INSTANCE.to_owned(), owner.instance.clone()));
            t.push((HOST.to_owned(), owner.host.clone()));
        }
        t
    }
}

/// Who owns the temporaries made here: a server instance on a host (the gateway uses its
/// own names; its Durable Objects reap its temporaries).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Owner {
    pub instance: String,
    pub host: String,
}

/// One computer as its backend shows it (the executor's Docker and WASM backends use it
/// too, as `ContainerRecord`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Computer {
    pub computer_id: String,
    /// The machine, sandbox or container id.
    pub provider_id: String,
    pub temporary: bool,
    pub instance: Option<String>,
    pub host: Option<String>,
    pub image: String,
    /// `running`, `created`, `stopped`, `paused`, ... (the provider's word otherwise).
    pub state: crate::lifecycle::ComputerState,
    /// RFC 3339, UTC (empty when unknown).
    pub created_at: String,
    /// The team whose computer it is, when an executor made it for the gateway (Docker
    /// labels, WASM metadata, the cloud tag [`tags::TEAM`]); `None` for a local server's
    /// computers.
    pub team: Option<String>,
    /// Its network policy (SPEC §3.11) where the backend records one (Docker's label
    /// `msc.network`); `None`: not recorded (the server's policy applies).
    pub network: Option<crate::egress::Policy>,
}

/// What to run, in a form every provider can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program<'a> {
    /// A shell command; `shell` `None` = bash when the image has it, else `/bin/sh`.
    Shell {
        shell: Option<&'a str>,
        command: &'a str,
    },
    /// An argv, executed directly.
    Argv(&'a [String]),
}

/// One command for [`fly::FlyComputers::exec`] / [`e2b::E2bComputers::exec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderExec {
    /// The argv to run on the machine, from [`program_argv`].
    pub argv: Vec<String>,
    pub stdin: Option<String>,
    pub timeout_ms: u64,
    /// Combined stdout + stderr bytes kept (the result says when it was hit).
    pub output_limit: usize,
    /// A random number naming the command's job on the machine.
    pub nonce: u64,
}

/// Runs the program in `$2…` in directory `$1` (126 with the reason when it is missing).
const CD_WRAPPER: &str = "cd -- \"$1\" 2>/dev/null || { echo \"cd: $1: No such file or directory\" >&2; exit 126; }; shift; exec \"$@\"";

/// The argv run on the machine: the cd wrapper, `env NAME=value…` when the call adds to
/// the environment (names are validated, so none looks like an option of `env`), then the
/// program (`bash -c` for a shell command when the image has bash, else `sh -c`; or the
/// caller's argv).
pub fn program_argv(
    working_directory: Option<&str>,
    env: &[(String, String)],
    program: Program<'_>,
) -> Vec<String> {
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        CD_WRAPPER.to_owned(),
        "msc-exec".to_owned(),
        working_directory
            .filter(|d| !d.is_empty())
            .unwrap_or("/")
            .to_owned(),
    ];
    if !env.is_empty() {
        argv.push("env".to_owned());
        argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    }
    match program {
        Program::Shell {
            shell: Some(shell),
            command,
        } => {
            argv.extend([shell.to_owned(), "-c".into(), command.to_owned()]);
        }
        Program::Shell {
            shell: None,
            command,
        } => {
            argv.extend([
                "/bin/sh".into(),
                "-c".into(),
                "if [ -x /bin/bash ]; then exec /bin/bash -c \"$1\"; else exec /bin/sh -c \"$1\"; fi"
                    .into(),
                "sh".into(),
                command.to_owned(),
            ]);
        }
        Program::Argv(a) => argv.extend(a.iter().cloned()),
    }
    argv
}

/// The computers of one provider account: what the local binary's backends and the
/// Worker's direct placement both drive. Ids are whatever the caller uses as computer ids
/// (the Worker's carry the team prefix).
pub trait CloudComputers: MaybeSync {
    /// [`BackendKind::Fly`] or [`BackendKind::E2b`] (its name is the `backend` shown in
    /// lists).
    fn kind(&self) -> BackendKind;

    /// The caller's clock, in milliseconds (the transport's): a job's `yield_ms` counts
    /// from its launch.
    fn now_ms(&self) -> u64;

    /// Gets the account ready on first use (Fly: the app exists); cheap afterwards.
    fn prepare(&self) -> impl Future<Output = Result<(), ComputersError>> + MaybeSend;

    fn find(
        &self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Computer>, ComputersError>> + MaybeSend;

    /// Every computer whose id starts with `prefix` ("" = all).
    fn list(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<Computer>, ComputersError>> + MaybeSend;

    /// Makes computer `id`, tagged with `team` when an executor makes it for one, confined
    /// to `network` by the provider's own rules (refused where it has none: Fly).
    fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
    ) -> impl Future<Output = Result<Computer, ComputersError>> + MaybeSend;

    /// Makes a stopped, suspended or paused computer run again.
    fn start(&self, id: &str) -> impl Future<Output = Result<(), ComputersError>> + MaybeSend;

    fn restart(&self, id: &str) -> impl Future<Output = Result<(), ComputersError>> + MaybeSend;

    /// Removes the computer; a missing one is not an error.
    fn remove(&self, id: &str) -> impl Future<Output = Result<(), ComputersError>> + MaybeSend;

    /// Removes the computer and makes a fresh one with the same id and kind.
    fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &Policy,
    ) -> impl Future<Output = Result<Computer, ComputersError>> + MaybeSend {
        async move {
            self.remove(id).await?;
            self.create(id, temporary, team, network).await
        }
    }

    fn exec(
        &self,
        id: &str,
        ex: &ProviderExec,
    ) -> impl Future<Output = Result<ExecOutcome, ComputersError>> + MaybeSend;

    /// Kills the command `ex` started by [`CloudComputers::exec`] (when its call was
    /// cancelled); best effort, errors are dropped.
    fn kill(&self, id: &str, ex: &ProviderExec) -> impl Future<Output = ()> + MaybeSend;

    /// Whether the provider has a file API that the `file_*` methods below serve (E2B's
    /// envd); otherwise files move through [`CloudComputers::exec`] alone
    /// (`crate::files::over_exec`).
    fn moves_files(&self) -> bool {
        false
    }

    /// What `path` is on computer `id` (`None`: it does not exist).
    fn file_stat(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<Option<PathInfo>, OverExec<ComputersError>>> + MaybeSend {
        let _ = (id, path);
        async { Err(no_file_api()) }
    }

    /// File `path` of computer `id`, whole.
    fn file_download(
        &self,
        id: &str,
        path: &str,
    ) -> impl Future<Output = Result<Vec<u8>, OverExec<ComputersError>>> + MaybeSend {
        let _ = (id, path);
        async { Err(no_file_api()) }
    }

    /// Writes `bytes` to `path` on computer `id` whole (missing parents are made).
    fn file_upload(
        &self,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> impl Future<Output = Result<(), OverExec<ComputersError>>> + MaybeSend {
        let _ = (id, path, bytes);
        async { Err(no_file_api()) }
    }
}

/// Why an operation on a cloud computer failed. Messages are meant for an AI agent and
/// operators; they never contain credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputersError {
    #[error(transparent)]
    Fly(#[from] FlyError),
    #[error(transparent)]
    E2b(#[from] E2bError),
    #[error(
        "computer {0:?} does not exist; create it with computer_create or pass it to the exec tool"
    )]
    NotFound(String),
    /// A network policy the provider's rules cannot hold (nothing was made).
    #[error(transparent)]
    Network(#[from] NetworkError),
}

/// A network policy (SPEC §3.11) a provider cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// A rule its allow lists cannot hold (E2B: a name with a port).
    #[error(transparent)]
    Ported(#[from] crate::egress::PortedRule),
    /// Any policy but `all` (Fly Machines).
    #[error(
        "network {0}: Fly Machines have no egress control, so a Fly computer cannot be confined to it; leave `network` out"
    )]
    Unconfinable(Policy),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_argv_wraps_the_directory_and_the_program() {
        let argv = program_argv(
            Some("/work"),
            &[],
            Program::Argv(&["ls".to_owned(), "-l".to_owned()]),
        );
        assert_eq!(&argv[..2], &["/bin/sh", "-c"]);
        assert_eq!(argv[4], "/work");
        assert_eq!(&argv[5..], &["ls", "-l"]);
        let argv = program_argv(
            None,
            &[],
            Program::Shell {
                shell: Some("/bin/zsh"),
                command: "echo hi",
            },
        );
        assert_eq!(argv[4], "/");
        assert_eq!(&argv[5..], &["/bin/zsh", "-c", "echo hi"]);
        let argv = program_argv(
            Some(""),
            &[],
            Program::Shell {
                shell: None,
                command: "echo hi",
            },
        );
        assert_eq!(argv[4], "/");
        assert_eq!(argv.last().map(String::as_str), Some("echo hi"));
        let env = [
            ("A".to_owned(), "1 2".to_owned()),
            ("B_".to_owned(), String::new()),
        ];
        let argv = program_argv(None, &env, Program::Argv(&["ls".to_owned()]));
        assert_eq!(&argv[5..], &["env", "A=1 2", "B_=", "ls"]);
    }

    #[test]
    fn temporaries_name_their_owner() {
        let owner = Owner {
            instance: "i1".into(),
            host: "h1".into(),
        };
        let t = tags::of("box", true, &owner, None);
        assert!(t.contains(&(tags::INSTANCE.to_owned(), "i1".to_owned())));
        let p = tags::of("box", false, &owner, Some("t"));
        assert!(!p.iter().any(|(k, _)| k == tags::INSTANCE));
        assert!(p.contains(&(tags::TEMPORARY.to_owned(), "false".to_owned())));
    }
}

//! `--docker-run-flag`: the `docker run` options we translate to the Engine API.
//!
//! The server talks to the Engine API, not the CLI, so each flag is mapped explicitly.
//! Anything not in the table below is refused at start-up with the list of what works,
//! instead of being silently ignored.

/// Flags we understand, for error messages.
pub const SUPPORTED: &[&str] = &[
    "--pids-limit=N",
    "--read-only",
    "--cap-add=CAP",
    "--cap-drop=CAP",
    "--security-opt=OPT",
    "--tmpfs=PATH[:OPTS]",
    "-e/--env=K=V",
    "-u/--user=USER",
    "--shm-size=SIZE",
    "-v/--volume=SRC:DST[:ro]",
    "--privileged",
    "-w/--workdir=DIR",
    "-h/--hostname=NAME",
    "--add-host=HOST:IP",
    "--dns=IP",
    "-l/--label=K=V",
    "--memory-swap=SIZE",
    "--cpuset-cpus=LIST",
    "--ulimit=NAME=SOFT[:HARD]",
    "--network=MODE",
    "--runtime=NAME",
    "--device=PATH",
    "--init=false",
];

/// The default pids limit (a fork bomb stops there); `--pids-limit` changes it, `-1` lifts it.
pub const DEFAULT_PIDS_LIMIT: i64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    #[error("--docker-run-flag {flag:?} is not supported; supported: {}", SUPPORTED.join(", "))]
    Unsupported { flag: String },
    #[error("--docker-run-flag {flag:?}: {why}")]
    BadValue { flag: String, why: String },
}

/// The translated flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerRunFlags {
    pub pids_limit: Option<i64>,
    pub read_only: bool,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub security_opt: Vec<String>,
    pub tmpfs: Vec<(String, String)>,
    pub env: Vec<String>,
    pub user: Option<String>,
    pub shm_size: Option<i64>,
    pub binds: Vec<String>,
    pub privileged: bool,
    pub workdir: Option<String>,
    pub hostname: Option<String>,
    pub extra_hosts: Vec<String>,
    pub dns: Vec<String>,
    pub labels: Vec<(String, String)>,
    pub memory_swap: Option<i64>,
    pub cpuset_cpus: Option<String>,
    pub ulimits: Vec<(String, i64, i64)>,
    pub network_mode: Option<String>,
    pub runtime: Option<String>,
    pub devices: Vec<String>,
    pub init: bool,
}

impl Default for DockerRunFlags {
    fn default() -> Self {
        Self {
            pids_limit: Some(DEFAULT_PIDS_LIMIT),
            read_only: false,
            cap_add: Vec::new(),
            cap_drop: Vec::new(),
            security_opt: Vec::new(),
            tmpfs: Vec::new(),
            env: Vec::new(),
            user: None,
            shm_size: None,
            binds: Vec::new(),
            privileged: false,
            workdir: None,
            hostname: None,
            extra_hosts: Vec::new(),
            dns: Vec::new(),
            labels: Vec::new(),
            memory_swap: None,
            cpuset_cpus: None,
            ulimits: Vec::new(),
            network_mode: None,
            runtime: None,
            devices: Vec::new(),
            init: true,
        }
    }
}

fn split(raw: &str) -> (String, Option<String>) {
    let raw = raw.trim();
    match raw.find(|c: char| c == '=' || c.is_whitespace()) {
        Some(i) => (raw[..i].to_owned(), Some(raw[i + 1..].trim().to_owned())),
        None => (raw.to_owned(), None),
    }
}

fn parse_bool(flag: &str, value: Option<&str>) -> Result<bool, FlagError> {
    match value {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(_) => Err(FlagError::BadValue {
            flag: flag.into(),
            why: "expected true or false".into(),
        }),
    }
}

/// Parses every `--docker-run-flag` value.
pub fn parse_docker_run_flags(raw: &[String]) -> Result<DockerRunFlags, FlagError> {
    let mut f = DockerRunFlags::default();
    for item in raw {
        let (key, value) = split(item);
        let bad = |why: &str| FlagError::BadValue {
            flag: item.clone(),
            why: why.into(),
        };
        let need = || {
            value
                .clone()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| bad("a value is needed"))
        };
        match key.as_str() {
            "--pids-limit" => {
                let n: i64 = need()?
                    .parse()
                    .map_err(|_| bad("expected an integer (-1 for unlimited)"))?;
                f.pids_limit = if n <= 0 { None } else { Some(n) };
            }
            "--read-only" => f.read_only = parse_bool(item, value.as_deref())?,
            "--privileged" => f.privileged = parse_bool(item, value.as_deref())?,
            "--init" => f.init = parse_bool(item, value.as_deref())?,
            "--cap-add" => f.cap_add.push(need()?),
            "--cap-drop" => f.cap_drop.push(need()?),
            "--security-opt" => f.security_opt.push(need()?),
            "--tmpfs" => {
                let v = need()?;
                let (path, opts) = v.split_once(':').unwrap_or((v.as_str(), ""));
                if !path.starts_with('/') {
                    return Err(bad("the tmpfs path must be absolute"));
                }
                f.tmpfs.push((path.to_owned(), opts.to_owned()));
            }
            "-e" | "--env" => {
                let v = need()?;
                if !v.contains('=') {
                    return Err(bad(
                        "use KEY=VALUE (the server's own environment is never passed through)",
                    ));
                }
                f.env.push(v);
            }
            "-u" | "--user" => f.user = Some(need()?),
            "--shm-size" => {
                f.shm_size = Some(
                    crate::spec::parse_size(&need()?)
                        .ok_or_else(|| bad("expected a size such as 64m"))?,
                )
            }
            "--memory-swap" => {
                let v = need()?;
                f.memory_swap = Some(if v == "-1" {
                    -1
                } else {
                    crate::spec::parse_size(&v)
                        .ok_or_else(|| bad("expected a size such as 1g, or -1"))?
                });
            }
            "-v" | "--volume" => {
                let v = need()?;
                if v.split(':').count() < 2 {
                    return Err(bad("use /host/path:/container/path[:ro]"));
                }
                f.binds.push(v);
            }
            "-w" | "--workdir" => f.workdir = Some(need()?),
            "-h" | "--hostname" => f.hostname = Some(need()?),
            "--add-host" => f.extra_hosts.push(need()?),
            "--dns" => f.dns.push(need()?),
            "-l" | "--label" => {
                let v = need()?;
                let (k, val) = v.split_once('=').unwrap_or((v.as_str(), ""));
                if k.starts_with("kilntainers") || k.starts_with("mcp-sandbox") {
                    return Err(bad(
                        "labels starting with kilntainers or mcp-sandbox are reserved",
                    ));
                }
                f.labels.push((k.to_owned(), val.to_owned()));
            }
            "--cpuset-cpus" => f.cpuset_cpus = Some(need()?),
            "--ulimit" => {
                let v = need()?;
                let (name, limits) = v
                    .split_once('=')
                    .ok_or_else(|| bad("use NAME=SOFT[:HARD]"))?;
                let (soft, hard) = limits.split_once(':').unwrap_or((limits, limits));
                let soft: i64 = soft.parse().map_err(|_| bad("limits must be integers"))?;
                let hard: i64 = hard.parse().map_err(|_| bad("limits must be integers"))?;
                f.ulimits.push((name.to_owned(), soft, hard));
            }
            "--network" | "--net" => f.network_mode = Some(need()?),
            "--runtime" => f.runtime = Some(need()?),
            "--device" => f.devices.push(need()?),
            _ => return Err(FlagError::Unsupported { flag: item.clone() }),
        }
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(items: &[&str]) -> Result<DockerRunFlags, FlagError> {
        parse_docker_run_flags(&items.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn translates_common_flags() {
        let f = p(&[
            "--pids-limit=256",
            "--read-only",
            "--cap-drop ALL",
            "-e A=b",
            "--tmpfs=/run:size=1m",
            "--ulimit=nofile=1024:2048",
            "--init=false",
        ])
        .unwrap();
        assert_eq!(f.pids_limit, Some(256));
        assert!(f.read_only);
        assert_eq!(f.cap_drop, ["ALL"]);
        assert_eq!(f.env, ["A=b"]);
        assert_eq!(f.tmpfs, [("/run".to_owned(), "size=1m".to_owned())]);
        assert_eq!(f.ulimits, [("nofile".to_owned(), 1024, 2048)]);
        assert!(!f.init);
        assert_eq!(p(&["--pids-limit=-1"]).unwrap().pids_limit, None);
        assert_eq!(p(&[]).unwrap().pids_limit, Some(DEFAULT_PIDS_LIMIT));
    }

    #[test]
    fn refuses_unknown_and_bad() {
        assert!(matches!(p(&["--rm"]), Err(FlagError::Unsupported { .. })));
        assert!(matches!(
            p(&["--pids-limit=x"]),
            Err(FlagError::BadValue { .. })
        ));
        assert!(matches!(p(&["-e NOEQ"]), Err(FlagError::BadValue { .. })));
        assert!(matches!(
            p(&["--label=kilntainers=true"]),
            Err(FlagError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["--tmpfs=rel"]),
            Err(FlagError::BadValue { .. })
        ));
        let msg = p(&["--bogus"]).unwrap_err().to_string();
        assert!(msg.contains("--pids-limit"), "{msg}");
    }

    fn why(items: &[&str]) -> String {
        match p(items) {
            Err(FlagError::BadValue { why, .. }) => why,
            other => panic!("{items:?}: {other:?}"),
        }
    }

    #[test]
    fn ulimits_take_one_limit_for_both_or_soft_and_hard() {
        let f = p(&["--ulimit=nproc=64", "--ulimit nofile=10:20"]).unwrap();
        assert_eq!(
            f.ulimits,
            [("nproc".to_owned(), 64, 64), ("nofile".to_owned(), 10, 20)]
        );
        assert_eq!(why(&["--ulimit=nofile"]), "use NAME=SOFT[:HARD]");
        assert_eq!(why(&["--ulimit=nofile=a:2"]), "limits must be integers");
        assert_eq!(why(&["--ulimit=nofile=1:b"]), "limits must be integers");
    }

    #[test]
    fn memory_swap_and_shm_take_sizes_and_swap_takes_minus_one() {
        let f = p(&["--memory-swap=-1", "--shm-size=64m"]).unwrap();
        assert_eq!((f.memory_swap, f.shm_size), (Some(-1), Some(64 << 20)));
        assert_eq!(p(&["--memory-swap=1g"]).unwrap().memory_swap, Some(1 << 30));
        assert_eq!(
            why(&["--memory-swap=lots"]),
            "expected a size such as 1g, or -1"
        );
        assert_eq!(why(&["--shm-size=-1"]), "expected a size such as 64m");
    }

    #[test]
    fn a_flag_that_takes_a_value_says_so_when_it_has_none() {
        for flag in [
            "--cap-add",
            "--cap-add=",
            "-u",
            "--dns",
            "--device",
            "--tmpfs",
        ] {
            assert_eq!(why(&[flag]), "a value is needed", "{flag}");
        }
        let e = p(&["--cap-add="]).unwrap_err().to_string();
        assert_eq!(e, "--docker-run-flag \"--cap-add=\": a value is needed");
    }

    #[test]
    fn switches_take_true_or_false_only() {
        let f = p(&["--privileged=true", "--read-only=false"]).unwrap();
        assert!(f.privileged && !f.read_only);
        assert!(p(&["--init"]).unwrap().init);
        assert_eq!(why(&["--privileged=yes"]), "expected true or false");
        assert_eq!(why(&["--init=0"]), "expected true or false");
    }

    #[test]
    fn short_and_long_names_land_in_the_same_place() {
        let short = p(&[
            "-v /a:/b:ro",
            "-w /work",
            "-h box",
            "-l team=x",
            "-u 1000",
            "--net=none",
        ])
        .unwrap();
        let long = p(&[
            "--volume=/a:/b:ro",
            "--workdir=/work",
            "--hostname=box",
            "--label=team=x",
            "--user=1000",
            "--network=none",
        ])
        .unwrap();
        assert_eq!(short, long);
        assert_eq!(short.binds, ["/a:/b:ro"]);
        assert_eq!(short.labels, [("team".to_owned(), "x".to_owned())]);
        assert_eq!(short.network_mode.as_deref(), Some("none"));
        // A label without a value is kept with an empty one.
        assert_eq!(
            p(&["--label=flag"]).unwrap().labels,
            [("flag".to_owned(), String::new())]
        );
        assert_eq!(why(&["-v /only"]), "use /host/path:/container/path[:ro]");
        assert!(why(&["-l mcp-sandbox.owner=me"]).contains("reserved"));
        assert_eq!(p(&["--pids-limit=0"]).unwrap().pids_limit, None);
    }
}

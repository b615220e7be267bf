//! The network policy flags (SPEC §3.11) checked at start: the server's [`Policy`]
//! (`--network`, `--no-network`, `--egress-allow`), pinned names (`--egress-resolve`), the
//! gate's resolver (`--egress-dns`), secrets (`--egress-secret`, their values read from
//! this server's environment) and a private CA (`--egress-ca-file`). Which backends can
//! enforce them is `config`'s check ([`EgressConfig::needs_gate`]).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use shared::egress::{BadPolicy, Policy, normal_name};

use crate::cli::Cli;
pub use crate::egress::secrets::EgressSecret;

/// Why the network flags were refused.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    #[error("--egress-allow: {0}")]
    Rule(BadPolicy),
    #[error(
        "--no-network says computers may connect nowhere, and --egress-allow lists where they may: drop one of them"
    )]
    NoNetworkWithAllow,
    #[error(
        "--egress-resolve {0:?} must be NAME=IP with a host name and an IP address, e.g. pypi.internal=10.0.0.5"
    )]
    Resolve(String),
    #[error(
        "--egress-dns {0:?} must be an IP address or IP:port, e.g. 10.0.0.2 or 10.0.0.2:5353 ([fd00::2]:53 for IPv6)"
    )]
    Dns(String),
    #[error("--egress-secret {0:?}: {1}")]
    Secret(String, &'static str),
    #[error(
        "--egress-secret {0}: the environment variable {0} is not set or empty; the value is read from this server's environment at start (never from the command line): export {0}=... before starting"
    )]
    SecretUnset(String),
    #[error("--egress-secret {0} is given twice: list all its hosts in one flag, NAME=HOST,HOST")]
    SecretTwice(String),
    #[error(
        "--egress-secret needs allow-list mode: the egress gate puts secrets into requests to allowed hosts only; add --egress-allow with the hosts computers may reach (the secret's hosts among them)"
    )]
    SecretWithoutAllow,
    #[error("--egress-ca-file {0:?}: {1}; give a PEM file of CA certificates")]
    CaFile(PathBuf, String),
    /// A network policy this backend cannot enforce (SPEC §3.11: refused at start, never
    /// silently unenforced).
    #[error(
        "{flag} cannot be enforced on {backend} computers ({why}); only Docker/Podman computers can (their connections go through this server's egress gate): use --backend docker, or drop {flag}"
    )]
    Backend {
        flag: &'static str,
        backend: &'static str,
        why: &'static str,
    },
    /// A rule E2B's or Modal's allow lists cannot hold.
    #[error(
        "--egress-allow {rule}: {backend} allow lists name hosts and networks without ports; drop the port (a name alone allows the web ports, 80 and 443) or use --backend docker"
    )]
    ProviderPort { rule: String, backend: &'static str },
    /// A secret for a host no computer may reach.
    #[error(
        "--egress-secret {0}: its host {1} is not allowed by --egress-allow, so no computer could send it there; add --egress-allow {1}"
    )]
    SecretHostNotAllowed(String, String),
    #[error(
        "--egress-secret cannot be used with --docker-run-flag --read-only: the egress gate puts its CA certificate into each computer's trust stores (/etc/ssl/certs), which needs a writable root filesystem"
    )]
    SecretReadOnly,
}

/// The network policy and the egress gate's settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EgressConfig {
    /// The server's policy: new computers get it unless their agent narrows it.
    pub policy: Policy,
    /// `--egress-resolve`: names pinned to addresses.
    pub resolve: Vec<(String, IpAddr)>,
    /// `--egress-dns`: the gate's upstream resolver (`None`: the system's).
    pub dns: Option<SocketAddr>,
    /// `--egress-secret`.
    pub secrets: Vec<EgressSecret>,
    /// `--egress-ca-file`: a private CA for upstream verification.
    pub ca_file: Option<PathBuf>,
}

impl EgressConfig {
    /// The flags of `cli`; `env` reads this server's environment (a secret's value).
    pub fn from_cli(cli: &Cli, env: impl Fn(&str) -> Option<String>) -> Result<Self, EgressError> {
        let allow: Vec<String> = cli
            .egress_allow
            .iter()
            .map(|r| r.trim().to_owned())
            .filter(|r| !r.is_empty())
            .collect();
        if cli.no_network && !allow.is_empty() {
            return Err(EgressError::NoNetworkWithAllow);
        }
        let policy = Policy::of_flags(!cli.no_network, &allow).map_err(EgressError::Rule)?;
        let resolve = cli
            .egress_resolve
            .iter()
            .map(|raw| parse_resolve(raw).ok_or_else(|| EgressError::Resolve(raw.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let dns = cli
            .egress_dns
            .as_deref()
            .map(|raw| parse_dns(raw).ok_or_else(|| EgressError::Dns(raw.to_owned())))
            .transpose()?;
        let mut secrets: Vec<EgressSecret> = Vec::new();
        for raw in &cli.egress_secret {
            let (name, hosts) = parse_secret(raw)?;
            if secrets.iter().any(|s| s.name == name) {
                return Err(EgressError::SecretTwice(name));
            }
            let value = env(&name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| EgressError::SecretUnset(name.clone()))?;
            secrets.push(EgressSecret { name, hosts, value });
        }
        if !secrets.is_empty() && !matches!(policy, Policy::Allow(_)) {
            return Err(EgressError::SecretWithoutAllow);
        }
        for s in &secrets {
            if let Some(h) = s.hosts.iter().find(|h| policy.allows_lookup(h).is_err()) {
                return Err(EgressError::SecretHostNotAllowed(s.name.clone(), h.clone()));
            }
        }
        if let Some(path) = &cli.egress_ca_file {
            check_ca_file(path)?;
        }
        Ok(Self {
            policy,
            resolve,
            dns,
            secrets,
            ca_file: cli.egress_ca_file.clone(),
        })
    }

    /// What only the egress gate (Docker/Podman computers) can enforce, as the flag that
    /// asks for it: an allow list or a secret. `None`: nothing (`all` and `none` need no
    /// gate).
    pub fn needs_gate(&self) -> Option<&'static str> {
        if !self.secrets.is_empty() {
            Some("--egress-secret")
        } else if matches!(self.policy, Policy::Allow(_)) {
            Some("--egress-allow")
        } else {
            None
        }
    }
}

/// Where a server's computers live, as far as enforcing a network policy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcer {
    /// Docker/Podman: the egress gate enforces it all.
    Gate,
    /// WebAssembly computers: no network at all.
    Wasm,
    Fly,
    /// E2B: its own allow lists of names and networks (no ports, no placeholders).
    E2b,
    /// Modal: likewise (`NetworkAccess`).
    Modal,
}

impl EgressConfig {
    /// The flag `enforcer` cannot enforce (`--no-network`, or the gate's `--egress-allow`
    /// / `--egress-secret`) and why, or `None` where it can.
    pub fn unenforced(&self, enforcer: Enforcer) -> Option<(&'static str, &'static str)> {
        let flag = self
            .needs_gate()
            .or((self.policy == Policy::None).then_some("--no-network"))?;
        let why = match enforcer {
            Enforcer::Gate => return None,
            Enforcer::Wasm if flag == "--no-network" => return None,
            Enforcer::Wasm => "WebAssembly computers have no network at all",
            Enforcer::Fly => "Fly Machines have no egress control",
            Enforcer::E2b if flag == "--egress-secret" => {
                "E2B's network rules cannot put a value in place of a placeholder; only the egress gate can"
            }
            Enforcer::Modal if flag == "--egress-secret" => {
                "Modal's network rules have no header injection; only the egress gate can put a secret in"
            }
            Enforcer::E2b | Enforcer::Modal => return None,
        };
        Some((flag, why))
    }

    /// The allow-list rule a provider's lists cannot hold (a name with a port of its own),
    /// refused at start for E2B and Modal.
    pub fn provider_rule(&self, enforcer: Enforcer) -> Option<String> {
        let provider = match enforcer {
            Enforcer::E2b => "E2B",
            Enforcer::Modal => "Modal",
            _ => return None,
        };
        let refused = self.policy.destinations(provider).err()?;
        Some(refused.rule.to_string())
    }

    /// `Ok` when `backend`'s computers (kept by `enforcer`) can hold these flags; else the
    /// refusal at start (SPEC §3.11: never silently unenforced).
    pub fn enforceable(
        &self,
        enforcer: Enforcer,
        backend: &'static str,
    ) -> Result<(), EgressError> {
        if let Some((flag, why)) = self.unenforced(enforcer) {
            return Err(EgressError::Backend { flag, backend, why });
        }
        match self.provider_rule(enforcer) {
            Some(rule) => Err(EgressError::ProviderPort { rule, backend }),
            None => Ok(()),
        }
    }

    /// Secrets need a writable root filesystem (the gate's CA goes into the trust stores).
    pub fn writable_root(&self, read_only: bool) -> Result<(), EgressError> {
        match !self.secrets.is_empty() && read_only {
            true => Err(EgressError::SecretReadOnly),
            false => Ok(()),
        }
    }
}

/// What the exec tool says about the network of computers under `policy`.
pub fn network_text(policy: &Policy) -> String {
    match policy {
        Policy::All => "network access on".into(),
        Policy::None => "no network access".into(),
        Policy::Allow(_) => {
            format!("network: only {policy} (others are blocked and reported in network_blocked)")
        }
    }
}

/// `NAME=IP`.
fn parse_resolve(raw: &str) -> Option<(String, IpAddr)> {
    let (name, ip) = raw.trim().split_once('=')?;
    let name = normal_name(name.trim())?;
    let ip = ip.trim().trim_matches(['[', ']']).parse().ok()?;
    Some((name, ip))
}

/// An IP (port 53) or a socket address.
fn parse_dns(raw: &str) -> Option<SocketAddr> {
    let t = raw.trim();
    if let Ok(ip) = t.trim_matches(['[', ']']).parse::<IpAddr>() {
        return Some(SocketAddr::new(ip, 53));
    }
    t.parse::<SocketAddr>().ok().filter(|a| a.port() != 0)
}

/// An environment variable's name: a letter or `_`, then letters, digits and `_`.
fn env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `NAME=HOST[,HOST...]`: the name and its hosts (normal names, duplicates dropped).
fn parse_secret(raw: &str) -> Result<(String, Vec<String>), EgressError> {
    let bad = |why| EgressError::Secret(raw.to_owned(), why);
    let (name, hosts) = raw
        .trim()
        .split_once('=')
        .ok_or_else(|| bad("must be NAME=HOST[,HOST...], e.g. GITHUB_TOKEN=api.github.com"))?;
    let name = name.trim();
    if !env_name(name) {
        return Err(bad(
            "NAME must be an environment variable's name: a letter or _, then letters, digits and _",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        let host = normal_name(host).ok_or_else(|| {
            bad("each HOST must be a host name such as api.github.com (no scheme, port or path)")
        })?;
        if !out.contains(&host) {
            out.push(host);
        }
    }
    if out.is_empty() {
        return Err(bad(
            "name at least one host whose requests get the secret, e.g. GITHUB_TOKEN=api.github.com",
        ));
    }
    Ok((name.to_owned(), out))
}

/// Is `path` a readable file holding at least one PEM certificate?
fn check_ca_file(path: &Path) -> Result<(), EgressError> {
    let bad = |why: String| EgressError::CaFile(path.to_owned(), why);
    let text = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let text = String::from_utf8_lossy(&text);
    match text.contains("-----BEGIN CERTIFICATE-----") {
        true => Ok(()),
        false => Err(bad(
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn egress(args: &[&str]) -> Result<EgressConfig, EgressError> {
        let mut argv = vec!["x"];
        argv.extend_from_slice(args);
        let cli = Cli::try_parse_from(argv).unwrap();
        EgressConfig::from_cli(&cli, |name| match name {
            "GH_TOKEN" => Some("ghp_real_value".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        })
    }

    #[test]
    fn the_policy_comes_from_the_network_flags_and_the_allow_list() {
        assert_eq!(egress(&[]).unwrap().policy, Policy::All);
        assert_eq!(egress(&["--no-network"]).unwrap().policy, Policy::None);
        let c = egress(&[
            "--egress-allow=pypi.org,*.npmjs.org",
            "--egress-allow",
            "10.0.0.0/8",
        ])
        .unwrap();
        assert_eq!(
            c.policy,
            Policy::allow(["pypi.org", "*.npmjs.org", "10.0.0.0/8"]).unwrap()
        );
        assert_eq!(c.needs_gate(), Some("--egress-allow"));
        assert_eq!(egress(&[]).unwrap().needs_gate(), None);
        assert_eq!(egress(&["--no-network"]).unwrap().needs_gate(), None);
        let e = egress(&["--egress-allow=https://pypi.org/simple"]).unwrap_err();
        assert!(matches!(e, EgressError::Rule(BadPolicy::Rule(_))), "{e}");
        assert!(
            e.to_string().starts_with("--egress-allow: network rule"),
            "{e}"
        );
        let e = egress(&["--no-network", "--egress-allow=pypi.org"]).unwrap_err();
        assert!(matches!(e, EgressError::NoNetworkWithAllow), "{e}");
        // `--network` after `--no-network` wins, as before.
        let c = egress(&["--no-network", "--network", "--egress-allow=pypi.org"]).unwrap();
        assert!(matches!(c.policy, Policy::Allow(_)));
    }

    #[test]
    fn pins_and_the_resolver_are_checked() {
        let c = egress(&[
            "--egress-resolve=PyPI.internal.=10.0.0.5",
            "--egress-resolve",
            "v6.test=[fd00::1]",
            "--egress-dns=10.0.0.2",
        ])
        .unwrap();
        assert_eq!(
            c.resolve,
            [
                ("pypi.internal".to_owned(), "10.0.0.5".parse().unwrap()),
                ("v6.test".to_owned(), "fd00::1".parse().unwrap())
            ]
        );
        assert_eq!(c.dns, Some("10.0.0.2:53".parse().unwrap()));
        let dns = |v: &str| egress(&[&format!("--egress-dns={v}")]).map(|c| c.dns);
        assert_eq!(
            dns("10.0.0.2:5353").unwrap(),
            Some("10.0.0.2:5353".parse().unwrap())
        );
        assert_eq!(
            dns("[fd00::2]:53").unwrap(),
            Some("[fd00::2]:53".parse().unwrap())
        );
        assert_eq!(
            dns("fd00::2").unwrap(),
            Some("[fd00::2]:53".parse().unwrap())
        );
        for bad in ["dns.google", "10.0.0.2:0", "10.0.0.2:x"] {
            assert!(matches!(dns(bad), Err(EgressError::Dns(_))), "{bad}");
        }
        for bad in [
            "pypi.org",
            "pypi.org=",
            "=10.0.0.5",
            "pypi.org=example.com",
            "a b=1.2.3.4",
        ] {
            let e = egress(&[&format!("--egress-resolve={bad}")]).unwrap_err();
            assert!(
                matches!(e, EgressError::Resolve(ref r) if r == bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_secret_is_read_from_the_environment_and_never_printed() {
        let c = egress(&[
            "--egress-allow=api.github.com,uploads.github.com",
            "--egress-secret=GH_TOKEN=API.github.com,uploads.github.com,api.github.com",
        ])
        .unwrap();
        assert_eq!(c.secrets.len(), 1);
        let s = &c.secrets[0];
        assert_eq!(s.name, "GH_TOKEN");
        assert_eq!(s.hosts, ["api.github.com", "uploads.github.com"]);
        assert_eq!(s.value, "ghp_real_value");
        let shown = format!("{c:?}");
        assert!(!shown.contains("ghp_real_value"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        assert_eq!(c.needs_gate(), Some("--egress-secret"));
    }

    #[test]
    fn a_secret_without_its_variable_or_an_allow_list_is_refused_saying_what_to_do() {
        let allow = "--egress-allow=api.github.com";
        for missing in ["MISSING", "EMPTY"] {
            let e =
                egress(&[allow, &format!("--egress-secret={missing}=api.github.com")]).unwrap_err();
            assert!(
                matches!(e, EgressError::SecretUnset(ref n) if n == missing),
                "{e}"
            );
            assert!(e.to_string().contains(&format!("export {missing}=")), "{e}");
        }
        let e = egress(&["--egress-secret=GH_TOKEN=api.github.com"]).unwrap_err();
        assert!(matches!(e, EgressError::SecretWithoutAllow), "{e}");
        assert!(e.to_string().contains("add --egress-allow"), "{e}");
        let e = egress(&["--no-network", "--egress-secret=GH_TOKEN=api.github.com"]).unwrap_err();
        assert!(matches!(e, EgressError::SecretWithoutAllow), "{e}");
        let e = egress(&[
            allow,
            "--egress-secret=GH_TOKEN=api.github.com",
            "--egress-secret=GH_TOKEN=uploads.github.com",
        ])
        .unwrap_err();
        assert!(
            matches!(e, EgressError::SecretTwice(ref n) if n == "GH_TOKEN"),
            "{e}"
        );
        for (bad, why) in [
            ("GH_TOKEN", "must be NAME=HOST"),
            ("1TOKEN=api.github.com", "environment variable's name"),
            ("GH-TOKEN=api.github.com", "environment variable's name"),
            ("GH_TOKEN=", "at least one host"),
            ("GH_TOKEN=https://api.github.com", "host name"),
            ("GH_TOKEN=api.github.com:443", "host name"),
        ] {
            let e = egress(&[allow, &format!("--egress-secret={bad}")]).unwrap_err();
            assert!(
                matches!(e, EgressError::Secret(ref r, _) if r == bad),
                "{bad}: {e}"
            );
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn a_ca_file_must_be_pem() {
        let dir = std::env::temp_dir().join(format!("msc-egress-ca-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let pem = dir.join("ca.pem");
        std::fs::write(
            &pem,
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate").unwrap();
        let ca = |p: &Path| egress(&[&format!("--egress-ca-file={}", p.display())]);
        let good = ca(&pem).map(|c| c.ca_file);
        let no_pem = ca(&junk).unwrap_err();
        let missing = ca(&dir.join("missing.pem")).unwrap_err();
        let a_dir = ca(&dir).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(good.unwrap(), Some(pem));
        assert!(
            no_pem.to_string().contains("no PEM certificate"),
            "{no_pem}"
        );
        assert!(matches!(missing, EgressError::CaFile(..)), "{missing}");
        assert!(matches!(a_dir, EgressError::CaFile(..)), "{a_dir}");
    }
}

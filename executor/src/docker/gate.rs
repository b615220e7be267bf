//! Docker computers behind the egress gate (SPEC §3.11, [`crate::egress`]): a computer whose
//! policy is an allow list is confined after each start (creation, start, restart) and
//! before any program of it runs when this server has not confined it yet (a server
//! before this one made or started it: its rules, still in place, sent every connection to
//! that server's closed ports until now). Until confined, nothing runs in it.
//!
//! With `--egress-secret`, an allow-list computer is made with a placeholder per secret in
//! its environment ([`Docker::computer_env`]) and, at each confinement, this server's CA
//! goes into its trust stores ([`Docker::install_ca`]): the system bundle, which
//! `SSL_CERT_FILE` and `REQUESTS_CA_BUNDLE` name, and a file of its own for
//! `NODE_EXTRA_CA_CERTS`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shared::egress::{Blocked, Policy};

use super::{Docker, DockerError, LABEL_NETWORK};
use crate::egress::secrets::placeholder;
use crate::egress::{Confinement, Gate};

/// The system CA bundle (Debian, Ubuntu, Alpine, Arch): made when the image has none.
const BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Red Hat's bundle, kept in step when the image has it.
const RHEL_BUNDLE: &str = "/etc/pki/tls/certs/ca-bundle.crt";
/// The gate's CA alone (`NODE_EXTRA_CA_CERTS`).
const CA_FILE: &str = "/etc/msc-egress-ca.pem";
/// The lines around the gate's CA in a bundle (replaced at each confinement: a new
/// server has a new CA).
const CA_BEGIN: &str = "# msc egress gate CA: begin\n";
const CA_END: &str = "# msc egress gate CA: end\n";

/// What this server knows of a container's confinement.
#[derive(Debug, Clone)]
pub(super) enum Held {
    /// No allow list: nothing to hold.
    Open,
    Confined(Arc<Confinement>),
}

/// The gate and what it holds, by container name.
#[derive(Debug)]
pub(crate) struct Gatekeeper {
    gate: Arc<Gate>,
    held: Mutex<HashMap<String, Held>>,
}

impl Gatekeeper {
    pub(crate) fn new(gate: Arc<Gate>) -> Self {
        Self {
            gate,
            held: Mutex::default(),
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Docker {
    /// Confines container `name` (running) to `policy` when it is an allow list; replaces
    /// what an earlier start held.
    pub(super) async fn confine(&self, name: &str, policy: &Policy) -> Result<(), DockerError> {
        let Policy::Allow(_) = policy else {
            self.gatekeeper.held().insert(name.to_owned(), Held::Open);
            return Ok(());
        };
        self.gatekeeper.held().remove(name);
        let info = self
            .client
            .inspect_container(name, None)
            .await
            .map_err(DockerError::from_bollard)?;
        let pid = info
            .state
            .and_then(|s| s.pid)
            .and_then(|p| u32::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                DockerError::NotRunning(name.trim_start_matches(super::NAME_PREFIX).to_owned())
            })?;
        let gate = &self.gatekeeper.gate;
        let env = info.config.and_then(|c| c.env).unwrap_or_default();
        let swaps = gate.swaps_of(&env);
        let holds_secrets = !swaps.is_empty();
        let confinement = gate
            .confine(pid, policy.clone(), swaps)
            .await
            .map_err(|e| DockerError::Egress(e.to_string()))?;
        self.gatekeeper
            .held()
            .insert(name.to_owned(), Held::Confined(Arc::new(confinement)));
        if let (true, Some(ca)) = (holds_secrets, gate.ca_pem())
            && let Err(e) = self.install_ca(name, ca).await
        {
            self.gatekeeper.held().remove(name);
            return Err(DockerError::Egress(format!(
                "the egress gate could not put its CA into the computer's trust stores ({e}); secrets need a writable /etc"
            )));
        }
        Ok(())
    }

    /// A new computer's environment: the run flags' (`-e`) and, for an allow list on a
    /// server with secrets, a new placeholder per secret and the trust-store variables
    /// (unless the run flags set them).
    pub(super) fn computer_env(&self, network: &Policy) -> Vec<String> {
        let mut env = self.cfg.run_flags.env.clone();
        let secrets = &self.cfg.egress_secrets;
        if !matches!(network, Policy::Allow(_)) || secrets.is_empty() {
            return env;
        }
        let key = |e: &str| e.split('=').next().unwrap_or_default().to_owned();
        env.retain(|e| !secrets.iter().any(|s| s.name == key(e)));
        for s in secrets {
            env.push(format!("{}={}", s.name, placeholder()));
        }
        for (var, path) in [
            ("SSL_CERT_FILE", BUNDLE),
            ("REQUESTS_CA_BUNDLE", BUNDLE),
            ("NODE_EXTRA_CA_CERTS", CA_FILE),
        ] {
            if !env.iter().any(|e| key(e) == var) {
                env.push(format!("{var}={path}"));
            }
        }
        env
    }

    /// Puts the gate's CA (PEM `ca`) into container `name`'s trust stores, replacing an
    /// earlier server's: written through the archive API (as root, whatever the
    /// computer's user).
    async fn install_ca(&self, name: &str, ca: &str) -> Result<(), DockerError> {
        let debian = self.whole_file(name, BUNDLE).await?;
        let rhel = self.whole_file(name, RHEL_BUNDLE).await?;
        let base = debian.as_deref().or(rhel.as_deref()).unwrap_or_default();
        let bundle = with_ca(base, ca);
        let mut files: Vec<(&str, Vec<u8>)> = vec![
            (&CA_FILE[1..], ca.as_bytes().to_vec()),
            (&BUNDLE[1..], bundle),
        ];
        if let Some(r) = rhel.as_deref() {
            files.push((&RHEL_BUNDLE[1..], with_ca(r, ca)));
        }
        let files: Vec<(&str, &[u8])> = files.iter().map(|(n, d)| (*n, d.as_slice())).collect();
        let mtime = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let tar = super::archive::files_tar(&files, 0o644, mtime);
        let opts = bollard::query_parameters::UploadToContainerOptions {
            path: "/".to_owned(),
            ..Default::default()
        };
        self.client
            .upload_to_container(name, Some(opts), bollard::body_full(tar.into()))
            .await
            .map_err(DockerError::from_bollard)
    }

    /// A whole file of the container (symlinks followed), or `None` when there is none.
    async fn whole_file(&self, name: &str, path: &str) -> Result<Option<Vec<u8>>, DockerError> {
        match self.archive_read(name, path, 0, 16 << 20).await {
            Ok(slice) => Ok(Some(slice.data)),
            Err(DockerError::NoSuchFile(_) | DockerError::File(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Before a program runs in `name`: confines it if its label says it has an allow
    /// list and this server does not hold it yet.
    pub(super) async fn ensure_confined(&self, name: &str) -> Result<(), DockerError> {
        if self.gatekeeper.held().contains_key(name) {
            return Ok(());
        }
        let info = self
            .client
            .inspect_container(name, None)
            .await
            .map_err(DockerError::from_bollard)?;
        let policy: Policy = info
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get(LABEL_NETWORK).cloned())
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_else(|| self.cfg.network.clone());
        self.confine(name, &policy).await
    }

    /// Keeps what is held for a container across its rename (a warm-pool member handed
    /// out), so it is not confined a second time under its new name.
    pub(super) fn gate_renamed(&self, from: &str, to: &str) {
        let mut held = self.gatekeeper.held();
        if let Some(h) = held.remove(from) {
            held.insert(to.to_owned(), h);
        }
    }

    /// Forgets what is held for `name` (removed, or about to start again).
    pub(super) fn release(&self, name: &str) {
        self.gatekeeper.held().remove(name);
    }

    /// The connections and names refused for computer `name` since `t` (a call's
    /// `network_blocked`).
    pub(super) fn blocked_since(&self, name: &str, t: Instant) -> Vec<Blocked> {
        match self.gatekeeper.held().get(name) {
            Some(Held::Confined(c)) => c.confined.blocked_since(t),
            _ => Vec::new(),
        }
    }

    /// Refusals since the server started (`msc_egress_blocked_total`).
    pub fn egress_blocked_total(&self) -> u64 {
        self.gatekeeper.gate.blocked_total()
    }
}

/// `bundle` without an earlier gate CA, and with `ca` at its end.
fn with_ca(bundle: &[u8], ca: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(bundle);
    let mut out = match (text.find(CA_BEGIN), text.find(CA_END)) {
        (Some(b), Some(e)) if e > b => format!("{}{}", &text[..b], &text[e + CA_END.len()..]),
        _ => text.into_owned(),
    };
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(CA_BEGIN);
    out.push_str(ca.trim_end());
    out.push('\n');
    out.push_str(CA_END);
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_ca_replaces_an_earlier_one_in_a_bundle() {
        let system = "-----BEGIN CERTIFICATE-----\nAAA\n-----END CERTIFICATE-----";
        let once = with_ca(system.as_bytes(), "CA1\n");
        let text = String::from_utf8(once.clone()).unwrap();
        assert!(text.starts_with(system) && text.contains("CA1"), "{text}");
        let twice = String::from_utf8(with_ca(&once, "CA2")).unwrap();
        assert!(!twice.contains("CA1") && twice.contains("CA2"), "{twice}");
        assert_eq!(twice.matches(CA_BEGIN).count(), 1, "{twice}");
        assert!(twice.starts_with(system), "{twice}");
        let alone = String::from_utf8(with_ca(b"", "CA3")).unwrap();
        assert_eq!(alone, format!("{CA_BEGIN}CA3\n{CA_END}"));
    }
}

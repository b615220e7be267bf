//! Docker computers behind the egress gate (SPEC §3.11, [`crate::egress`]): a computer whose
//! policy is an allow list is confined after each start (creation, start, restart) and
//! before any program of it runs when this server has not confined it yet (a server
//! before this one made or started it: its rules, still in place, sent every connection to
//! that server's closed ports until now). Until confined, nothing runs in it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use shared::egress::{Blocked, Policy};

use super::{Docker, DockerError, LABEL_NETWORK};
use crate::egress::{Confinement, Gate};

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
        let pid = self
            .pid_of(name)
            .await
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| {
                DockerError::NotRunning(name.trim_start_matches(super::NAME_PREFIX).to_owned())
            })?;
        let confinement = self
            .gatekeeper
            .gate
            .confine(pid, policy.clone())
            .await
            .map_err(|e| DockerError::Egress(e.to_string()))?;
        self.gatekeeper
            .held()
            .insert(name.to_owned(), Held::Confined(Arc::new(confinement)));
        Ok(())
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

//! The computers' backends behind one interface: Docker/Podman containers, WebAssembly
//! computers, Fly Machines or E2B sandboxes. `computers` applies the lifecycle policy on top and never asks which one it
//! talks to, except for the `backend` name it shows.

use shared::result::ExecOutcome;

use crate::docker::{Docker, container_name};
use crate::e2b::E2b;
use crate::error::ComputerError;
use crate::fly::Fly;
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ExecSpec};
use crate::wasm::Wasm;

/// Where this server's computers live.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per server
pub enum Backend {
    Docker(Docker),
    Wasm(Wasm),
    Fly(Fly),
    E2b(E2b),
    Modal(crate::modal::Modal),
}

impl Backend {
    /// The name shown in `computer_list` items.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Docker(_) => "docker",
            Backend::Wasm(w) => w.name(),
            Backend::Fly(_) => "fly",
            Backend::E2b(_) => "e2b",
            Backend::Modal(_) => "modal",
        }
    }

    /// This server's instance label (owner of its temporaries).
    pub fn instance(&self) -> &str {
        match self {
            Backend::Docker(d) => d.instance(),
            Backend::Wasm(w) => w.instance(),
            Backend::Fly(f) => f.instance(),
            Backend::E2b(e) => e.instance(),
            Backend::Modal(m) => m.instance(),
        }
    }

    pub async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, ComputerError> {
        Ok(match self {
            Backend::Docker(d) => d.find(id).await?,
            Backend::Wasm(w) => w.find(id).await?,
            Backend::Fly(f) => f.find(id).await?,
            Backend::E2b(e) => e.find(id).await?,
            Backend::Modal(m) => m.find(id).await?,
        })
    }

    pub async fn list(&self) -> Result<Vec<ContainerRecord>, ComputerError> {
        Ok(match self {
            Backend::Docker(d) => d.list().await?,
            Backend::Wasm(w) => w.list().await?,
            Backend::Fly(f) => f.list().await?,
            Backend::E2b(e) => e.list().await?,
            Backend::Modal(m) => m.list().await?,
        })
    }

    /// Creates computer `id` (its key, when `team` is set: `shared::teams`). Docker and
    /// WASM record the team; the cloud backends keep teams apart by the key alone.
    pub async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        progress: &Progress,
    ) -> Result<ContainerRecord, ComputerError> {
        Ok(match self {
            Backend::Docker(d) => d.create(id, temporary, team, progress).await?,
            Backend::Wasm(w) => w.create(id, temporary, team).await?,
            Backend::Fly(f) => f.create(id, temporary).await?,
            Backend::E2b(e) => e.create(id, temporary).await?,
            Backend::Modal(m) => m.create(id, temporary).await?,
        })
    }

    /// Makes sure computer `id` runs (a WASM computer always does).
    pub async fn start(&self, id: &str) -> Result<(), ComputerError> {
        match self {
            Backend::Docker(d) => d.start(id).await?,
            Backend::Wasm(_) => {}
            Backend::Fly(f) => f.start(id).await?,
            Backend::E2b(e) => e.start(id).await?,
            Backend::Modal(m) => m.start(id).await?,
        }
        Ok(())
    }

    pub async fn restart(&self, id: &str) -> Result<(), ComputerError> {
        match self {
            Backend::Docker(d) => d.restart(id).await?,
            Backend::Wasm(w) => w.restart(id).await?,
            Backend::Fly(f) => f.restart(id).await?,
            Backend::E2b(e) => e.restart(id).await?,
            Backend::Modal(m) => m.restart(id).await?,
        }
        Ok(())
    }

    pub async fn remove(&self, id: &str) -> Result<(), ComputerError> {
        match self {
            Backend::Docker(d) => {
                d.remove(id).await?;
            }
            Backend::Wasm(w) => w.remove(id).await?,
            Backend::Fly(f) => f.remove(id).await?,
            Backend::E2b(e) => e.remove(id).await?,
            Backend::Modal(m) => m.remove(id).await?,
        }
        Ok(())
    }

    pub async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        progress: &Progress,
    ) -> Result<ContainerRecord, ComputerError> {
        Ok(match self {
            Backend::Docker(d) => d.factory_reset(id, temporary, team, progress).await?,
            Backend::Wasm(w) => w.factory_reset(id).await?,
            Backend::Fly(f) => f.factory_reset(id, temporary).await?,
            Backend::E2b(e) => e.factory_reset(id, temporary).await?,
            Backend::Modal(m) => m.factory_reset(id, temporary).await?,
        })
    }

    pub async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, ComputerError> {
        Ok(match self {
            Backend::Docker(d) => d.exec(&container_name(id), spec).await?,
            Backend::Wasm(w) => w.exec(id, spec).await?,
            Backend::Fly(f) => f.exec(id, spec).await?,
            Backend::E2b(e) => e.exec(id, spec).await?,
            Backend::Modal(m) => m.exec(id, spec).await?,
        })
    }
}

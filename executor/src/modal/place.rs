//! Modal sandboxes as a [`Place`]; [`ModalBackendError`]s classified once.

use shared::result::ExecOutcome;

use super::{Modal, ModalBackendError};
use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ExecSpec};

impl From<ModalBackendError> for BackendError {
    fn from(e: ModalBackendError) -> Self {
        let failure = match &e {
            ModalBackendError::NotFound(_) => Failure::NotFound,
            ModalBackendError::Api(super::ModalError::Network(_)) => Failure::Unsupported,
            ModalBackendError::Api(_) => Failure::Failed,
        };
        BackendError::new(failure, e)
    }
}

// `Modal::f(self, ..)` below is the inherent method (inherent methods win over the trait's).
/// Sandboxes carry their team in the tag `mcp_team` (beside the key prefix); nothing to report while a
/// sandbox starts.
impl Place for Modal {
    fn kind(&self) -> shared::capabilities::BackendKind {
        shared::capabilities::BackendKind::Modal
    }

    fn instance(&self) -> &str {
        Modal::instance(self)
    }

    async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, BackendError> {
        Ok(Modal::find(self, id).await?)
    }

    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError> {
        Ok(Modal::list(self).await?)
    }

    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        // Modal's own network rules hold it.
        Ok(Modal::create(self, id, temporary, team, network).await?)
    }

    async fn start(&self, id: &str) -> Result<(), BackendError> {
        Ok(Modal::start(self, id).await?)
    }

    async fn restart(&self, id: &str) -> Result<(), BackendError> {
        crate::place::over_exec::end_jobs(self, id).await;
        Ok(Modal::restart(self, id).await?)
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        Ok(Modal::remove(self, id).await?)
    }

    async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        Ok(Modal::factory_reset(self, id, temporary, team, network).await?)
    }

    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        Ok(Modal::exec(self, id, spec).await?)
    }
}

//! Fly Machines and E2B computers behind the backend interface: the shared
//! `CloudComputers` (which the Worker drives too) over reqwest, with commands as
//! [`ProviderExec`]s.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shared::files::over_exec::{OverExec, PathInfo};
use shared::providers::computers::{CloudComputers, ComputersError, ProviderExec};
use shared::providers::{HttpRequest, HttpResponse, HttpTransport, TransportError};
use shared::result::ExecOutcome;

use crate::place::{BackendError, Failure, Place};
use crate::progress::Progress;
use crate::spec::{ContainerRecord, ExecSpec};

/// One provider account's computers, for this server.
#[derive(Debug)]
pub struct Cloud<C> {
    inner: Arc<C>,
    instance: String,
}

impl<C> Clone for Cloud<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            instance: self.instance.clone(),
        }
    }
}

impl<C: CloudComputers> Cloud<C> {
    pub fn new(inner: C, instance: String) -> Self {
        Self {
            inner: Arc::new(inner),
            instance,
        }
    }

    pub fn inner(&self) -> &C {
        &self.inner
    }
}

/// How a provider's error reads to the registry (what is not "no such computer" or "try
/// later" is a failure of the provider).
impl From<ComputersError> for BackendError {
    fn from(e: ComputersError) -> Self {
        use shared::providers::{e2b::E2bError, fly::FlyError};
        let failure = match &e {
            ComputersError::NotFound(_) => Failure::NotFound,
            ComputersError::Network(_) | ComputersError::E2b(E2bError::Network(_)) => {
                Failure::Unsupported
            }
            ComputersError::Fly(FlyError::Transport(_) | FlyError::RateLimited)
            | ComputersError::Fly(FlyError::Capacity(_))
            | ComputersError::E2b(E2bError::Transport(_) | E2bError::RateLimited)
            | ComputersError::E2b(E2bError::Capacity(_)) => Failure::Unavailable,
            ComputersError::Fly(_) | ComputersError::E2b(_) => Failure::Failed,
        };
        BackendError::new(failure, e)
    }
}

/// Fly Machines and E2B sandboxes; a team's carry it in the tag `mcp_team` (beside the
/// key prefix).
impl<C: CloudComputers + Send + Sync + 'static> Place for Cloud<C> {
    fn kind(&self) -> shared::capabilities::BackendKind {
        self.inner.kind()
    }

    fn instance(&self) -> &str {
        &self.instance
    }

    async fn find(&self, id: &str) -> Result<Option<ContainerRecord>, BackendError> {
        Ok(self.inner.find(id).await?)
    }

    async fn list(&self) -> Result<Vec<ContainerRecord>, BackendError> {
        Ok(self.inner.list("").await?)
    }

    async fn create(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        // The provider's own rules hold it (E2B), or it refuses (Fly).
        Ok(self.inner.create(id, temporary, team, network).await?)
    }

    async fn start(&self, id: &str) -> Result<(), BackendError> {
        Ok(self.inner.start(id).await?)
    }

    async fn restart(&self, id: &str) -> Result<(), BackendError> {
        crate::place::over_exec::end_jobs(self, id).await;
        Ok(self.inner.restart(id).await?)
    }

    async fn remove(&self, id: &str) -> Result<(), BackendError> {
        Ok(self.inner.remove(id).await?)
    }

    async fn factory_reset(
        &self,
        id: &str,
        temporary: bool,
        team: Option<&str>,
        network: &shared::egress::Policy,
        _progress: &Progress,
    ) -> Result<ContainerRecord, BackendError> {
        Ok(self
            .inner
            .factory_reset(id, temporary, team, network)
            .await?)
    }

    /// Runs one command; a cancelled call (this future dropped) kills it on the provider.
    async fn exec(&self, id: &str, spec: &ExecSpec) -> Result<ExecOutcome, BackendError> {
        let ex = provider_exec(spec);
        let mut guard = KillOnDrop {
            inner: self.inner.clone(),
            id: id.to_owned(),
            ex: Some(ex.clone()),
        };
        let out = self.inner.exec(id, &ex).await;
        guard.ex = None;
        Ok(out?)
    }

    fn moves_files(&self) -> bool {
        self.inner.moves_files()
    }

    async fn file_api_stat(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Option<PathInfo>, OverExec<BackendError>> {
        self.inner.file_stat(id, path).await.map_err(backend)
    }

    async fn file_api_download(
        &self,
        id: &str,
        path: &str,
    ) -> Result<Vec<u8>, OverExec<BackendError>> {
        self.inner.file_download(id, path).await.map_err(backend)
    }

    async fn file_api_upload(
        &self,
        id: &str,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), OverExec<BackendError>> {
        self.inner
            .file_upload(id, path, bytes)
            .await
            .map_err(backend)
    }
}

/// A provider file API's failure with the provider's error classified.
fn backend(e: OverExec<ComputersError>) -> OverExec<BackendError> {
    match e {
        OverExec::Shell(e) => OverExec::Shell(e.into()),
        OverExec::NoSuchFile(m) => OverExec::NoSuchFile(m),
        OverExec::Refused(m) => OverExec::Refused(m),
    }
}

/// Kills a command whose call was dropped before it ended (its own task).
struct KillOnDrop<C: CloudComputers + Send + Sync + 'static> {
    inner: Arc<C>,
    id: String,
    ex: Option<ProviderExec>,
}

impl<C: CloudComputers + Send + Sync + 'static> Drop for KillOnDrop<C> {
    fn drop(&mut self) {
        let Some(ex) = self.ex.take() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, id) = (self.inner.clone(), std::mem::take(&mut self.id));
        rt.spawn(async move { inner.kill(&id, &ex).await });
    }
}

/// A command for a cloud computer.
fn provider_exec(spec: &ExecSpec) -> ProviderExec {
    ProviderExec {
        argv: spec.provider_argv(),
        stdin: spec.stdin.clone(),
        timeout_ms: u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
        output_limit: spec.output_limit,
        nonce: rand::random(),
    }
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
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, TransportError> {
        let method =
            reqwest::Method::from_bytes(req.method.as_bytes()).map_err(TransportError::of)?;
        let mut b = self.0.request(method, &req.url);
        for (k, v) in &req.headers {
            b = b.header(k, v);
        }
        if let Some(body) = req.body {
            b = b.body(body);
        }
        let resp = b
            .send()
            .await
            .map_err(|e| TransportError::of(e.without_url()))?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
            .collect();
        let body = resp
            .bytes()
            .await
            .map_err(|e| TransportError::of(e.without_url()))?;
        Ok(HttpResponse {
            status,
            headers,
            body: body.to_vec(),
        })
    }

    async fn sleep(&self, millis: u64) {
        tokio::time::sleep(Duration::from_millis(millis)).await;
    }

    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::providers::{e2b::E2bError, fly::FlyError};

    #[test]
    fn provider_errors_are_classified() {
        for (e, want) in [
            (ComputersError::NotFound("a".into()), Failure::NotFound),
            (FlyError::RateLimited.into(), Failure::Unavailable),
            (
                E2bError::Transport("reset".into()).into(),
                Failure::Unavailable,
            ),
            (FlyError::Unauthorized.into(), Failure::Failed),
            // A provider's own 404 is the provider's failure, not "no such computer": the
            // computers layer says that with ComputersError::NotFound.
            (FlyError::NotFound("m".into()).into(), Failure::Failed),
        ] {
            let words = e.to_string();
            let b = BackendError::from(e);
            assert_eq!((b.failure, b.to_string()), (want, words));
        }
    }
}

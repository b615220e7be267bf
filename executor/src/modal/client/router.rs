//! A sandbox's command router: its task id, the router's URL and JWT
//! (`TaskGetCommandRouterAccess`, cached per sandbox and refreshed once on
//! `UNAUTHENTICATED`), and calls to it.

use std::future::Future;

use tokio::time::Instant;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;
use tonic::{Code, Request, Status};

use super::sandbox::result_text;
use super::transport::{backoff, channel, retryable};
use super::{
    MAX_MESSAGE, ModalClient, ModalError, RETRY_ATTEMPTS, RouterAccess, TaskCommandRouterClient, pb,
};

impl ModalClient {
    /// The cached router access of a sandbox, or a fresh one.
    pub(super) async fn router(
        &self,
        sandbox_id: &str,
        deadline: Instant,
    ) -> Result<RouterAccess, ModalError> {
        if let Some(r) = self.inner.routers.lock().await.get(sandbox_id) {
            return Ok(r.clone());
        }
        let task_id = self.task_id(sandbox_id, deadline).await?;
        let access = self.router_access(&task_id).await?;
        self.inner
            .routers
            .lock()
            .await
            .insert(sandbox_id.to_owned(), access.clone());
        Ok(access)
    }

    pub(super) async fn task_id(
        &self,
        sandbox_id: &str,
        deadline: Instant,
    ) -> Result<String, ModalError> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let req = pb::SandboxGetTaskIdRequest {
                sandbox_id: sandbox_id.to_owned(),
                timeout: Some(left.as_secs_f32().clamp(1.0, 50.0)),
                wait_until_ready: false,
            };
            let r = self
                .retry(
                    "SandboxGetTaskId",
                    |mut cp, r| async move { cp.sandbox_get_task_id(r).await },
                    req,
                )
                .await?;
            if let Some(res) = &r.task_result {
                return Err(ModalError::SandboxFinished {
                    sandbox_id: sandbox_id.to_owned(),
                    reason: result_text(res),
                });
            }
            match r.task_id {
                Some(t) if !t.is_empty() => return Ok(t),
                _ if Instant::now() >= deadline => {
                    return Err(ModalError::DeadlineExceeded(format!(
                        "sandbox {sandbox_id} was not scheduled in time"
                    )));
                }
                _ => {}
            }
        }
    }

    async fn router_access(&self, task_id: &str) -> Result<RouterAccess, ModalError> {
        let req = pb::TaskGetCommandRouterAccessRequest {
            task_id: task_id.to_owned(),
        };
        let r = self
            .retry(
                "TaskGetCommandRouterAccess",
                |mut cp, r| async move { cp.task_get_command_router_access(r).await },
                req,
            )
            .await?;
        if r.url.starts_with("http://") && !self.inner.insecure {
            return Err(ModalError::Protocol(format!(
                "the command router URL {} is not https",
                r.url
            )));
        }
        let channel = {
            let mut channels = self.inner.channels.lock().await;
            match channels.get(&r.url) {
                Some(c) => c.clone(),
                None => {
                    let c = channel(&r.url)?;
                    channels.insert(r.url.clone(), c.clone());
                    c
                }
            }
        };
        let bearer = AsciiMetadataValue::try_from(format!("Bearer {}", r.jwt))
            .map_err(|_| ModalError::Protocol("the command router JWT is not ASCII".into()))?;
        Ok(RouterAccess {
            task_id: task_id.to_owned(),
            bearer,
            client: TaskCommandRouterClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        })
    }

    /// Calls the router of `sandbox_id`: retries transient errors, and refreshes the JWT
    /// once on `UNAUTHENTICATED`.
    pub(super) async fn router_call<M, R, F, Fut>(
        &self,
        sandbox_id: &str,
        what: &str,
        msg: M,
        f: F,
    ) -> Result<R, ModalError>
    where
        M: Clone,
        F: Fn(TaskCommandRouterClient<Channel>, Request<M>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let mut attempt = 0;
        let mut refreshed = false;
        loop {
            attempt += 1;
            let access = self.cached_router(sandbox_id).await?;
            let mut req = Request::new(msg.clone());
            req.metadata_mut()
                .insert("authorization", access.bearer.clone());
            match f(access.client.clone(), req).await {
                Ok(r) => return Ok(r.into_inner()),
                Err(e) if e.code() == Code::Unauthenticated && !refreshed => {
                    refreshed = true;
                    self.refresh_router(sandbox_id, &access.task_id).await?;
                }
                Err(e) if retryable(&e) && attempt < RETRY_ATTEMPTS => {
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(ModalError::from_status(what, &e)),
            }
        }
    }

    pub(super) async fn cached_router(&self, sandbox_id: &str) -> Result<RouterAccess, ModalError> {
        self.inner
            .routers
            .lock()
            .await
            .get(sandbox_id)
            .cloned()
            .ok_or_else(|| ModalError::Protocol("router access vanished".into()))
    }

    pub(super) async fn refresh_router(
        &self,
        sandbox_id: &str,
        task_id: &str,
    ) -> Result<(), ModalError> {
        let access = self.router_access(task_id).await?;
        self.inner
            .routers
            .lock()
            .await
            .insert(sandbox_id.to_owned(), access);
        Ok(())
    }
}

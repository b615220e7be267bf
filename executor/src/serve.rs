//! Serving a router over HTTP/1.1 with the limits of both HTTP servers (the MCP server's
//! `--transport http` and the executor API): instead of `axum::serve`, an accept loop
//! whose connections have a header timeout, a keep-alive idle timeout and request bodies
//! with a read timeout, and a graceful shutdown like `axum::serve`'s (stop accepting, let
//! every connection finish its request, then return).
//!
//! Owns the `--http-*` connection and body limits ([`HttpLimits`]); `conn` serves one
//! connection, `body` the body limits. Must not know the routes: `http` and `api` build
//! their routers and use [`body::buffer`] on their JSON routes.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

pub mod body;
mod conn;

/// The connection and body limits of an HTTP server (`--http-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// `--http-max-body`: the largest JSON request body (not `/v1/files` uploads).
    pub max_body: usize,
    /// `--http-header-timeout`: the most a request head may take, from its first byte
    /// (from the accept for a new connection).
    pub header_timeout: Duration,
    /// `--http-body-timeout`: the longest a request body may send nothing.
    pub body_timeout: Duration,
    /// `--http-idle-timeout`: how long a keep-alive connection may wait for its next request.
    pub idle_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_body: 16 << 20,
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then waits for the connections
/// to finish their requests.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let (stop, stopped) = tokio::sync::watch::channel(());
    let mut conns = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    conns.spawn(conn::serve(stream, app.clone(), limits, stopped.clone()));
                }
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be freed.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop.send(());
    while conns.join_next().await.is_some() {}
    Ok(())
}

/// Errors of one connection that was being accepted, not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

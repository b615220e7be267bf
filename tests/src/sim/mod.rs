//! Local simulators of the providers' APIs (Fly and E2B REST, Modal gRPC), for tests that
//! cannot reach the real services. Each simulator validates every request against the
//! provider's published API description (in `specs/`) before serving it, so it cannot
//! drift into agreeing with a client bug.

pub mod e2b;
pub mod fly;
pub mod modal;
pub mod openapi;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};

use openapi::Matched;

/// Removes every container carrying `label` (`key=value`), with its anonymous volumes.
pub(crate) async fn remove_labelled(docker: &Docker, label: &str) {
    let filters = HashMap::from([("label".to_owned(), vec![label.to_owned()])]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    // Until none is left (bounded): a removal the engine refuses for the moment (one is
    // already in progress, the engine is busy) is tried again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let Ok(list) = docker.list_containers(Some(opts.clone())).await else {
            return;
        };
        if list.is_empty() || tokio::time::Instant::now() > deadline {
            return;
        }
        for c in list {
            if let Some(cid) = c.id {
                let opts = RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                let _ = docker.remove_container(&cid, Some(opts)).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A path parameter of a matched request ("" when absent).
pub(crate) fn path<'a>(m: &'a Matched<'_>, name: &str) -> &'a str {
    m.path_params
        .get(name)
        .map(String::as_str)
        .unwrap_or_default()
}

/// The first value of a query parameter of a matched request.
pub(crate) fn query<'a>(m: &'a Matched<'_>, name: &str) -> Option<&'a str> {
    m.query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Locks `m`, also after a panic elsewhere (the simulators' state stays usable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Marks a simulator as closing (queued operations see it and return) and aborts its
/// background tasks (timers, expiry loops).
pub(crate) fn close(closing: &AtomicBool, background: &Mutex<Vec<tokio::task::AbortHandle>>) {
    closing.store(true, Ordering::SeqCst);
    for h in lock(background).drain(..) {
        h.abort();
    }
}

/// Stops a simulator's work before its containers are removed: marks it closing (queued
/// operations see it and return), lets in-flight Docker operations finish (each holds its
/// machine's or sandbox's lock, at most 30 s each), and only then aborts the background
/// tasks. Aborting first would drop a request the engine still carries out (a container
/// created after the removal looked, a removal cut short).
pub(crate) async fn shut_down(
    closing: &AtomicBool,
    background: &Mutex<Vec<tokio::task::AbortHandle>>,
    locks: Vec<Arc<tokio::sync::Mutex<()>>>,
) {
    closing.store(true, Ordering::SeqCst);
    wait_for_ops(locks).await;
    close(closing, background);
}

/// Lets in-flight Docker operations finish (each holds its machine's or sandbox's lock),
/// at most 30 s each.
pub(crate) async fn wait_for_ops(locks: Vec<Arc<tokio::sync::Mutex<()>>>) {
    for l in locks {
        let _ = tokio::time::timeout(Duration::from_secs(30), l.lock()).await;
    }
}

/// The fault to inject into the `n`-th served request (1-based): 429 on every
/// `rate_limit_every`-th, else 503 on every `error_5xx_every`-th, else none.
pub(crate) fn injected_fault(
    n: u64,
    rate_limit_every: Option<u32>,
    error_5xx_every: Option<u32>,
) -> Option<u16> {
    let hits = |every: Option<u32>| every.is_some_and(|e| e > 0 && n.is_multiple_of(u64::from(e)));
    if hits(rate_limit_every) {
        Some(429)
    } else if hits(error_5xx_every) {
        Some(503)
    } else {
        None
    }
}

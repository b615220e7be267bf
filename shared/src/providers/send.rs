//! Sending requests to a provider, once for every client (Fly, E2B): the retry policy and
//! its loop, paginated lists, `retry-after`, JSON bodies and body excerpts for messages.
//! The clients keep only what differs: their error types, what counts as a capacity
//! error, and how a page names the next one.

use std::collections::HashSet;
use std::hash::Hash;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{HttpRequest, HttpResponse, HttpTransport, TransportError, WireError};

/// Longest excerpt of a body quoted in a message, in characters.
pub const MAX_EXCERPT: usize = 300;

/// When and how long to wait before sending a request again.
///
/// - 429: always retried (the request was not processed), honouring `retry-after`.
/// - capacity errors (as the client recognises them, any HTTP status): retried
///   `capacity_retries` times.
/// - 5xx and transport errors: retried only for idempotent requests (GET, wait,
///   start/stop/restart/destroy, list), never for create/exec (they may have run).
/// - anything else: not retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total tries of one request, the first included.
    pub max_attempts: u32,
    /// Delay before the first retry; doubles each retry ...
    pub initial_backoff_ms: u64,
    /// ... up to this.
    pub max_backoff_ms: u64,
    /// Cap on a server's `retry-after`.
    pub max_retry_after_ms: u64,
    /// Retries of a capacity error before giving up.
    pub capacity_retries: u32,
}

impl Default for RetryPolicy {
    /// 100 ms doubling to 2 s, 6 tries, `retry-after` capped at 30 s, 2 capacity retries.
    fn default() -> Self {
        Self {
            max_attempts: 6,
            initial_backoff_ms: 100,
            max_backoff_ms: 2_000,
            max_retry_after_ms: 30_000,
            capacity_retries: 2,
        }
    }
}

/// What happened to one try of a request (successes are never passed to the policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No response arrived.
    Transport,
    /// A non-2xx response.
    Status {
        status: u16,
        /// Parsed `retry-after` (seconds form), in milliseconds.
        retry_after_ms: Option<u64>,
        /// The body said the provider has no capacity.
        capacity: bool,
    },
}

/// The policy's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Retry { after_ms: u64 },
    GiveUp,
}

impl RetryPolicy {
    /// Decides after a failed try. `attempts` = tries made so far (1 after the first);
    /// `capacity_failures` = capacity errors so far, this one included.
    pub fn decide(
        &self,
        idempotent: bool,
        attempts: u32,
        capacity_failures: u32,
        outcome: Outcome,
    ) -> Decision {
        if attempts >= self.max_attempts {
            return Decision::GiveUp;
        }
        let backoff = self.backoff_ms(attempts);
        match outcome {
            Outcome::Transport if idempotent => Decision::Retry { after_ms: backoff },
            Outcome::Transport => Decision::GiveUp,
            Outcome::Status { capacity: true, .. } => {
                if capacity_failures <= self.capacity_retries {
                    Decision::Retry { after_ms: backoff }
                } else {
                    Decision::GiveUp
                }
            }
            Outcome::Status {
                status,
                retry_after_ms,
                ..
            } => {
                let retryable = status == 429 || (idempotent && (500..600).contains(&status));
                if !retryable {
                    return Decision::GiveUp;
                }
                let after_ms = retry_after_ms
                    .map(|ms| ms.min(self.max_retry_after_ms))
                    .unwrap_or(backoff);
                Decision::Retry { after_ms }
            }
        }
    }

    /// `initial * 2^(attempts-1)`, capped.
    fn backoff_ms(&self, attempts: u32) -> u64 {
        let shift = attempts.saturating_sub(1).min(32);
        self.initial_backoff_ms
            .saturating_mul(1u64 << shift)
            .min(self.max_backoff_ms)
    }
}

/// A response after the retries, and how many tries it took.
#[derive(Debug, Clone)]
pub struct Sent {
    pub resp: HttpResponse,
    pub attempts: u32,
}

/// Sends `req` under `policy`: the first success, or the last failure response (the
/// caller maps it to its error), or `Err` with the transport's message when no response
/// came and retrying is over. `capacity` tells the client's capacity errors apart.
pub async fn send<T: HttpTransport>(
    transport: &T,
    policy: &RetryPolicy,
    req: HttpRequest,
    idempotent: bool,
    capacity: impl Fn(&HttpResponse) -> bool,
) -> Result<Sent, TransportError> {
    let mut attempts = 0u32;
    let mut capacity_failures = 0u32;
    loop {
        attempts += 1;
        let (outcome, last) = match transport.send(req.clone()).await {
            Ok(resp) if resp.is_success() => return Ok(Sent { resp, attempts }),
            Ok(resp) => {
                let at_capacity = capacity(&resp);
                capacity_failures += u32::from(at_capacity);
                let outcome = Outcome::Status {
                    status: resp.status,
                    retry_after_ms: retry_after_ms(&resp),
                    capacity: at_capacity,
                };
                (outcome, Ok(Sent { resp, attempts }))
            }
            Err(e) => (Outcome::Transport, Err(e)),
        };
        match policy.decide(idempotent, attempts, capacity_failures, outcome) {
            Decision::Retry { after_ms } => transport.sleep(after_ms).await,
            Decision::GiveUp => return last,
        }
    }
}

/// A paginated list being read, sans I/O: which cursor to ask for next, and the items so
/// far. At most `max_pages` pages; stops at an empty or repeated cursor; an item seen
/// twice (a list that moved under the pages) is kept once.
///
/// ```text
/// let mut pages = Pages::new(MAX_LIST_PAGES);
/// while let Some(cursor) = pages.next_cursor() { ...fetch...; pages.add(items, key, next) }
/// let all = pages.into_items();
/// ```
#[derive(Debug)]
pub struct Pages<I, K> {
    left: usize,
    cursor: Option<String>,
    done: bool,
    seen: HashSet<K>,
    items: Vec<I>,
}

impl<I, K: Eq + Hash> Pages<I, K> {
    pub fn new(max_pages: usize) -> Self {
        Self {
            left: max_pages,
            cursor: None,
            done: false,
            seen: HashSet::new(),
            items: Vec::new(),
        }
    }

    /// The cursor of the next page to fetch (`Some(None)`: the first page), or `None`
    /// when the list is read.
    pub fn next_cursor(&self) -> Option<Option<String>> {
        (!self.done && self.left > 0).then(|| self.cursor.clone())
    }

    /// Adds a fetched page: its items (by `key`) and the cursor it names, if any.
    pub fn add(&mut self, items: Vec<I>, key: impl Fn(&I) -> K, next: Option<&str>) {
        self.left = self.left.saturating_sub(1);
        for item in items {
            if self.seen.insert(key(&item)) {
                self.items.push(item);
            }
        }
        match next.map(str::trim) {
            Some(n) if !n.is_empty() && self.cursor.as_deref() != Some(n) => {
                self.cursor = Some(n.to_owned());
            }
            _ => self.done = true,
        }
    }

    pub fn into_items(self) -> Vec<I> {
        self.items
    }
}

/// `retry-after` in its delay-seconds form (an HTTP date cannot be read without a clock).
pub fn retry_after_ms(resp: &HttpResponse) -> Option<u64> {
    let v = resp.header("retry-after")?.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(secs.saturating_mul(1000));
    }
    let secs = v.parse::<f64>().ok()?;
    // Truncation is intended: a finite, non-negative number of seconds to whole ms.
    (secs.is_finite() && secs >= 0.0).then(|| (secs * 1000.0).min(u64::MAX as f64) as u64)
}

/// The start of a body as text, for messages.
pub fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    match text.char_indices().nth(MAX_EXCERPT) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text.to_owned(),
    }
}

/// A request body as JSON; the message says what failed.
pub fn json_body<B: Serialize>(body: &B) -> Result<Vec<u8>, WireError> {
    serde_json::to_vec(body).map_err(|e| WireError(format!("encoding a request: {e}")))
}

/// A response body as `D`; the message names `what`, the status and the body's start.
pub fn decode<D: DeserializeOwned>(resp: &HttpResponse, what: &str) -> Result<D, WireError> {
    serde_json::from_slice(&resp.body).map_err(|e| {
        WireError(format!(
            "{what} (HTTP {}): {e}; body starts {:?}",
            resp.status,
            excerpt(&resp.body)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads a list of `pages` ((cursor asked, items, next)) through [`Pages`].
    fn read(
        max: usize,
        pages: &[(Option<&str>, &[u32], Option<&str>)],
    ) -> (Vec<u32>, Vec<Option<String>>) {
        let mut p = Pages::new(max);
        let mut asked = Vec::new();
        while let Some(cursor) = p.next_cursor() {
            let (_, items, next) = pages
                .iter()
                .find(|(c, _, _)| *c == cursor.as_deref())
                .expect("a page for the cursor asked");
            asked.push(cursor);
            p.add(items.to_vec(), |i| *i, *next);
        }
        (p.into_items(), asked)
    }

    #[test]
    fn pages_stop_at_an_empty_or_repeated_cursor_and_dedup() {
        let pages: &[(Option<&str>, &[u32], Option<&str>)] = &[
            (None, &[1, 2], Some("a")),
            (Some("a"), &[2, 3], Some(" b ")),
            (Some("b"), &[4], Some("b")),
        ];
        let (items, asked) = read(10, pages);
        assert_eq!(items, [1, 2, 3, 4]);
        assert_eq!(asked, [None, Some("a".into()), Some("b".into())]);
        let (items, asked) = read(2, pages);
        assert_eq!((items.len(), asked.len()), (3, 2), "capped at two pages");
        let (items, _) = read(10, &[(None, &[5], Some("  "))]);
        assert_eq!(items, [5]);
    }

    #[test]
    fn excerpts_and_retry_after() {
        assert_eq!(excerpt(b"  "), "(empty body)");
        let long = "é".repeat(MAX_EXCERPT + 5);
        assert_eq!(excerpt(long.as_bytes()).chars().count(), MAX_EXCERPT + 3);
        let with = |v: &str| HttpResponse {
            status: 429,
            headers: vec![("retry-after".into(), v.into())],
            body: Vec::new(),
        };
        assert_eq!(retry_after_ms(&with("2")), Some(2000));
        assert_eq!(retry_after_ms(&with("0.5")), Some(500));
        assert_eq!(retry_after_ms(&with("-1")), None);
        assert_eq!(retry_after_ms(&with("Wed, 21 Oct 2015 07:28:00 GMT")), None);
    }
}

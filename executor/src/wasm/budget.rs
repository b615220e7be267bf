//! The server-wide bound on WASM jobs' unread output (issue 46, item 2). A WASM computer
//! has no supervisor: its kept jobs' output waits in this server's memory, each job in a
//! [`Ring`] of at most `shared::jobs::BUFFER_BYTES`. One [`OutputBudget`] per server
//! (`--wasm-job-output-budget`) counts every byte those rings hold; [`MeteredRing`] keeps
//! the count true on every push, read and drop (also when a job is dropped whole); and
//! [`shed`] brings the total back under the budget by dropping the oldest bytes of the
//! biggest buffers first, counted in the jobs' `dropped_bytes` (SPEC §3.8), never a job's
//! newest [`KEEP_NEWEST`] bytes.
//!
//! It owns the accounting only: which jobs exist, and when to call [`shed`], is `jobs`'.
//! What is not counted: each ring's peek tail (at most 64 KiB a job), and the instances'
//! own memory (`--wasm-max-memory` each).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use supervisor::ring::{Ring, Stream, Taken};

/// A job's newest bytes that shedding never takes: only a job's own cap, or a reader,
/// removes them. The budget holds while it is at least this much per kept job.
pub const KEEP_NEWEST: usize = 16 * 1024;

/// The default budget (`--wasm-job-output-budget`): 256 MiB.
pub const DEFAULT_BUDGET: u64 = 256 << 20;

/// The unread job output this server holds, and its bound.
#[derive(Debug)]
pub struct OutputBudget {
    limit: u64,
    used: AtomicU64,
}

impl OutputBudget {
    pub fn new(limit: u64) -> Self {
        Self {
            limit: limit.max(1),
            used: AtomicU64::new(0),
        }
    }

    /// The bound, in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// Is more held than the bound allows?
    pub fn over(&self) -> bool {
        self.used() > self.limit
    }

    /// Records that a ring went from `before` to `after` bytes.
    fn moved(&self, before: usize, after: usize) {
        if after >= before {
            self.used
                .fetch_add((after - before) as u64, Ordering::SeqCst);
        } else {
            let n = (before - after) as u64;
            // Never below zero, whatever the order of concurrent updates.
            let _ = self
                .used
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| {
                    Some(u.saturating_sub(n))
                });
        }
    }
}

/// A job's [`Ring`] whose bytes count against an [`OutputBudget`].
#[derive(Debug)]
pub struct MeteredRing {
    ring: Ring,
    budget: Arc<OutputBudget>,
    /// Bytes [`MeteredRing::shed_oldest`] dropped since the previous read.
    shed: u64,
}

impl MeteredRing {
    /// A ring of at most `cap` bytes, counted in `budget`.
    pub fn new(cap: usize, budget: Arc<OutputBudget>) -> Self {
        Self {
            ring: Ring::new(cap),
            budget,
            shed: 0,
        }
    }

    /// Unread bytes.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Whether a read would return anything (output, or a count of dropped bytes).
    pub fn has_news(&self) -> bool {
        self.ring.has_news() || self.shed > 0
    }

    /// Appends output ([`Ring::push`]: its own cap drops the oldest).
    pub fn push(&mut self, stream: Stream, bytes: &[u8]) {
        let before = self.ring.len();
        self.ring.push(stream, bytes);
        self.budget.moved(before, self.ring.len());
    }

    /// Takes up to `max` bytes ([`Ring::take`]); `dropped` also counts what shedding took.
    pub fn take(&mut self, max: usize, hold_partial: bool) -> Taken {
        let before = self.ring.len();
        let mut taken = self.ring.take(max, hold_partial);
        self.budget.moved(before, self.ring.len());
        taken.dropped += std::mem::take(&mut self.shed);
        taken
    }

    /// The newest bytes of each stream, read or not ([`Ring::recent`]).
    pub fn recent(&self, max: usize, hold_partial: bool) -> (Vec<u8>, Vec<u8>) {
        self.ring.recent(max, hold_partial)
    }

    /// Drops up to `n` of the oldest unread bytes, leaving at least the newest
    /// [`KEEP_NEWEST`], and counts them as dropped; returns how many went.
    pub fn shed_oldest(&mut self, n: usize) -> usize {
        let n = n.min(self.ring.len().saturating_sub(KEEP_NEWEST));
        if n == 0 {
            return 0;
        }
        let before = self.ring.len();
        let t = self.ring.take(n, false);
        let after = self.ring.len();
        self.budget.moved(before, after);
        // The ring's own count of dropped bytes came out with the take: keep it too.
        self.shed += t.dropped + (before - after) as u64;
        before - after
    }
}

impl Drop for MeteredRing {
    fn drop(&mut self) {
        self.budget.moved(self.ring.len(), 0);
    }
}

/// Brings `budget` back to a little under its bound (1/32 of it below, so a stream of
/// small pushes does not scan on every write) by shedding the oldest bytes of the biggest
/// rings first. `with` lends each job's ring (each lock is taken alone, never two at once).
/// Returns the bytes shed; less than needed only when every ring is down to
/// [`KEEP_NEWEST`].
pub fn shed<T>(
    budget: &OutputBudget,
    jobs: &[T],
    mut with: impl FnMut(&T, &mut dyn FnMut(&mut MeteredRing)),
) -> u64 {
    if !budget.over() {
        return 0;
    }
    let low = budget.limit - budget.limit / 32;
    let mut sizes: Vec<(usize, usize)> = Vec::with_capacity(jobs.len());
    for (i, job) in jobs.iter().enumerate() {
        with(job, &mut |r| sizes.push((r.len(), i)));
    }
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut total = 0u64;
    for (_, i) in sizes {
        let need = budget.used().saturating_sub(low);
        if need == 0 {
            break;
        }
        let need = usize::try_from(need).unwrap_or(usize::MAX);
        with(&jobs[i], &mut |r| total += r.shed_oldest(need) as u64);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    fn lend(m: &Mutex<MeteredRing>, f: &mut dyn FnMut(&mut MeteredRing)) {
        f(&mut m.lock().unwrap())
    }

    #[test]
    fn issue_46_every_push_read_and_drop_is_counted() {
        let budget = Arc::new(OutputBudget::new(1 << 20));
        let mut a = MeteredRing::new(1000, budget.clone());
        let mut b = MeteredRing::new(1000, budget.clone());
        a.push(Stream::Stdout, &[b'a'; 600]);
        b.push(Stream::Stderr, &[b'b'; 300]);
        assert_eq!(budget.used(), 900);
        // The ring's own cap drops the oldest: the count follows.
        a.push(Stream::Stdout, &[b'a'; 600]);
        assert_eq!(budget.used(), 1300);
        let t = a.take(250, false);
        assert_eq!((t.stdout.len(), t.dropped), (250, 200));
        assert_eq!(budget.used(), 1050);
        // A job dropped whole gives its bytes back.
        drop(a);
        assert_eq!(budget.used(), 300);
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn issue_46_shedding_takes_the_oldest_of_the_biggest_and_keeps_the_newest() {
        const CAP: usize = 8 << 20;
        let budget = Arc::new(OutputBudget::new(1 << 20));
        let rings: Vec<Mutex<MeteredRing>> = (0..4)
            .map(|_| Mutex::new(MeteredRing::new(CAP, budget.clone())))
            .collect();
        let mut pushed = [0u64; 4];
        // Ring 0 writes the most; every push is followed by shedding, as a job's writer does.
        for round in 0..200u32 {
            for (i, r) in rings.iter().enumerate() {
                let n = if i == 0 { 16 * 1024 } else { 2 * 1024 };
                let byte = b'a' + (round % 26) as u8;
                r.lock().unwrap().push(Stream::Stdout, &vec![byte; n]);
                pushed[i] += n as u64;
                shed(&budget, &rings, lend);
                assert!(budget.used() <= budget.limit(), "round {round}");
            }
        }
        let held: usize = rings.iter().map(|r| r.lock().unwrap().len()).sum();
        assert_eq!(held as u64, budget.used());
        // Every byte is read or counted as dropped, and each ring ends with its newest bytes.
        for (i, r) in rings.iter().enumerate() {
            let t = r.lock().unwrap().take(usize::MAX, false);
            assert_eq!(t.stdout.len() as u64 + t.dropped, pushed[i], "ring {i}");
            assert!(t.stdout.len() >= KEEP_NEWEST, "ring {i}");
            assert!(t.stdout.ends_with(&[b'a' + (199 % 26) as u8; 2048]));
        }
        // Read to the end, nothing is held any more.
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn issue_46_shedding_stops_at_the_newest_bytes_of_every_job() {
        let budget = Arc::new(OutputBudget::new(40 * 1024));
        let rings: Vec<Mutex<MeteredRing>> = (0..4)
            .map(|_| Mutex::new(MeteredRing::new(1 << 20, budget.clone())))
            .collect();
        for r in &rings {
            r.lock().unwrap().push(Stream::Stdout, &[b'x'; 64 * 1024]);
        }
        let shed_bytes = shed(&budget, &rings, lend);
        assert_eq!(shed_bytes, 4 * 48 * 1024);
        for r in &rings {
            let mut r = r.lock().unwrap();
            assert_eq!(r.len(), KEEP_NEWEST);
            assert!(r.has_news());
            assert_eq!(r.take(usize::MAX, false).dropped, 48 * 1024);
        }
    }
}

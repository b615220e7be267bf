//! The warm pool (`--warm-pool N`): started computers kept ready for new slugs.
//!
//! Docker labels and hostnames cannot change after creation, so a member is made complete
//! for the computer it will become: a fresh slug chosen now is its computer id label and
//! its hostname, and it is labelled temporary or permanent, with this server's instance
//! and host. Only its name says it is not a computer yet: `msc-pool.<slug>` (a `.` is
//! never in a computer id), which `find` and `list` never show. Handing it out is one
//! rename to `kilntainer-<slug>`; from then on it is an ordinary computer, found again by
//! its labels like any other.
//!
//! So the pool serves only computers whose id the server picks (a call without
//! `computer_id`, or `computer_create` without one): a computer named by its caller has
//! that name as its hostname and is made on demand, and so is a gateway team's (its team
//! is a label). Members are made one at a time in the background, of the kind (temporary
//! or permanent) asked for last; one built from an image the tag no longer names is
//! removed, never handed out. A server's shutdown removes its members, and a member left
//! by a server that was killed is removed by the next start on this host
//! ([`Docker::reap_pool_leftovers`]), like temporaries.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bollard::query_parameters::RenameContainerOptions;

use super::{Docker, DockerError, LABEL_HOST, LABEL_INSTANCE, LABEL_OURS, container_name};
use crate::progress::Progress;
use crate::spec::ContainerRecord;

/// Label on pool members (kept after hand-out: it tells how the computer was made).
pub const LABEL_POOL: &str = "mcp-sandbox.pool";
/// Name prefix of members not handed out yet.
pub const NAME_PREFIX: &str = "msc-pool.";
/// The largest pool `--warm-pool` accepts.
pub const MAX_SIZE: usize = 64;

/// The container name of the member that would become `slug`.
pub fn member_name(slug: &str) -> String {
    format!("{NAME_PREFIX}{slug}")
}

/// One started member.
#[derive(Debug, Clone)]
struct Member {
    slug: String,
    temporary: bool,
    /// The image id it was created from.
    image_id: String,
    /// As created (its labels already name its computer).
    record: ContainerRecord,
}

#[derive(Debug, Default)]
struct State {
    ready: VecDeque<Member>,
    /// Members handed a slug by [`Docker::pool_slug`], not renamed yet.
    reserved: HashMap<String, Member>,
    /// The kind asked for last (the next member is made of this kind).
    want_temporary: bool,
    /// A member is being made (it counts as the pool's when deciding to make room).
    making: bool,
}

/// The pool of one server (shared by every clone of its [`Docker`]).
#[derive(Debug)]
pub struct Pool {
    size: usize,
    state: Mutex<State>,
    wake: tokio::sync::Notify,
    closed: AtomicBool,
    /// Held while a member is being made, so shutdown waits for it instead of leaking it.
    making: tokio::sync::Mutex<()>,
    /// Computers being made on demand right now: the filler waits for them, so a burst
    /// of new computers never queues behind members at the engine.
    demand: AtomicUsize,
}

/// Counts one computer being made on demand while it lives.
pub(super) struct Demand<'a>(&'a AtomicUsize);

impl Drop for Demand<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    pub fn new(size: usize) -> Self {
        Self {
            size,
            state: Mutex::new(State {
                want_temporary: true,
                ..State::default()
            }),
            wake: tokio::sync::Notify::new(),
            closed: AtomicBool::new(false),
            making: tokio::sync::Mutex::new(()),
            demand: AtomicUsize::new(0),
        }
    }

    /// Marks a computer being made on demand until the guard drops.
    pub(super) fn on_demand(&self) -> Demand<'_> {
        self.demand.fetch_add(1, Ordering::SeqCst);
        Demand(&self.demand)
    }

    /// Members started and not handed out.
    pub fn ready(&self) -> usize {
        lock(&self.state).ready.len()
    }

    /// Takes a ready member of kind `temporary` and reserves its slug; `None` when there
    /// is none (the member to evict for the wanted kind is returned instead, if any).
    fn reserve(&self, temporary: bool) -> (Option<String>, Option<Member>) {
        let mut s = lock(&self.state);
        s.want_temporary = temporary;
        if let Some(at) = s.ready.iter().position(|m| m.temporary == temporary)
            && let Some(m) = s.ready.remove(at)
        {
            let slug = m.slug.clone();
            s.reserved.insert(slug.clone(), m);
            return (Some(slug), None);
        }
        // Full of the other kind (a member being made included): make room, so the next
        // member is of the kind asked for.
        let evict = (s.ready.len() + usize::from(s.making) >= self.size)
            .then(|| s.ready.pop_back())
            .flatten();
        (None, evict)
    }

    fn take_reserved(&self, slug: &str) -> Option<Member> {
        lock(&self.state).reserved.remove(slug)
    }

    /// Removes and returns every member made from another image than `image_id`.
    fn purge_other_images(&self, image_id: &str) -> Vec<Member> {
        let mut s = lock(&self.state);
        let (keep, stale): (VecDeque<Member>, VecDeque<Member>) =
            s.ready.drain(..).partition(|m| m.image_id == image_id);
        s.ready = keep;
        stale.into()
    }

    /// The kind of member to make next, if the pool is short of one.
    fn wanted(&self) -> Option<bool> {
        let s = lock(&self.state);
        (s.ready.len() < self.size).then_some(s.want_temporary)
    }
}

impl Docker {
    /// Is `slug` reserved for a member (so no computer has it yet: no need to look)?
    pub fn pool_reserved(&self, slug: &str) -> bool {
        self.pool
            .as_ref()
            .is_some_and(|p| lock(&p.state).reserved.contains_key(slug))
    }

    /// Counts a computer made on demand (the filler waits), if there is a pool.
    pub(super) fn on_demand(&self) -> Option<Demand<'_>> {
        self.pool.as_ref().map(|p| p.on_demand())
    }

    /// A slug for a new computer of kind `temporary` whose member is ready (reserved for
    /// it until [`Docker::create`] renames it), or `None`: make one from scratch.
    pub fn pool_slug(&self, temporary: bool) -> Option<String> {
        let pool = self.pool.as_ref()?;
        let (slug, evict) = pool.reserve(temporary);
        crate::metrics::pool_handout(slug.is_some());
        if let Some(m) = evict {
            self.remove_members(vec![m]);
        }
        pool.wake.notify_one();
        crate::metrics::pool_ready(pool.ready());
        slug
    }

    /// Hands out the member reserved for `slug`, renamed to its computer's name. `None`
    /// when there is none for it (or it cannot be used: it is removed; a member has the
    /// server's network policy, so a computer narrowed to another is made afresh), so the
    /// caller creates the computer from scratch.
    pub(super) async fn hand_out(
        &self,
        slug: &str,
        temporary: bool,
        network: &shared::egress::Policy,
        image_id: &str,
    ) -> Option<ContainerRecord> {
        let pool = self.pool.as_ref()?;
        let member = pool.take_reserved(slug)?;
        let stale = pool.purge_other_images(image_id);
        if !stale.is_empty() {
            tracing::info!(
                count = stale.len(),
                "the image changed under its tag; removing warm-pool members of the old one"
            );
            self.remove_members(stale);
            pool.wake.notify_one();
        }
        if member.image_id != image_id
            || member.temporary != temporary
            || *network != self.cfg.network
        {
            self.remove_members(vec![member]);
            return None;
        }
        let from = member_name(slug);
        let to = container_name(slug);
        let renamed = self
            .client
            .rename_container(&from, RenameContainerOptions { name: to.clone() })
            .await;
        if let Err(e) = renamed {
            tracing::warn!(slug, error = %e, "could not hand out a warm-pool member; creating the computer instead");
            self.remove_members(vec![member]);
            return None;
        }
        self.renamed(&from, &to);
        // As made: no engine round trip (a member that stopped meanwhile is started again
        // by the first exec, as any computer whose PID 1 died).
        Some(member.record)
    }

    /// Keeps the relay and what is known of a container across its rename.
    fn renamed(&self, from: &str, to: &str) {
        let supervised = super::supervised::lock(&self.supervised_cache).remove(from);
        if let Some(yes) = supervised {
            self.remember_supervised(to, yes);
        }
        let dir = super::supervised::lock(&self.channels).remove(from);
        if let Some(dir) = dir {
            super::supervised::lock(&self.channels).insert(to.to_owned(), dir);
        }
        let conn = super::supervised::lock(&self.connections).remove(from);
        if let Some(c) = conn {
            super::supervised::lock(&self.connections).insert(to.to_owned(), c);
        }
        self.gate_renamed(from, to);
    }

    /// Removes members in the background (nothing waits on a member's removal).
    fn remove_members(&self, members: Vec<Member>) {
        for m in members {
            let d = self.clone();
            tokio::spawn(async move { d.remove_member(&m.slug).await });
        }
    }

    async fn remove_member(&self, slug: &str) {
        if let Err(e) = self.remove_container(&member_name(slug)).await {
            tracing::warn!(slug, error = %e, "could not remove a warm-pool member");
        }
    }

    /// Starts the pool's filler (no-op without `--warm-pool`).
    pub fn start_pool(&self) {
        let Some(pool) = self.pool.clone() else {
            return;
        };
        let d = self.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(500);
            loop {
                // Registered before the check, so a wake between the two is not lost.
                let woken = pool.wake.notified();
                if pool.closed.load(Ordering::SeqCst) {
                    return;
                }
                let Some(temporary) = pool.wanted() else {
                    woken.await;
                    continue;
                };
                drop(woken);
                while pool.demand.load(Ordering::SeqCst) > 0 && !pool.closed.load(Ordering::SeqCst)
                {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                match d.make_member(temporary).await {
                    Ok(()) => backoff = Duration::from_millis(500),
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in = ?backoff, "could not make a warm-pool computer");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(30));
                    }
                }
            }
        });
    }

    async fn make_member(&self, temporary: bool) -> Result<(), DockerError> {
        let Some(pool) = self.pool.as_ref() else {
            return Ok(());
        };
        let _making = pool.making.lock().await;
        if pool.closed.load(Ordering::SeqCst) {
            return Ok(());
        }
        lock(&pool.state).making = true;
        let made = self.make_started(temporary).await;
        let mut s = lock(&pool.state);
        s.making = false;
        let result = made.map(|m| s.ready.push_back(m));
        let n = s.ready.len();
        drop(s);
        crate::metrics::pool_ready(n);
        result
    }

    /// Creates and starts one member of kind `temporary`, its relay opened.
    async fn make_started(&self, temporary: bool) -> Result<Member, DockerError> {
        let image_id = self.ensure_image(&Progress::default()).await?;
        let slug = shared::ids::slug_from_random(rand::random::<u64>());
        let name = member_name(&slug);
        let m = super::Making {
            name: &name,
            computer_id: &slug,
            temporary,
            team: None,
            network: &self.cfg.network,
            pooled: true,
            image: None,
        };
        let record = self.create_named(m, &Progress::default()).await?;
        // The relay is opened now, so the first command pays nothing for it.
        if self.is_supervised(&name).await
            && let Err(e) = self.connection(&name).await
        {
            tracing::debug!(slug, error = %e, "a warm-pool member's supervisor did not answer yet");
        }
        Ok(Member {
            slug,
            temporary,
            image_id,
            record,
        })
    }

    /// Removes this server's members (shutdown), waiting for one being made.
    pub async fn close_pool(&self) {
        let Some(pool) = self.pool.as_ref() else {
            return;
        };
        pool.closed.store(true, Ordering::SeqCst);
        pool.wake.notify_one();
        let _made = pool.making.lock().await;
        let members: Vec<Member> = {
            let mut s = lock(&pool.state);
            let mut all: Vec<Member> = s.ready.drain(..).collect();
            all.extend(s.reserved.drain().map(|(_, m)| m));
            all
        };
        futures_util::future::join_all(members.iter().map(|m| self.remove_member(&m.slug))).await;
        crate::metrics::pool_ready(0);
    }

    /// Removes members left on this host by servers that are no longer running. Returns
    /// how many.
    pub async fn reap_pool_leftovers(&self) -> Result<usize, DockerError> {
        let list = self
            .list_labelled(vec![
                format!("{LABEL_OURS}=true"),
                format!("{LABEL_POOL}=1"),
            ])
            .await?;
        let mut gone = 0;
        for c in list {
            let labels = c.labels.unwrap_or_default();
            let unclaimed = c
                .names
                .unwrap_or_default()
                .iter()
                .any(|n| n.trim_start_matches('/').starts_with(NAME_PREFIX));
            let here = labels.get(LABEL_HOST).map(String::as_str) == Some(self.host.as_str());
            let dead = match labels.get(LABEL_INSTANCE) {
                Some(i) if *i == self.instance => false,
                Some(i) => !crate::instance::is_alive(i),
                None => false,
            };
            if unclaimed && here && dead {
                let Some(id) = c.id else { continue };
                match self.remove_container(&id).await {
                    Ok(true) => gone += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "could not remove a warm-pool computer of a server that is gone")
                    }
                }
            }
        }
        if gone > 0 {
            tracing::info!(
                count = gone,
                "removed warm-pool computers of servers that are gone"
            );
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(slug: &str, temporary: bool, image: &str) -> Member {
        Member {
            slug: slug.into(),
            temporary,
            image_id: image.into(),
            record: ContainerRecord {
                computer_id: slug.into(),
                provider_id: "c".into(),
                temporary,
                instance: None,
                host: None,
                image: "img".into(),
                state: shared::lifecycle::ComputerState::Running,
                created_at: "t".into(),
                team: None,
                network: None,
            },
        }
    }

    #[test]
    fn members_are_never_computer_names() {
        let name = member_name("quiet-fox-0a1b");
        assert!(!name.starts_with(super::super::NAME_PREFIX));
        assert!(shared::ids::validate_computer_id(name.trim_start_matches(NAME_PREFIX)).is_ok());
        assert!(shared::ids::validate_computer_id(&name).is_err());
    }

    #[test]
    fn reserving_takes_the_kind_asked_for_and_makes_room_for_it() {
        let p = Pool::new(2);
        {
            let mut s = lock(&p.state);
            s.ready.push_back(member("a", true, "i1"));
            s.ready.push_back(member("b", true, "i1"));
        }
        assert_eq!(p.wanted(), None);
        // No permanent member in a full pool: one temporary goes, the next made is permanent.
        let (slug, evict) = p.reserve(false);
        assert_eq!(slug, None);
        assert_eq!(evict.map(|m| m.slug), Some("b".into()));
        assert_eq!(p.wanted(), Some(false));
        let (slug, evict) = p.reserve(true);
        assert_eq!(slug.as_deref(), Some("a"));
        assert!(evict.is_none());
        assert_eq!(p.take_reserved("a").map(|m| m.temporary), Some(true));
        // One ready and one being made count as full: a miss still makes room.
        {
            let mut s = lock(&p.state);
            s.ready.push_back(member("c", false, "i1"));
            s.making = true;
        }
        let (slug, evict) = p.reserve(true);
        assert_eq!((slug, evict.map(|m| m.slug)), (None, Some("c".into())));
        lock(&p.state).making = false;
        assert!(p.take_reserved("a").is_none());
        assert_eq!(p.ready(), 0);
    }

    #[test]
    fn members_of_another_image_are_purged() {
        let p = Pool::new(3);
        {
            let mut s = lock(&p.state);
            s.ready.push_back(member("a", true, "old"));
            s.ready.push_back(member("b", true, "new"));
            s.ready.push_back(member("c", false, "old"));
        }
        let stale: Vec<String> = p
            .purge_other_images("new")
            .into_iter()
            .map(|m| m.slug)
            .collect();
        assert_eq!(stale, ["a", "c"]);
        assert_eq!(p.ready(), 1);
    }
}

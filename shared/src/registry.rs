//! The computer registry, sans I/O: which computers a server knows, who owns each
//! temporary one, which of them a caller may see, which id a call without one names, when a
//! temporary's life ends, and what ran on each.
//!
//! Both servers run these rules over their own [`InventoryStore`]: the binary over a map in
//! memory ([`MemoryStore`]), the gateway's Team Durable Object over its SQLite tables. The
//! registry never talks to a backend and never reads a clock: callers bring the time, and
//! act on what it returns (create the computer, remove the expired ones). The policy itself
//! (attach, visibility, TTL) is [`crate::lifecycle`]; this module applies it to a store.

use std::collections::HashMap;
use std::convert::Infallible;

use crate::executor_api::{NeedsManage, Scope};
use crate::history::{History, HistoryEntry};
use crate::lifecycle::{
    Existing, LifecycleError, becomes_default, check_attach, idle_expired, visible_to,
};

/// The owner of a computer whose removal failed and is tried again ([`Registry::retire`])
/// starts with this, followed by the owner it had: no caller's owner key looks like it
/// (theirs are `session:…`, `user:…`, `team:…`).
pub const RETIRED: &str = "(removal pending)";

/// What the registry knows of one computer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The store's key: the backend name locally (`shared::teams::key`), the caller's id in
    /// a team's Durable Object.
    pub id: String,
    /// Where it lives: the backend locally, the executor or provider at the edge.
    pub place: String,
    pub temporary: bool,
    /// Owner of a temporary computer; `None` for permanent ones (shared by id).
    pub owner: Option<String>,
    /// Made for a caller without a session end (stateless HTTP, an executor's team): it
    /// goes when idle, not when a session closes.
    pub stateless: bool,
    /// Last use (ms since the epoch): attach, a command's start and end.
    pub last_used_ms: u64,
    /// Commands running now: a computer in use is never idle, however long they run.
    /// Stores that do not see commands (the gateway's) keep 0.
    pub running: u32,
}

impl Entry {
    /// Who the computer was made for: its owner, or a tombstone's owner before it was
    /// retired (the removal is retried in that owner's name, as an executor that checks
    /// owners requires).
    pub fn principal(&self) -> Option<&str> {
        let owner = self.owner.as_deref()?;
        Some(match owner.strip_prefix(RETIRED) {
            Some(first) => first.strip_prefix(' ').unwrap_or(first),
            None => owner,
        })
    }

    fn existing(&self) -> Existing<'_> {
        Existing {
            computer_id: &self.id,
            temporary: self.temporary,
            owner: self.owner.as_deref(),
        }
    }
}

/// A computer to record: the call's wish and the caller.
#[derive(Debug, Clone, Copy)]
pub struct Claimant<'a> {
    /// `temporary` as the call gave it (`None`: whatever the computer is; new ones are
    /// temporary).
    pub requested: Option<bool>,
    pub owner: &'a str,
    pub stateless: bool,
    /// The caller's scopes (the `scope` claim, space separated) where scopes apply (an
    /// executor, the gateway): a new permanent computer needs `manage`
    /// ([`Scope::may_create`]). `None`: a local server's caller, who may make anything.
    pub scope: Option<&'a str>,
}

impl Claimant<'_> {
    /// May this claimant make a new computer of kind `temporary`?
    pub fn may_create(&self, temporary: bool) -> Result<(), NeedsManage> {
        match self.scope {
            Some(claim) => Scope::may_create(claim, temporary),
            None => Ok(()),
        }
    }

    /// The entry of a computer made for this claimant.
    fn entry(&self, id: &str, place: &str, temporary: bool, now_ms: u64) -> Entry {
        Entry {
            id: id.to_owned(),
            place: place.to_owned(),
            temporary,
            owner: temporary.then(|| self.owner.to_owned()),
            stateless: self.stateless,
            last_used_ms: now_ms,
            running: 0,
        }
    }
}

/// Where the registry's entries are kept. Small on purpose: every rule lives in
/// [`Registry`], so a store only reads and writes rows.
pub trait InventoryStore {
    type Error: std::fmt::Display + std::fmt::Debug;
    fn get(&self, id: &str) -> Result<Option<Entry>, Self::Error>;
    /// Inserts or replaces the entry with `entry.id`.
    fn put(&mut self, entry: &Entry) -> Result<(), Self::Error>;
    fn remove(&mut self, id: &str) -> Result<(), Self::Error>;
    /// Every entry, in id order.
    fn entries(&self) -> Result<Vec<Entry>, Self::Error>;
    /// Changes the entry `id` in place, if there is one; a store may do it without a copy.
    fn update(&mut self, id: &str, change: impl FnOnce(&mut Entry)) -> Result<(), Self::Error> {
        match self.get(id)? {
            Some(mut e) => {
                change(&mut e);
                self.put(&e)
            }
            None => Ok(()),
        }
    }
    /// Records a use; a store may do it in one write.
    fn touch(&mut self, id: &str, now_ms: u64) -> Result<(), Self::Error> {
        self.update(id, |e| e.last_used_ms = now_ms)
    }
}

/// Why the registry refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError<E> {
    #[error(transparent)]
    Policy(#[from] LifecycleError),
    /// A new permanent computer for a caller without `manage` (403; nothing recorded).
    #[error(transparent)]
    Forbidden(#[from] NeedsManage),
    /// The caller may not see it, or it does not exist: the same answer for both, so a
    /// caller learns nothing about another session's temporaries.
    #[error(
        "computer {0:?} does not exist (or is another session's temporary computer); see computer_list"
    )]
    Unknown(String),
    #[error("computer inventory: {0}")]
    Store(E),
}

/// Which computer a command names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// The call gave `computer_id`.
    Named(String),
    /// No id: the caller's default computer.
    Default(String),
    /// No id and no default yet: a new temporary computer that becomes the default.
    NewDefault(String),
    /// No id with `temporary=false`: a new permanent computer, not the default.
    Fresh(String),
}

impl Target {
    /// The target of a command with `computer_id` and `temporary` for a caller whose
    /// default is `default`; `fresh` makes a new id (SPEC §3.6).
    pub fn of(
        computer_id: Option<&str>,
        temporary: Option<bool>,
        default: Option<&str>,
        fresh: impl FnOnce() -> String,
    ) -> Self {
        match (computer_id, default) {
            (Some(id), _) => Target::Named(id.to_owned()),
            (None, _) if !Self::reads_default(None, temporary) => Target::Fresh(fresh()),
            (None, Some(d)) => Target::Default(d.to_owned()),
            (None, None) => Target::NewDefault(fresh()),
        }
    }

    /// Does a call with `computer_id` and `temporary` name its caller's default (so the
    /// caller must read it, and hold it while a new default is made)?
    pub fn reads_default(computer_id: Option<&str>, temporary: Option<bool>) -> bool {
        computer_id.is_none() && becomes_default(temporary)
    }

    pub fn id(&self) -> &str {
        match self {
            Target::Named(id)
            | Target::Default(id)
            | Target::NewDefault(id)
            | Target::Fresh(id) => id,
        }
    }

    /// The `temporary` to attach with, given the call's.
    pub fn requested(&self, temporary: Option<bool>) -> Option<bool> {
        match self {
            Target::Named(_) => temporary,
            Target::Default(_) => None,
            Target::NewDefault(_) => Some(true),
            Target::Fresh(_) => Some(false),
        }
    }

    /// Does the caller's default become this computer, once attached?
    pub fn sets_default(&self) -> bool {
        matches!(self, Target::NewDefault(_))
    }
}

/// The rules over a store. History is kept beside the store, in memory: only the place
/// that runs commands records it (the binary, an executor), and it goes with the entry.
#[derive(Debug, Default)]
pub struct Registry<S> {
    store: S,
    history: HashMap<String, History>,
}

type Res<T, S> = Result<T, RegistryError<<S as InventoryStore>::Error>>;

impl<S: InventoryStore> Registry<S> {
    pub fn new(store: S) -> Self {
        Self {
            store,
            history: HashMap::new(),
        }
    }

    fn store<T>(r: Result<T, S::Error>) -> Res<T, S> {
        r.map_err(RegistryError::Store)
    }

    /// The policy's answer for a computer the store knows: its entry if `claimant` may
    /// attach, `None` if the store does not know `id`.
    pub fn check(&self, id: &str, claimant: &Claimant<'_>) -> Res<Option<Entry>, S> {
        match Self::store(self.store.get(id))? {
            Some(e) => {
                check_attach(&e.existing(), claimant.requested, claimant.owner)?;
                Ok(Some(e))
            }
            None => Ok(None),
        }
    }

    /// Attaches `claimant` to `id` in a store that is the whole truth (the gateway's):
    /// the known entry, or a new one placed at `place`. `true` if it is new.
    pub fn claim(
        &mut self,
        id: &str,
        place: &str,
        claimant: &Claimant<'_>,
        now_ms: u64,
    ) -> Res<(Entry, bool), S> {
        if let Some(e) = self.check(id, claimant)? {
            return Ok((e, false));
        }
        let temporary = claimant.requested.unwrap_or(true);
        claimant.may_create(temporary)?;
        Ok((
            self.record_new(id, place, temporary, claimant, now_ms)?,
            true,
        ))
    }

    /// Records a computer just made for `claimant`.
    pub fn record_new(
        &mut self,
        id: &str,
        place: &str,
        temporary: bool,
        claimant: &Claimant<'_>,
        now_ms: u64,
    ) -> Res<Entry, S> {
        let e = claimant.entry(id, place, temporary, now_ms);
        Self::store(self.store.put(&e))?;
        Ok(e)
    }

    /// May `claimant` take a computer that exists but the store did not know (found at
    /// the backend: a permanent one made elsewhere, or a temporary one of another server,
    /// never ours to take)? Records it if so.
    pub fn adopt(
        &mut self,
        id: &str,
        place: &str,
        temporary: bool,
        claimant: &Claimant<'_>,
        now_ms: u64,
    ) -> Res<Entry, S> {
        let unknown_owner = Existing {
            computer_id: id,
            temporary,
            owner: None,
        };
        check_attach(&unknown_owner, claimant.requested, claimant.owner)?;
        self.record_new(id, place, temporary, claimant, now_ms)
    }

    /// May `owner` see a computer with this `id` and `temporary` flag (from the store, or
    /// from a backend's list)? Unknown temporaries are nobody's to see.
    pub fn may_see(&self, id: &str, temporary: bool, owner: &str) -> Result<bool, S::Error> {
        let known = self.store.get(id)?;
        let existing = Existing {
            computer_id: id,
            temporary,
            owner: known.as_ref().and_then(|e| e.owner.as_deref()),
        };
        Ok(visible_to(&existing, owner))
    }

    /// The entry of `id` if `owner` may see it (restart, reset, delete).
    pub fn visible(&self, id: &str, owner: &str) -> Res<Entry, S> {
        match Self::store(self.store.get(id))? {
            Some(e) if visible_to(&e.existing(), owner) => Ok(e),
            _ => Err(RegistryError::Unknown(id.to_owned())),
        }
    }

    /// What `owner` sees: every permanent computer and its own temporaries, in id order.
    pub fn list(&self, owner: &str) -> Result<Vec<Entry>, S::Error> {
        let mut all = self.store.entries()?;
        all.retain(|e| visible_to(&e.existing(), owner));
        Ok(all)
    }

    /// Forgets `id` (deleted, or gone at its place) and its history.
    pub fn forget(&mut self, id: &str) -> Result<(), S::Error> {
        self.history.remove(id);
        self.store.remove(id)
    }

    /// Keeps `id` as a tombstone after its removal failed (its place did not answer): owned
    /// by [`RETIRED`] (and its first owner, [`Entry::principal`]), which no caller is, so
    /// nobody attaches to it, sees it or names it
    /// again, and idle at once (stateless, unused since the epoch), so every idle sweep
    /// tries its removal again until the place answers (issue 46: a temporary that an
    /// executor may still hold must never be forgotten and handed to another caller).
    pub fn retire(&mut self, id: &str) -> Result<(), S::Error> {
        self.store.update(id, |e| {
            if !e.owner.as_deref().is_some_and(|o| o.starts_with(RETIRED)) {
                let first = e.owner.as_deref().unwrap_or_default();
                e.owner = Some(format!("{RETIRED} {first}"));
            }
            e.temporary = true;
            e.stateless = true;
            e.last_used_ms = 0;
        })
    }

    /// The temporaries of `owner`, whose session ended: the caller removes and forgets them.
    pub fn owned_by(&self, owner: &str) -> Result<Vec<Entry>, S::Error> {
        self.select(|e| e.temporary && e.owner.as_deref() == Some(owner))
    }

    /// Stateless callers' temporaries unused for `timeout_secs` and running nothing.
    pub fn idle(&self, now_ms: u64, timeout_secs: u64) -> Result<Vec<Entry>, S::Error> {
        self.select(|e| {
            e.temporary
                && e.stateless
                && e.running == 0
                && idle_expired(e.last_used_ms, now_ms, timeout_secs)
        })
    }

    /// Whether `id` is a known computer.
    pub fn contains(&self, id: &str) -> Result<bool, S::Error> {
        Ok(self.store.get(id)?.is_some())
    }

    /// Every computer known (a metrics scrape counts them).
    pub fn all(&self) -> Result<Vec<Entry>, S::Error> {
        self.store.entries()
    }

    /// Every temporary computer (the server is shutting down).
    pub fn temporaries(&self) -> Result<Vec<Entry>, S::Error> {
        self.select(|e| e.temporary)
    }

    fn select(&self, keep: impl Fn(&Entry) -> bool) -> Result<Vec<Entry>, S::Error> {
        let mut all = self.store.entries()?;
        all.retain(|e| keep(e));
        Ok(all)
    }

    /// Records a use of `id`.
    pub fn touch(&mut self, id: &str, now_ms: u64) -> Result<(), S::Error> {
        self.store.touch(id, now_ms)
    }

    /// A command starts (`true`) or ends (`false`) on `id`: a use, and the running count.
    pub fn running(&mut self, id: &str, starting: bool, now_ms: u64) -> Result<(), S::Error> {
        self.store.update(id, |e| {
            e.running = if starting {
                e.running + 1
            } else {
                e.running.saturating_sub(1)
            };
            e.last_used_ms = now_ms;
        })
    }

    /// Computers known and commands running now (`/v1/health`).
    pub fn load(&self) -> Result<(u64, u64), S::Error> {
        let all = self.store.entries()?;
        let running = all.iter().map(|e| u64::from(e.running)).sum();
        Ok((all.len() as u64, running))
    }

    /// Records a command that ran on a known computer.
    pub fn ran(&mut self, id: &str, entry: HistoryEntry) -> Result<(), S::Error> {
        if self.store.get(id)?.is_some() {
            self.history.entry(id.to_owned()).or_default().push(entry);
        }
        Ok(())
    }

    /// What ran on `id` through this registry, oldest first.
    pub fn history(&self, id: &str) -> Vec<HistoryEntry> {
        self.history
            .get(id)
            .map(History::entries)
            .unwrap_or_default()
    }
}

/// The binary's store: a map in memory (a server's sessions end with it).
#[derive(Debug, Default)]
pub struct MemoryStore(std::collections::BTreeMap<String, Entry>);

impl InventoryStore for MemoryStore {
    type Error = Infallible;

    fn get(&self, id: &str) -> Result<Option<Entry>, Infallible> {
        Ok(self.0.get(id).cloned())
    }

    fn put(&mut self, entry: &Entry) -> Result<(), Infallible> {
        self.0.insert(entry.id.clone(), entry.clone());
        Ok(())
    }

    fn remove(&mut self, id: &str) -> Result<(), Infallible> {
        self.0.remove(id);
        Ok(())
    }

    fn entries(&self) -> Result<Vec<Entry>, Infallible> {
        Ok(self.0.values().cloned().collect())
    }

    fn update(&mut self, id: &str, change: impl FnOnce(&mut Entry)) -> Result<(), Infallible> {
        if let Some(e) = self.0.get_mut(id) {
            change(e);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! The cap on computers per principal (`--max-computers-per-principal`, issue 46): a call
//! that would create a computer (the exec and file tools on a new id, `computer_create`,
//! the executor API's create) is refused, changing nothing, when its principal already
//! has that many. SPEC §5's quotas per team are the gateway's; this is the executor's and
//! the local server's own bound, so one caller cannot fill a host.
//!
//! A principal's computers are those of its scope at the backend: a team's on an executor
//! (its owner `team:<t>`), and on a local server, whose callers are one principal (one
//! token, stdio, or the anonymous caller), its computers without a team. Counted: every
//! permanent one, and this server's temporaries (another live server's temporaries are
//! that server's to count). Creations under way count too, so a burst of first calls
//! cannot pass the cap together.

use super::{ComputerError, Computers, of_team};
use crate::place::Place;

/// A creation under way in `scope` (a team, or `""`), counted until dropped.
pub(super) struct Creating<'a> {
    computers: &'a Computers,
    scope: String,
}

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        let mut all = self
            .computers
            .creating
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = all.get_mut(&self.scope) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                all.remove(&self.scope);
            }
        }
    }
}

impl Computers {
    /// Admits one more computer of `team`'s principal, or says which cap it would pass.
    /// Hold the answer while the computer is made.
    pub(super) async fn admit_new(
        &self,
        team: Option<&str>,
    ) -> Result<Creating<'_>, ComputerError> {
        let scope = team.unwrap_or_default().to_owned();
        let others = {
            let mut all = self.creating.lock().unwrap_or_else(|p| p.into_inner());
            let n = all.entry(scope.clone()).or_default();
            *n += 1;
            *n - 1
        };
        let creating = Creating {
            computers: self,
            scope,
        };
        let limit = self.defaults.max_computers;
        let ours = self.backend.instance();
        let have = self
            .backend
            .list()
            .await?
            .iter()
            .filter(|r| of_team(r, team))
            .filter(|r| !r.temporary || r.instance.as_deref() == Some(ours))
            .count();
        if have + others >= limit {
            return Err(ComputerError::Quota {
                limit,
                team: team.is_some(),
            });
        }
        Ok(creating)
    }
}

//! Each team's network policy (SPEC §3.11, §5 "Policy per team"), from the Worker var
//! `TEAM_NETWORK`: a JSON object from team names to policies (`"all"`, `"none"` or
//! `{"allow": [rules]}`), `"*"` for every other team (default: `all`). A new computer of
//! a team gets the team's policy, narrowed by the agent's `network`; the gateway sends it
//! with the create to the executor (which narrows it by its own) or to a provider (E2B
//! holds it in its own rules, Fly refuses anything but `all`). An agent may narrow, never
//! widen.

use std::collections::HashMap;

use shared::egress::{Policy, Widening};

use crate::cloud::BadSetting;

/// The teams' policies.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TeamNetworks {
    by_team: HashMap<String, Policy>,
    /// `"*"`: every other team's.
    default: Policy,
}

/// Why the agent's `network` was refused for a team.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "network {asked}: outside team {team}'s policy ({policy}); a computer may only narrow it: ask for rules inside it, or an operator can widen the team's entry in the gateway's TEAM_NETWORK variable"
)]
pub struct Outside {
    pub team: String,
    pub asked: String,
    pub policy: String,
}

impl TeamNetworks {
    /// `TEAM_NETWORK` (`None`: every team `all`).
    pub fn parse(raw: Option<&str>) -> Result<TeamNetworks, BadSetting> {
        let Some(raw) = raw.map(str::trim).filter(|r| !r.is_empty()) else {
            return Ok(TeamNetworks::default());
        };
        let bad = |why: String| {
            BadSetting(format!(
                "the TEAM_NETWORK variable: {why}; it is a JSON object from team names (\"*\" for the others) to \"all\", \"none\" or {{\"allow\": [rules]}}, e.g. {{\"*\": {{\"allow\": [\"pypi.org\"]}}, \"ops\": \"all\"}}"
            ))
        };
        // Policy reads "all", "none" and {"allow": [...]} (its serde form).
        let map: HashMap<String, Policy> =
            serde_json::from_str(raw).map_err(|e| bad(e.to_string()))?;
        let mut out = TeamNetworks::default();
        for (team, policy) in map {
            match team.as_str() {
                "*" => out.default = policy,
                _ => {
                    out.by_team.insert(team, policy);
                }
            }
        }
        Ok(out)
    }

    /// `team`'s policy.
    pub fn of(&self, team: &str) -> &Policy {
        self.by_team.get(team).unwrap_or(&self.default)
    }

    /// The `network` to send for a computer of `team` the agent asked `asked` for:
    /// inside the team's policy always; for a computer this call makes (`new`) without an
    /// ask, the team's policy itself (an existing computer keeps the one it was made with).
    pub fn for_call(
        &self,
        team: &str,
        asked: Option<Policy>,
        new: bool,
    ) -> Result<Option<Policy>, Outside> {
        let policy = self.of(team);
        match asked {
            Some(a) => policy.narrow(Some(&a)).map(Some).map_err(|w| Outside {
                team: team.to_owned(),
                // The first rule outside it, when there is one.
                asked: match w {
                    Widening::Outside { rule, .. } => rule,
                    Widening::NoNetwork => a.to_string(),
                },
                policy: policy.to_string(),
            }),
            None if new && *policy != Policy::All => Ok(Some(policy.clone())),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn teams_get_their_own_policy_or_the_default() {
        let n = TeamNetworks::parse(Some(
            r#"{"*": {"allow": ["pypi.org"]}, "ops": "all", "jail": "none"}"#,
        ))
        .unwrap();
        assert_eq!(n.of("ops"), &Policy::All);
        assert_eq!(n.of("jail"), &Policy::None);
        assert_eq!(n.of("anyone"), &Policy::allow(["pypi.org"]).unwrap());
        assert_eq!(TeamNetworks::parse(None).unwrap().of("x"), &Policy::All);
        for bad in [
            "[]",
            "{",
            r#"{"t": "some"}"#,
            r#"{"t": {"allow": ["not a rule!"]}}"#,
        ] {
            let e = TeamNetworks::parse(Some(bad)).unwrap_err();
            assert!(e.0.starts_with("the TEAM_NETWORK variable"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_agent_narrows_its_teams_policy_and_never_widens_it() {
        let n =
            TeamNetworks::parse(Some(r#"{"*": {"allow": ["pypi.org", "*.npmjs.org"]}}"#)).unwrap();
        let team = Policy::allow(["pypi.org", "*.npmjs.org"]).unwrap();
        // A new computer without an ask: the team's policy; an existing one: nothing sent.
        assert_eq!(n.for_call("t", None, true), Ok(Some(team)));
        assert_eq!(n.for_call("t", None, false), Ok(None));
        let narrow = Policy::allow(["pypi.org"]).unwrap();
        assert_eq!(
            n.for_call("t", Some(narrow.clone()), true),
            Ok(Some(narrow))
        );
        assert_eq!(
            n.for_call("t", Some(Policy::None), false),
            Ok(Some(Policy::None))
        );
        let e = n.for_call("t", Some(Policy::All), true).unwrap_err();
        assert!(e.to_string().contains("outside team t's policy"), "{e}");
        let e = n
            .for_call("t", Some(Policy::allow(["evil.test"]).unwrap()), true)
            .unwrap_err();
        assert!(
            e.to_string().starts_with("network evil.test: outside"),
            "{e}"
        );
        // An open team sends what the agent asked, as before.
        let open = TeamNetworks::default();
        assert_eq!(open.for_call("t", None, true), Ok(None));
        assert_eq!(
            open.for_call("t", Some(Policy::None), true),
            Ok(Some(Policy::None))
        );
    }
}

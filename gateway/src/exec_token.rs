//! Tokens the gateway signs for executors (SPEC §5): HS256 (a fast algorithm: RSA signing
//! costs ~140 ms of CPU on wasm), for one executor (`aud` is its name, so a token minted
//! for one is refused by every other), naming the team, the caller (the owner of the
//! temporaries made for it, which the executor holds to) and its scope, a minute long,
//! and reused until shortly before it expires.

use std::cell::RefCell;
use std::collections::HashMap;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use shared::executor_api::{Claims, GATEWAY_ISSUER};

/// Lifetime of a token, in seconds ("about a minute").
pub const LIFETIME_SECS: u64 = 60;
/// A cached token is replaced this long before it expires (clocks drift, requests take
/// time), so one is reused for 45 s.
const MARGIN_SECS: u64 = 15;

/// What a token says: who it is for, for whom, and what it allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant<'a> {
    /// The executor's name: the token's `aud`.
    pub executor: &'a str,
    /// The team (`sub`).
    pub team: &'a str,
    /// The caller at the gateway (`session:<sid>` or `user:<sub>`): the owner of the
    /// temporaries made for it.
    pub owner: &'a str,
    /// The `scope` claim: what the caller may do, checked again by the executor.
    pub scope: &'a str,
}

/// (executor, team, owner, scope).
type Key = (String, String, String, String);

thread_local! {
    /// Tokens by key, with when they expire.
    static CACHE: RefCell<HashMap<Key, (String, u64)>> = RefCell::new(HashMap::new());
}

/// A token for `grant`, valid at `now` (seconds): a cached one while it has more than
/// [`MARGIN_SECS`] left, else a fresh one (expired ones are dropped then, so the cache
/// holds only the callers of the last minute).
pub fn token(secret: &str, grant: Grant<'_>, now: u64) -> Result<String, SignError> {
    let key = (
        grant.executor.to_owned(),
        grant.team.to_owned(),
        grant.owner.to_owned(),
        grant.scope.to_owned(),
    );
    if let Some(t) = CACHE.with(|c| {
        c.borrow()
            .get(&key)
            .filter(|(_, exp)| now + MARGIN_SECS < *exp)
            .map(|(t, _)| t.clone())
    }) {
        return Ok(t);
    }
    let t = sign(secret, grant, now)?;
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|_, (_, exp)| *exp > now);
        c.insert(key, (t.clone(), now + LIFETIME_SECS));
    });
    Ok(t)
}

/// A token could not be signed (a secret the signing library refuses).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot sign an executor token: {0}")]
pub struct SignError(String);

/// A fresh token (no cache): what one signature costs.
pub fn sign(secret: &str, grant: Grant<'_>, now: u64) -> Result<String, SignError> {
    let claims = Claims {
        iss: GATEWAY_ISSUER.into(),
        aud: grant.executor.into(),
        sub: grant.team.into(),
        iat: now,
        exp: now + LIFETIME_SECS,
        scope: grant.scope.into(),
        owner: grant.owner.into(),
    };
    let signing =
        EncodingKey::from_secret(secret.as_bytes()).map_err(|e| SignError(e.to_string()))?;
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &signing)
        .map_err(|e| SignError(e.to_string()))
}

/// The number of tokens cached in this isolate (tests).
#[cfg(test)]
fn cached() -> usize {
    CACHE.with(|c| c.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{DecodingKey, Validation};

    const SECRET: &str = "executor-secret-0123456789abcdef0123";

    fn grant<'a>(executor: &'a str, owner: &'a str, scope: &'a str) -> Grant<'a> {
        Grant {
            executor,
            team: "team",
            owner,
            scope,
        }
    }

    #[test]
    fn tokens_are_reused_until_near_expiry() {
        let g = grant("a", "user:u", "exec");
        let a = token(SECRET, g, 1_000).unwrap();
        assert_eq!(token(SECRET, g, 1_040).unwrap(), a);
        let other_team = Grant { team: "other", ..g };
        assert_ne!(token(SECRET, other_team, 1_040).unwrap(), a);
        assert_ne!(
            token(SECRET, grant("a", "user:u", "exec manage"), 1_040).unwrap(),
            a
        );
        assert_ne!(
            token(SECRET, g, 1_000 + LIFETIME_SECS - MARGIN_SECS).unwrap(),
            a
        );
    }

    /// Issue 46: one audience for every executor and five minutes of life let a token
    /// minted for one executor work on another for a long while. Now `aud` is the
    /// executor's name, the caller rides along as `owner`, and a token lives a minute.
    #[test]
    fn issue_46_a_token_names_one_executor_and_one_caller_for_a_minute() {
        let t = sign(SECRET, grant("exec-a", "session:s1", "exec"), 1_000).unwrap();
        let mut v = Validation::new(Algorithm::HS256);
        v.set_audience(&["exec-a"]);
        v.validate_exp = false;
        let key = DecodingKey::from_secret(SECRET.as_bytes()).unwrap();
        let c = jsonwebtoken::decode::<Claims>(&t, &key, &v).unwrap().claims;
        assert_eq!(
            (c.aud.as_str(), c.sub.as_str(), c.owner.as_str()),
            ("exec-a", "team", "session:s1")
        );
        assert!(c.exp - c.iat <= 60, "{c:?}");
        assert!(c.exp - c.iat <= shared::executor_api::MAX_TOKEN_LIFETIME_SECS);
        v.set_audience(&["exec-b"]);
        assert!(jsonwebtoken::decode::<Claims>(&t, &key, &v).is_err());
        // Each executor and each caller gets a token of its own; stale ones are dropped.
        let a = token(SECRET, grant("exec-a", "user:u", "exec"), 5_000).unwrap();
        assert_ne!(
            token(SECRET, grant("exec-b", "user:u", "exec"), 5_000).unwrap(),
            a
        );
        assert_ne!(
            token(SECRET, grant("exec-a", "user:v", "exec"), 5_000).unwrap(),
            a
        );
        token(SECRET, grant("exec-c", "user:w", "exec"), 9_000).unwrap();
        assert_eq!(cached(), 1);
    }

    fn claims_of(t: &str) -> Claims {
        let mut v = Validation::new(Algorithm::HS256);
        v.validate_aud = false;
        v.validate_exp = false;
        let key = DecodingKey::from_secret(SECRET.as_bytes()).unwrap();
        jsonwebtoken::decode::<Claims>(t, &key, &v).unwrap().claims
    }

    #[test]
    fn a_token_carries_the_gateway_issuer_the_scope_and_its_time() {
        let c = claims_of(&sign(SECRET, grant("ex", "user:u", "exec manage"), 7_000).unwrap());
        assert_eq!(c.iss, GATEWAY_ISSUER);
        assert_eq!(c.scope, "exec manage");
        assert_eq!((c.iat, c.exp), (7_000, 7_000 + LIFETIME_SECS));
        // A caller without scopes gets a token that grants nothing at the executor.
        let c = claims_of(&sign(SECRET, grant("ex", "user:u", ""), 7_000).unwrap());
        assert!(!shared::executor_api::Scope::Exec.granted_by(&c.scope));
    }

    #[test]
    fn a_cached_token_is_replaced_before_the_executor_would_refuse_it() {
        let g = grant("exec-z", "user:z", "exec");
        let first = token(SECRET, g, 10_000).unwrap();
        // Every token handed out has at least the margin left at the time it is asked for.
        for now in 10_000..10_000 + 3 * LIFETIME_SECS {
            let t = token(SECRET, g, now).unwrap();
            let c = claims_of(&t);
            assert!(c.exp > now + MARGIN_SECS, "at {now}: {c:?}");
            assert!(c.iat <= now, "at {now}: {c:?}");
            if now < 10_000 + LIFETIME_SECS - MARGIN_SECS {
                assert_eq!(t, first, "reused at {now}");
            }
        }
    }
}

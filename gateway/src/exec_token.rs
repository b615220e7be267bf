//! Tokens the gateway signs for executors: HS256 (a fast algorithm: RSA signing costs
//! ~140 ms of CPU on wasm), five minutes long, reused until a minute before they expire.

use std::cell::RefCell;
use std::collections::HashMap;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use shared::executor_api::{Claims, GATEWAY_ISSUER};

/// Lifetime of a token, in seconds.
pub const LIFETIME_SECS: u64 = 300;
/// A cached token is replaced this long before it expires.
const MARGIN_SECS: u64 = 60;

/// (audience, team, scope).
type Key = (String, String, String);

thread_local! {
    /// Tokens by key, with when they expire.
    static CACHE: RefCell<HashMap<Key, (String, u64)>> = RefCell::new(HashMap::new());
}

/// A token for `team` at the executor with `audience`, granting `scope` (the `scope`
/// claim: what the caller may do, checked again by the executor), valid at `now`
/// (seconds).
pub fn token(
    secret: &str,
    audience: &str,
    team: &str,
    scope: &str,
    now: u64,
) -> Result<String, String> {
    let key = (audience.to_owned(), team.to_owned(), scope.to_owned());
    if let Some(t) = CACHE.with(|c| {
        c.borrow()
            .get(&key)
            .filter(|(_, exp)| now + MARGIN_SECS < *exp)
            .map(|(t, _)| t.clone())
    }) {
        return Ok(t);
    }
    let t = sign(secret, audience, team, scope, now)?;
    CACHE.with(|c| c.borrow_mut().insert(key, (t.clone(), now + LIFETIME_SECS)));
    Ok(t)
}

/// A fresh token (no cache): what one signature costs.
pub fn sign(
    secret: &str,
    audience: &str,
    team: &str,
    scope: &str,
    now: u64,
) -> Result<String, String> {
    let claims = Claims {
        iss: GATEWAY_ISSUER.into(),
        aud: audience.into(),
        sub: team.into(),
        iat: now,
        exp: now + LIFETIME_SECS,
        scope: scope.into(),
    };
    let signing = EncodingKey::from_secret(secret.as_bytes()).map_err(|e| e.to_string())?;
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &signing)
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_reused_until_near_expiry() {
        let s = "executor-secret-0123456789abcdef0123";
        let a = token(s, "aud", "team", "exec", 1_000).unwrap();
        assert_eq!(token(s, "aud", "team", "exec", 1_100).unwrap(), a);
        assert_ne!(token(s, "aud", "other", "exec", 1_100).unwrap(), a);
        assert_ne!(token(s, "aud", "team", "exec manage", 1_100).unwrap(), a);
        assert_ne!(
            token(s, "aud", "team", "exec", 1_000 + LIFETIME_SECS).unwrap(),
            a
        );
    }
}

//! Who is calling: a bearer token checked against the configured modes.
//!
//! - Static token (`STATIC_TOKEN`, one team `STATIC_TEAM`): compared in constant time.
//! - JWT: HS256 with `JWT_HS256_SECRET`, RS256/ES256 with public keys from `JWT_JWKS`
//!   (a JWKS document). The algorithm must be in the allow-list (`JWT_ALGORITHMS`) and is
//!   matched to a key of its own family only: an HS256 token is never checked against an
//!   RSA/EC public key, so key confusion is impossible; `none` is never allowed. Issuer,
//!   audience, expiry and not-before are checked; `sub` and the team claim (`TEAM_CLAIM`,
//!   default `team`) are required. `scope` (space separated, or an array of strings; `scp`
//!   where a provider writes that) grants `exec` and/or `manage`; a token without it may
//!   do both, and one whose claim has any other shape may do nothing.
//! - With nothing configured every request is refused, unless `ALLOW_UNAUTHENTICATED_DEV`
//!   is `true` (for `wrangler dev` only: every caller is team `dev`).

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde::de::IgnoredAny;
use shared::transport::constant_time_eq;

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub team: String,
    /// The user (JWT `sub`), for the ownership of stateless temporaries.
    pub subject: String,
    pub can_exec: bool,
    pub can_manage: bool,
}

/// Why a request is refused (all map to 401).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("missing bearer token")]
    Missing,
    #[error("token refused: {0}")]
    Refused(String),
    #[error(
        "this gateway has no authentication configured: set STATIC_TOKEN or JWT_HS256_SECRET/JWT_JWKS (with JWT_ISSUER and JWT_AUDIENCE)"
    )]
    NotConfigured,
}

impl AuthError {
    /// What the caller is told: why a token failed stays in the log (parser and key
    /// details help an attacker, not a client), as the executor does (issue 46).
    pub fn public(&self) -> String {
        match self {
            AuthError::Refused(_) => "invalid token".to_owned(),
            other => other.to_string(),
        }
    }
}

/// A configuration error, reported at the first request.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("JWT_JWKS is not a JWKS document: {0}")]
    Jwks(String),
    #[error("JWT_ALGORITHMS: {0:?} is not one of HS256, RS256, ES256")]
    Algorithm(String),
    #[error("JWT verification needs both JWT_ISSUER and JWT_AUDIENCE")]
    IssuerAudience,
    #[error("JWT_HS256_SECRET must be at least 32 bytes")]
    ShortSecret,
}

/// Raw settings, as read from the Worker's vars and secrets.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub static_token: Option<String>,
    pub static_team: Option<String>,
    pub hs256_secret: Option<String>,
    pub jwks: Option<String>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub algorithms: Option<String>,
    pub team_claim: Option<String>,
    pub allow_unauthenticated_dev: bool,
}

struct PublicKey {
    kid: Option<String>,
    alg: Algorithm,
    key: DecodingKey,
}

/// The checked configuration.
pub struct Auth {
    static_token: Option<(String, String)>,
    hs256: Option<DecodingKey>,
    public: Vec<PublicKey>,
    issuer: String,
    audience: String,
    algorithms: Vec<Algorithm>,
    team_claim: String,
    dev_open: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("static", &self.static_token.is_some())
            .field("hs256", &self.hs256.is_some())
            .field("public_keys", &self.public.len())
            .field("algorithms", &self.algorithms)
            .finish()
    }
}

fn nonempty(v: &Option<String>) -> Option<String> {
    v.as_ref()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
}

impl Auth {
    pub fn new(s: &Settings) -> Result<Self, ConfigError> {
        let hs256 = match nonempty(&s.hs256_secret) {
            Some(secret) if secret.len() < 32 => return Err(ConfigError::ShortSecret),
            Some(secret) => Some(
                DecodingKey::from_secret(secret.as_bytes())
                    .map_err(|_| ConfigError::ShortSecret)?,
            ),
            None => None,
        };
        let mut public = Vec::new();
        if let Some(doc) = nonempty(&s.jwks) {
            let set: JwkSet =
                serde_json::from_str(&doc).map_err(|e| ConfigError::Jwks(e.to_string()))?;
            for jwk in &set.keys {
                let alg = match (&jwk.algorithm, jwk.common.key_algorithm) {
                    (AlgorithmParameters::RSA(_), _) => Algorithm::RS256,
                    (AlgorithmParameters::EllipticCurve(_), _) => Algorithm::ES256,
                    _ => {
                        return Err(ConfigError::Jwks(
                            "only RSA (RS256) and P-256 (ES256) public keys are accepted".into(),
                        ));
                    }
                };
                let key =
                    DecodingKey::from_jwk(jwk).map_err(|e| ConfigError::Jwks(e.to_string()))?;
                public.push(PublicKey {
                    kid: jwk.common.key_id.clone(),
                    alg,
                    key,
                });
            }
        }
        let jwt = hs256.is_some() || !public.is_empty();
        let (issuer, audience) = match (nonempty(&s.issuer), nonempty(&s.audience)) {
            (Some(i), Some(a)) => (i, a),
            _ if jwt => return Err(ConfigError::IssuerAudience),
            _ => (String::new(), String::new()),
        };
        let algorithms = match nonempty(&s.algorithms) {
            Some(list) => list
                .split(',')
                .map(|a| match a.trim() {
                    "HS256" => Ok(Algorithm::HS256),
                    "RS256" => Ok(Algorithm::RS256),
                    "ES256" => Ok(Algorithm::ES256),
                    other => Err(ConfigError::Algorithm(other.to_owned())),
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => vec![Algorithm::HS256, Algorithm::RS256, Algorithm::ES256],
        };
        let static_token = nonempty(&s.static_token).map(|t| {
            let team = nonempty(&s.static_team).unwrap_or_else(|| "default".into());
            (t, team)
        });
        Ok(Self {
            static_token,
            hs256,
            public,
            issuer,
            audience,
            algorithms,
            team_claim: nonempty(&s.team_claim).unwrap_or_else(|| "team".into()),
            dev_open: s.allow_unauthenticated_dev,
        })
    }

    /// Is any way of authenticating configured?
    pub fn configured(&self) -> bool {
        self.static_token.is_some() || self.hs256.is_some() || !self.public.is_empty()
    }

    /// Checks `authorization` (the header's value) at `now` (seconds since the epoch).
    pub fn check(&self, authorization: Option<&str>, now: u64) -> Result<Caller, AuthError> {
        if !self.configured() {
            if self.dev_open {
                return Ok(Caller {
                    team: "dev".into(),
                    subject: "dev".into(),
                    can_exec: true,
                    can_manage: true,
                });
            }
            return Err(AuthError::NotConfigured);
        }
        let token = authorization
            .and_then(shared::transport::bearer_token)
            .ok_or(AuthError::Missing)?;
        if let Some((expected, team)) = &self.static_token
            && constant_time_eq(token.as_bytes(), expected.as_bytes())
        {
            return Ok(Caller {
                team: team.clone(),
                subject: "static".into(),
                can_exec: true,
                can_manage: true,
            });
        }
        self.check_jwt(token, now)
    }

    fn check_jwt(&self, token: &str, now: u64) -> Result<Caller, AuthError> {
        let refused = |why: &str| AuthError::Refused(why.to_owned());
        let header = jsonwebtoken::decode_header(token).map_err(|e| refused(&e.to_string()))?;
        if !self.algorithms.contains(&header.alg) {
            return Err(refused(&format!(
                "algorithm {:?} is not allowed",
                header.alg
            )));
        }
        let key = match header.alg {
            Algorithm::HS256 => self.hs256.as_ref(),
            alg => self
                .public
                .iter()
                .filter(|k| k.alg == alg)
                .find(|k| header.kid.is_none() || k.kid == header.kid)
                .map(|k| &k.key),
        }
        .ok_or_else(|| {
            refused(&format!(
                "no {:?} key is configured for this token",
                header.alg
            ))
        })?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.validate_nbf = true;
        v.leeway = 30;
        let data =
            jsonwebtoken::decode::<Claims>(token, key, &v).map_err(|e| refused(&e.to_string()))?;
        let claims = data.claims;
        // Also refuse tokens stamped in the future (clock skew beyond the leeway).
        if matches!(claims.iat, Some(Claim::Is(iat)) if iat > now + 30) {
            return Err(refused("issued in the future (iat)"));
        }
        let subject = claims
            .text("sub")
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refused("no sub"))?
            .to_owned();
        let team = claims
            .text(&self.team_claim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refused(&format!("no {} claim", self.team_claim)))?
            .to_owned();
        let (can_exec, can_manage) = granted(&claims);
        Ok(Caller {
            team,
            subject,
            can_exec,
            can_manage,
        })
    }
}

/// The claims of a verified token that the gateway reads (`jsonwebtoken` checks `exp`,
/// `nbf`, `iss`, `aud` and that `sub` is a string). Any JSON decodes: a claim of another
/// shape is [`Claim::Other`], so it is refused or grants nothing, never a decoding error.
#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    iat: Option<Claim<u64>>,
    #[serde(default)]
    sub: Option<Claim<String>>,
    /// Present even when `null` (which grants nothing).
    #[serde(default, deserialize_with = "present")]
    scope: Option<Claim<Scope>>,
    /// What some identity providers write instead of `scope`.
    #[serde(default, deserialize_with = "present")]
    scp: Option<Claim<Scope>>,
    /// Every other claim, the team claim (its name is configured) among them.
    #[serde(flatten)]
    other: std::collections::HashMap<String, Claim<String>>,
}

/// A claim of the expected shape, or of any other.
#[derive(Deserialize)]
#[serde(untagged)]
enum Claim<T> {
    Is(T),
    Other(IgnoredAny),
}

/// A scope claim: space-separated names, or an array of names.
#[derive(Deserialize)]
#[serde(untagged)]
enum Scope {
    Spaced(String),
    List(Vec<String>),
}

impl Claims {
    /// The string claim `name`, if it is one.
    fn text(&self, name: &str) -> Option<&str> {
        let claim = match name {
            "sub" => self.sub.as_ref(),
            "scope" | "scp" => {
                let scope = if name == "scope" {
                    &self.scope
                } else {
                    &self.scp
                };
                return match scope {
                    Some(Claim::Is(Scope::Spaced(s))) => Some(s),
                    _ => None,
                };
            }
            _ => self.other.get(name),
        };
        match claim? {
            Claim::Is(s) => Some(s),
            Claim::Other(_) => None,
        }
    }
}

/// A field that is present, whatever its value (`null` included).
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// What a token's scope claim grants: `(exec, manage)`. The claim is `scope`, or `scp`
/// where an identity provider writes that instead: a space-separated string, or an array
/// of strings. A token with neither may do both (the documented default); a claim of any
/// other shape (`null`, a number, an object, an array holding a non-string) grants
/// nothing: a claim the gateway cannot read never widens what a token may do (issue 46).
fn granted(claims: &Claims) -> (bool, bool) {
    let claim = match (&claims.scope, &claims.scp) {
        (None, None) => return (true, true),
        (Some(c), _) | (None, Some(c)) => c,
    };
    let names: Vec<&str> = match claim {
        Claim::Is(Scope::Spaced(s)) => s.split_whitespace().collect(),
        Claim::Is(Scope::List(items)) => items.iter().map(String::as_str).collect(),
        Claim::Other(_) => return (false, false),
    };
    let has = |s: &str| names.contains(&s);
    (has("exec"), has("manage"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::{Value, json};

    const SECRET: &str = "gateway-test-secret-0123456789abcdef";

    fn auth() -> Auth {
        Auth::new(&Settings {
            static_token: Some("static-tok".into()),
            static_team: Some("solo".into()),
            hs256_secret: Some(SECRET.into()),
            issuer: Some("https://issuer.example".into()),
            audience: Some("mcp".into()),
            ..Default::default()
        })
        .unwrap()
    }

    /// `claims` under a header saying `alg` (and `kid`), signed for real with HMAC-SHA256
    /// keyed by `key`: what a verifier that trusts the header's `alg` with the key it holds
    /// would accept (key confusion), so a refusal is for the algorithm, not the signature.
    fn hmac_as(alg: &str, kid: Option<&str>, claims: &Value, key: &[u8]) -> String {
        use base64::Engine as _;
        let b64 =
            |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let mut header = json!({"alg": alg, "typ": "JWT"});
        if let Some(kid) = kid {
            header["kid"] = json!(kid);
        }
        let message = format!("{}.{}", b64(&header), b64(claims));
        let key = EncodingKey::from_secret(key).unwrap();
        let sig = jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256).unwrap();
        format!("{message}.{sig}")
    }

    fn hs(claims: Value) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()).unwrap(),
        )
        .unwrap()
    }

    fn good(now: u64) -> Value {
        json!({"iss": "https://issuer.example", "aud": "mcp", "sub": "u1", "team": "t1",
               "exp": now + 60, "iat": now})
    }

    #[test]
    fn accepts_good_tokens_and_refuses_the_attack_set() {
        let a = auth();
        let now = jsonwebtoken::get_current_timestamp();
        let bearer = |t: &str| format!("Bearer {t}");
        let c = a.check(Some(&bearer(&hs(good(now)))), now).unwrap();
        assert_eq!((c.team.as_str(), c.subject.as_str()), ("t1", "u1"));
        assert!(c.can_exec && c.can_manage);
        let c = a.check(Some("Bearer static-tok"), now).unwrap();
        assert_eq!(c.team, "solo");
        // issue 13: the scheme is case-insensitive (RFC 7235), as on the local server.
        for scheme in ["bearer", "BEARER", "bEaReR"] {
            let c = a.check(Some(&format!("{scheme} static-tok")), now).unwrap();
            assert_eq!(c.team, "solo", "{scheme}");
            let c = a
                .check(Some(&format!("{scheme} {}", hs(good(now)))), now)
                .unwrap();
            assert_eq!(c.subject, "u1", "{scheme}");
        }
        let mut scoped = good(now);
        scoped["scope"] = json!("exec");
        let c = a.check(Some(&bearer(&hs(scoped))), now).unwrap();
        assert!(c.can_exec && !c.can_manage);

        let with = |k: &str, v: Value| {
            let mut c = good(now);
            c[k] = v;
            bearer(&hs(c))
        };
        let b64 = |v: Value| {
            use base64::Engine as _;
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        let none = format!("{}.{}.", b64(json!({"alg": "none"})), b64(good(now)));
        // issue 46: the confusion token is signed for real with the only key held.
        let rs = hmac_as("RS256", None, &good(now), SECRET.as_bytes());
        let honest = hmac_as("HS256", None, &good(now), SECRET.as_bytes());
        assert!(
            a.check(Some(&bearer(&honest)), now).is_ok(),
            "the forger signs correctly"
        );
        let cases = [
            ("missing", None),
            ("garbage", Some("Bearer garbage".to_owned())),
            ("alg none", Some(bearer(&none))),
            ("RS256 with only an HS key (confusion)", Some(bearer(&rs))),
            ("expired", Some(with("exp", json!(now - 120)))),
            ("not yet valid", Some(with("nbf", json!(now + 600)))),
            ("wrong audience", Some(with("aud", json!("other")))),
            (
                "wrong issuer",
                Some(with("iss", json!("https://evil.example"))),
            ),
            ("no team", Some(with("team", json!("")))),
            ("future iat", Some(with("iat", json!(now + 600)))),
        ];
        for (what, header) in cases {
            assert!(a.check(header.as_deref(), now).is_err(), "{what} accepted");
        }
    }

    #[test]
    fn rs256_and_es256_through_a_jwks_and_no_cross_family_keys() {
        use jsonwebtoken::jwk::{Jwk, JwkSet};
        let rsa = EncodingKey::from_rsa_pem(include_bytes!("../testdata/rsa_priv.pem")).unwrap();
        let ec = EncodingKey::from_ec_pem(include_bytes!("../testdata/ec_priv.pem")).unwrap();
        let mut rsa_jwk = Jwk::from_encoding_key(&rsa, Algorithm::RS256).unwrap();
        rsa_jwk.common.key_id = Some("r1".into());
        let mut ec_jwk = Jwk::from_encoding_key(&ec, Algorithm::ES256).unwrap();
        ec_jwk.common.key_id = Some("e1".into());
        let jwks = serde_json::to_string(&JwkSet {
            keys: vec![rsa_jwk, ec_jwk],
        })
        .unwrap();
        let a = Auth::new(&Settings {
            jwks: Some(jwks),
            issuer: Some("https://issuer.example".into()),
            audience: Some("mcp".into()),
            ..Default::default()
        })
        .unwrap();
        let now = jsonwebtoken::get_current_timestamp();
        for (alg, key, kid) in [
            (Algorithm::RS256, &rsa, "r1"),
            (Algorithm::ES256, &ec, "e1"),
        ] {
            let mut h = Header::new(alg);
            h.kid = Some(kid.into());
            let t = jsonwebtoken::encode(&h, &good(now), key).unwrap();
            let c = a.check(Some(&format!("Bearer {t}")), now).unwrap();
            assert_eq!(c.team, "t1", "{alg:?}");
        }
        // HS256 with no HS secret configured: refused, even though public keys exist.
        let hs_token = hs(good(now));
        assert!(a.check(Some(&format!("Bearer {hs_token}")), now).is_err());
        // issue 46: key confusion for real: HS256 (and an RS256 header) signed with the
        // RSA public key as the HMAC secret, in PEM and in DER, with and without its kid.
        let pem = include_str!("../testdata/rsa_pub.pem");
        let der = {
            use base64::Engine as _;
            let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .unwrap()
        };
        for key in [pem.as_bytes(), pem.trim_end().as_bytes(), der.as_slice()] {
            for (alg, kid) in [
                ("HS256", None),
                ("HS256", Some("r1")),
                ("RS256", Some("r1")),
            ] {
                let t = hmac_as(alg, kid, &good(now), key);
                assert!(
                    a.check(Some(&format!("Bearer {t}")), now).is_err(),
                    "{alg} {kid:?} signed with the public key accepted"
                );
            }
        }
        // An ES256 header naming the RSA key id finds no ES256 key.
        let mut h = Header::new(Algorithm::ES256);
        h.kid = Some("r1".into());
        let t = jsonwebtoken::encode(&h, &good(now), &ec).unwrap();
        assert!(a.check(Some(&format!("Bearer {t}")), now).is_err());
    }

    #[test]
    fn nothing_configured_refuses_unless_dev() {
        let a = Auth::new(&Settings::default()).unwrap();
        assert_eq!(a.check(Some("Bearer x"), 0), Err(AuthError::NotConfigured));
        let dev = Auth::new(&Settings {
            allow_unauthenticated_dev: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(dev.check(None, 0).unwrap().team, "dev");
        assert_eq!(
            Auth::new(&Settings {
                hs256_secret: Some(SECRET.into()),
                ..Default::default()
            })
            .unwrap_err(),
            ConfigError::IssuerAudience
        );
    }

    #[test]
    fn issue_46_a_scope_claim_the_gateway_cannot_read_grants_nothing() {
        let a = auth();
        let now = jsonwebtoken::get_current_timestamp();
        let bearer = |t: &str| format!("Bearer {t}");
        let grant = |claims: &[(&str, Value)]| {
            let mut c = good(now);
            for (k, v) in claims {
                c[*k] = v.clone();
            }
            let caller = a.check(Some(&bearer(&hs(c))), now).unwrap();
            (caller.can_exec, caller.can_manage)
        };
        assert_eq!(
            grant(&[]),
            (true, true),
            "no scope claim: both, as documented"
        );
        for (claim, want) in [
            (json!("exec"), (true, false)),
            (json!("manage exec"), (true, true)),
            (json!("  manage  "), (false, true)),
            (json!(""), (false, false)),
            (json!("execute admin"), (false, false)),
            (json!(["exec"]), (true, false)),
            (json!(["exec", "manage"]), (true, true)),
            (json!([]), (false, false)),
            (json!(["exec", 1]), (false, false)),
            (json!([["exec"]]), (false, false)),
            (json!(null), (false, false)),
            (json!(42), (false, false)),
            (json!(true), (false, false)),
            (json!({"exec": true}), (false, false)),
        ] {
            assert_eq!(grant(&[("scope", claim.clone())]), want, "scope {claim}");
            assert_eq!(grant(&[("scp", claim.clone())]), want, "scp {claim}");
        }
        // `scope` wins over `scp`.
        assert_eq!(
            grant(&[("scope", json!("exec")), ("scp", json!("exec manage"))]),
            (true, false)
        );
    }

    #[test]
    fn issue_46_a_refused_token_is_told_invalid_token_and_nothing_more() {
        let a = auth();
        let now = jsonwebtoken::get_current_timestamp();
        for header in [
            "Bearer garbage",
            "Bearer eyJhbGciOiJub25lIn0.e30.",
            "Bearer a.b.c",
            "Bearer static-tok-wrong",
        ] {
            let e = a.check(Some(header), now).unwrap_err();
            assert!(matches!(e, AuthError::Refused(_)), "{header}: {e:?}");
            assert_eq!(e.public(), "invalid token", "{header}");
        }
        let mut no_team = good(now);
        no_team["team"] = json!("");
        let token = hs(no_team);
        let e = a.check(Some(&format!("Bearer {token}")), now).unwrap_err();
        assert!(e.to_string().contains("team"), "the log keeps why: {e}");
        assert_eq!(e.public(), "invalid token");
        assert_eq!(AuthError::Missing.public(), "missing bearer token");
    }

    fn jwt_settings() -> Settings {
        Settings {
            hs256_secret: Some(SECRET.into()),
            issuer: Some("https://issuer.example".into()),
            audience: Some("mcp".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_bad_configuration_names_the_variable_to_fix() {
        let short = Auth::new(&Settings {
            hs256_secret: Some(format!("  {}  ", "x".repeat(31))),
            ..jwt_settings()
        });
        assert_eq!(short.unwrap_err(), ConfigError::ShortSecret);
        assert!(
            Auth::new(&Settings {
                hs256_secret: Some("x".repeat(32)),
                ..jwt_settings()
            })
            .is_ok()
        );
        let e = Auth::new(&Settings {
            algorithms: Some("HS256, none".into()),
            ..jwt_settings()
        })
        .unwrap_err();
        assert_eq!(e, ConfigError::Algorithm("none".into()));
        assert!(e.to_string().starts_with("JWT_ALGORITHMS"), "{e}");
        let e = Auth::new(&Settings {
            jwks: Some("{\"keys\": 1}".into()),
            ..jwt_settings()
        })
        .unwrap_err();
        assert!(matches!(e, ConfigError::Jwks(_)), "{e:?}");
        // A symmetric key in a JWKS would let anyone holding the document sign.
        let e = Auth::new(&Settings {
            jwks: Some(
                r#"{"keys":[{"kty":"oct","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"}]}"#
                    .into(),
            ),
            hs256_secret: None,
            ..jwt_settings()
        })
        .unwrap_err();
        assert!(e.to_string().contains("only RSA"), "{e}");
        // A static token alone needs no issuer or audience.
        let a = Auth::new(&Settings {
            static_token: Some("tok".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(a.check(Some("Bearer tok"), 0).unwrap().team, "default");
    }

    #[test]
    fn an_algorithm_left_out_of_the_allow_list_is_refused_even_with_its_key() {
        let a = Auth::new(&Settings {
            algorithms: Some("RS256".into()),
            ..jwt_settings()
        })
        .unwrap();
        let now = jsonwebtoken::get_current_timestamp();
        let e = a
            .check(Some(&format!("Bearer {}", hs(good(now)))), now)
            .unwrap_err();
        assert!(e.to_string().contains("HS256 is not allowed"), "{e}");
    }

    #[test]
    fn the_team_comes_from_the_configured_claim() {
        let a = Auth::new(&Settings {
            team_claim: Some(" org ".into()),
            ..jwt_settings()
        })
        .unwrap();
        let now = jsonwebtoken::get_current_timestamp();
        let mut c = good(now);
        let e = a
            .check(Some(&format!("Bearer {}", hs(c.clone()))), now)
            .unwrap_err();
        assert!(e.to_string().contains("no org claim"), "{e}");
        c["org"] = json!("acme");
        let caller = a
            .check(Some(&format!("Bearer {}", hs(c.clone()))), now)
            .unwrap();
        assert_eq!(
            (caller.team.as_str(), caller.subject.as_str()),
            ("acme", "u1")
        );
        // A team claim that is not a string is no team.
        c["org"] = json!(["acme"]);
        assert!(a.check(Some(&format!("Bearer {}", hs(c))), now).is_err());
    }

    #[test]
    fn a_token_without_a_subject_or_expiry_is_refused() {
        let a = auth();
        let now = jsonwebtoken::get_current_timestamp();
        for drop in ["sub", "exp", "iss", "aud"] {
            let mut c = good(now);
            c.as_object_mut().unwrap().remove(drop);
            assert!(
                a.check(Some(&format!("Bearer {}", hs(c))), now).is_err(),
                "without {drop}"
            );
        }
        let mut c = good(now);
        c["sub"] = json!("");
        let e = a
            .check(Some(&format!("Bearer {}", hs(c))), now)
            .unwrap_err();
        assert!(e.to_string().contains("no sub"), "{e}");
    }

    #[test]
    fn clocks_may_disagree_by_thirty_seconds_and_no_more() {
        let a = auth();
        let now = jsonwebtoken::get_current_timestamp();
        let with = |k: &str, v: u64| {
            let mut c = good(now);
            c[k] = json!(v);
            format!("Bearer {}", hs(c))
        };
        assert!(a.check(Some(&with("exp", now - 10)), now).is_ok(), "exp");
        assert!(a.check(Some(&with("exp", now - 90)), now).is_err(), "exp");
        assert!(a.check(Some(&with("nbf", now + 10)), now).is_ok(), "nbf");
        assert!(a.check(Some(&with("iat", now + 20)), now).is_ok(), "iat");
        let e = a.check(Some(&with("iat", now + 60)), now).unwrap_err();
        assert!(e.to_string().contains("iat"), "{e}");
    }

    #[test]
    fn a_header_that_is_not_a_bearer_token_is_a_missing_token() {
        let a = auth();
        for header in [
            None,
            Some("Basic c3RhdGljLXRvaw=="),
            Some("static-tok"),
            Some("Bearer "),
        ] {
            assert_eq!(a.check(header, 0), Err(AuthError::Missing), "{header:?}");
        }
        assert!(AuthError::NotConfigured.public().contains("STATIC_TOKEN"));
    }

    #[test]
    fn the_configuration_is_never_printed_with_its_secrets() {
        let a = auth();
        let shown = format!("{a:?}");
        assert!(!shown.contains(SECRET), "{shown}");
        assert!(!shown.contains("static-tok"), "{shown}");
        assert!(shown.contains("hs256: true"), "{shown}");
    }
}

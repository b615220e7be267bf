//! E2B computers from the local binary (`--backend e2b`): the flags, and the shared
//! `shared::providers::computers::e2b` (which the Worker uses too) over reqwest.

use shared::providers::computers::Owner;
use shared::providers::computers::e2b::{E2bComputers, E2bSettings};
use shared::providers::e2b::{E2bClient, E2bError};

use crate::cloud::{Cloud, Reqwest};

/// Errors of the E2B backend.
#[derive(Debug, thiserror::Error)]
pub enum E2bBackendError {
    #[error(transparent)]
    Api(#[from] E2bError),
}

/// E2B settings from the command line.
#[derive(Clone, PartialEq, Eq)]
pub struct E2bConfig {
    pub api_url: String,
    /// One envd host for every sandbox (plus the sandbox headers), or per-sandbox hosts.
    pub sandbox_url: Option<String>,
    pub api_key: String,
    pub template: String,
    pub sandbox_timeout_secs: u64,
    pub metadata: Vec<(String, String)>,
    pub env: Vec<(String, String)>,
}

impl std::fmt::Debug for E2bConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("E2bConfig")
            .field("api_url", &self.api_url)
            .field("sandbox_url", &self.sandbox_url)
            .field("api_key", &"<redacted>")
            .field("template", &self.template)
            .field("sandbox_timeout_secs", &self.sandbox_timeout_secs)
            .finish_non_exhaustive()
    }
}

/// A `k=v` flag value without its `=` or key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag} {value:?} must be KEY=VALUE")]
pub struct BadPair {
    pub flag: String,
    pub value: String,
}

/// Parses `k=v` pairs (`--e2b-metadata`, `--e2b-env`; each flag may hold several, comma
/// separated).
pub fn parse_pairs(values: &[String], flag: &str) -> Result<Vec<(String, String)>, BadPair> {
    let mut out = Vec::new();
    for v in values.iter().flat_map(|v| v.split(',')) {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        match v.split_once('=') {
            Some((k, val)) if !k.trim().is_empty() => {
                out.push((k.trim().to_owned(), val.trim().to_owned()));
            }
            _ => {
                return Err(BadPair {
                    flag: flag.to_owned(),
                    value: v.to_owned(),
                });
            }
        }
    }
    Ok(out)
}

/// The E2B backend.
pub type E2b = Cloud<E2bComputers<Reqwest>>;

/// Checks the key (one list call) and returns the backend.
pub async fn open(cfg: E2bConfig, instance: String, host: String) -> Result<E2b, E2bBackendError> {
    let client = E2bClient::new(
        cfg.api_url.clone(),
        cfg.sandbox_url.clone(),
        cfg.api_key.clone(),
        Reqwest::new(),
    );
    let settings = E2bSettings {
        template: cfg.template.clone(),
        sandbox_timeout_secs: cfg.sandbox_timeout_secs,
        metadata: cfg.metadata.clone(),
        env: cfg.env.clone(),
    };
    let owner = Owner {
        instance: instance.clone(),
        host,
    };
    let inner = E2bComputers::new(client, settings, owner);
    inner.check().await?;
    Ok(Cloud::new(inner, instance))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(values: &[&str]) -> Result<Vec<(String, String)>, BadPair> {
        let values: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        parse_pairs(&values, "--e2b-env")
    }

    fn kv(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn pairs_come_from_repeated_flags_and_commas_trimmed_in_order() {
        assert_eq!(
            pairs(&[" A = 1 ,B=2", "C=", ",, ", "D=x=y"]).unwrap(),
            [kv("A", "1"), kv("B", "2"), kv("C", ""), kv("D", "x=y")]
        );
        assert_eq!(pairs(&[]).unwrap(), []);
    }

    #[test]
    fn a_pair_without_a_key_or_an_equals_sign_names_the_flag_and_the_value() {
        for (raw, shown) in [("A=1, NOEQ", "NOEQ"), ("=v", "=v"), (" = v", "= v")] {
            let e = pairs(&[raw]).unwrap_err();
            assert_eq!(
                e,
                BadPair {
                    flag: "--e2b-env".into(),
                    value: shown.into()
                },
                "{raw}"
            );
            assert_eq!(
                e.to_string(),
                format!("--e2b-env {shown:?} must be KEY=VALUE")
            );
        }
    }

    #[test]
    fn the_api_key_never_shows_in_debug_output() {
        let cfg = E2bConfig {
            api_url: "https://api.e2b.app".into(),
            sandbox_url: None,
            api_key: "e2b_secret_1234".into(),
            template: "base".into(),
            sandbox_timeout_secs: 60,
            metadata: vec![],
            env: vec![],
        };
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("e2b_secret_1234"), "{shown}");
        assert!(
            shown.contains("<redacted>") && shown.contains("base"),
            "{shown}"
        );
    }
}

//! Computer-id rules and readable random slugs.
//!
//! Owns: what a valid `computer_id` is (valid as a Docker container name suffix and a Fly
//! machine name) and how a fresh `adjective-noun-xxxx` slug is made. Randomness comes from
//! the caller, so this module stays deterministic and runs anywhere.

/// Longest valid computer id.
pub const MAX_ID_LEN: usize = 63;

const ADJECTIVES: &[&str] = &[
    "amber", "bold", "brave", "bright", "calm", "clever", "cosmic", "crisp", "eager", "fancy",
    "gentle", "golden", "happy", "humble", "jolly", "keen", "lively", "lucky", "mellow", "misty",
    "noble", "plucky", "proud", "quick", "quiet", "rapid", "rosy", "shiny", "silent", "snowy",
    "steady", "sunny", "swift", "tidy", "vivid", "warm", "wild", "wise", "witty", "zesty",
];

const NOUNS: &[&str] = &[
    "badger", "beacon", "cedar", "comet", "coral", "crane", "dolphin", "ember", "falcon", "fern",
    "fjord", "gecko", "harbor", "heron", "island", "lark", "lynx", "maple", "meadow", "otter",
    "owl", "panda", "pebble", "pine", "quartz", "raven", "reef", "river", "robin", "sparrow",
    "spruce", "summit", "tiger", "tulip", "valley", "walrus", "willow", "wombat", "yak", "zebra",
];

/// Why a computer id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("computer_id must not be empty")]
    Empty,
    #[error("computer_id is {0} characters long; use at most 63")]
    TooLong(usize),
    #[error(
        "computer_id {0:?} may contain only lowercase letters a-z, digits and hyphens (e.g. \"build-box\")"
    )]
    BadChar(String),
    #[error("computer_id {0:?} must start and end with a lowercase letter or digit")]
    BadEdge(String),
}

/// Checks the id rules of SPEC §3.4.
pub fn validate_computer_id(id: &str) -> Result<(), IdError> {
    if id.is_empty() {
        return Err(IdError::Empty);
    }
    let len = id.chars().count();
    if len > MAX_ID_LEN {
        return Err(IdError::TooLong(len));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(IdError::BadChar(id.to_owned()));
    }
    if id.starts_with('-') || id.ends_with('-') {
        return Err(IdError::BadEdge(id.to_owned()));
    }
    Ok(())
}

/// Builds a readable slug `adjective-noun-xxxx` from caller-supplied randomness.
pub fn slug_from_random(random: u64) -> String {
    let adjective = ADJECTIVES[(random % ADJECTIVES.len() as u64) as usize];
    let rest = random / ADJECTIVES.len() as u64;
    let noun = NOUNS[(rest % NOUNS.len() as u64) as usize];
    let suffix = (rest / NOUNS.len() as u64) & 0xffff;
    format!("{adjective}-{noun}-{suffix:04x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_ids() {
        for id in ["a", "build-box", "x1", "0", "a-b-c", &"a".repeat(63)] {
            assert_eq!(validate_computer_id(id), Ok(()), "{id}");
        }
    }

    #[test]
    fn refuses_invalid_ids() {
        assert_eq!(validate_computer_id(""), Err(IdError::Empty));
        assert_eq!(
            validate_computer_id(&"a".repeat(64)),
            Err(IdError::TooLong(64))
        );
        for id in ["Build", "a_b", "a b", "a.b", "ä", "a/b", "../x"] {
            assert!(
                matches!(validate_computer_id(id), Err(IdError::BadChar(_))),
                "{id}"
            );
        }
        for id in ["-a", "a-", "-"] {
            assert!(
                matches!(validate_computer_id(id), Err(IdError::BadEdge(_))),
                "{id}"
            );
        }
    }

    #[test]
    fn slugs_are_valid_and_varied() {
        let mut seen = std::collections::HashSet::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let slug = slug_from_random(x);
            assert_eq!(validate_computer_id(&slug), Ok(()), "{slug}");
            assert_eq!(slug.split('-').count(), 3, "{slug}");
            seen.insert(slug);
        }
        assert!(seen.len() > 1990);
    }
}

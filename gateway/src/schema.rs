//! The Team Durable Object's SQLite schema, versioned. Each migration is a list of
//! statements run once, in order, when an object's stored `schema_version` (table `meta`)
//! is below its number; the version is written after its statements succeed. A failure is
//! kept and answered on every request (never ignored), so a broken object says why.
//!
//! Version 1 is the schema every object had before versions were recorded; its statements
//! are `IF NOT EXISTS`, so objects made by older gateways take it as a no-op.

/// The migrations; migration `i` (0-based) brings the schema to version `i + 1`.
pub const MIGRATIONS: &[&[&str]] = &[
    &[
        "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
        "CREATE TABLE IF NOT EXISTS computers (id TEXT PRIMARY KEY, executor TEXT NOT NULL, \
         temporary INTEGER NOT NULL, owner TEXT, last_used INTEGER NOT NULL)",
        "CREATE TABLE IF NOT EXISTS sessions (sid TEXT PRIMARY KEY, subject TEXT NOT NULL, \
         version TEXT NOT NULL, default_id TEXT, last_seen INTEGER NOT NULL)",
    ],
    // 2: the registry's `stateless` flag is a column (it was read from the owner's
    // `user:` prefix); existing stateless owners keep going when idle.
    &[
        "ALTER TABLE computers ADD COLUMN stateless INTEGER NOT NULL DEFAULT 0",
        "UPDATE computers SET stateless = 1 WHERE owner LIKE 'user:%'",
    ],
    // 3: jobs (SPEC §3.8) started through the gateway: which computer each runs on, and
    // until when its timeout may keep it running (no idle reaping before).
    &[
        "CREATE TABLE IF NOT EXISTS jobs (job_id TEXT PRIMARY KEY, id TEXT NOT NULL, \
         deadline INTEGER NOT NULL)",
    ],
    // 4: tasks (the MCP Tasks extension over jobs, SPEC §3.8): each task's record
    // (`shared::tasks::Task` as JSON), its starter, when it may be forgotten, and the
    // lease of the one request reading its job now (so two polls never split its output).
    &[
        "CREATE TABLE IF NOT EXISTS tasks (task_id TEXT PRIMARY KEY, id TEXT NOT NULL, \
         owner TEXT NOT NULL, deadline INTEGER NOT NULL, expires INTEGER NOT NULL, \
         record TEXT NOT NULL, lease TEXT, lease_until INTEGER NOT NULL DEFAULT 0)",
    ],
];

/// The version a fully migrated object has.
pub const CURRENT: u32 = MIGRATIONS.len() as u32;

/// The `meta` key holding an object's schema version.
pub const VERSION_KEY: &str = "schema_version";

/// Why a team's object cannot be brought to this gateway's schema (answered on every
/// request to it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("the team inventory has a corrupt schema_version {0:?}")]
    Corrupt(String),
    #[error(
        "the team inventory has schema version {0}, newer than this gateway's {CURRENT}: deploy the newer gateway"
    )]
    Newer(u32),
    /// A statement failed: which step, and the storage's error.
    #[error("team inventory {step}: {error}")]
    Storage { step: String, error: String },
}

/// Reads a stored version (`None`: never recorded, an object of an older gateway or a new
/// one). A value that is not a number is an error, not a silent zero.
pub fn stored_version(v: Option<&str>) -> Result<u32, SchemaError> {
    match v {
        None => Ok(0),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| SchemaError::Corrupt(v.to_owned())),
    }
}

/// The migrations to run from `version`, with the version each one reaches. A version
/// newer than this gateway knows is refused (an older gateway must not touch it).
pub fn pending(version: u32) -> Result<Vec<(u32, &'static [&'static str])>, SchemaError> {
    if version > CURRENT {
        return Err(SchemaError::Newer(version));
    }
    Ok(MIGRATIONS
        .iter()
        .enumerate()
        .skip(version as usize)
        .map(|(i, m)| (i as u32 + 1, *m))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_run_in_order_from_any_version() {
        assert_eq!(stored_version(None), Ok(0));
        assert_eq!(stored_version(Some("1")), Ok(1));
        assert!(stored_version(Some("one")).is_err());
        let all = pending(0).unwrap();
        assert_eq!(all.len(), MIGRATIONS.len());
        assert_eq!(all.first().map(|(v, _)| *v), Some(1));
        assert_eq!(all.last().map(|(v, _)| *v), Some(CURRENT));
        assert!(pending(CURRENT).unwrap().is_empty());
        assert!(
            pending(CURRENT + 1)
                .unwrap_err()
                .to_string()
                .contains("newer")
        );
    }

    #[test]
    fn version_one_is_safe_on_old_objects() {
        for stmt in MIGRATIONS[0] {
            assert!(stmt.starts_with("CREATE TABLE IF NOT EXISTS"), "{stmt}");
        }
    }

    #[test]
    fn a_stored_version_is_read_leniently_but_never_guessed() {
        assert_eq!(stored_version(Some(" 3\n")), Ok(3));
        for bad in ["", "-1", "2.0", "v2", "99999999999"] {
            assert_eq!(
                stored_version(Some(bad)),
                Err(SchemaError::Corrupt(bad.to_owned())),
                "{bad:?}"
            );
        }
        let e = stored_version(Some("v2")).unwrap_err().to_string();
        assert!(e.contains("\"v2\""), "{e}");
    }

    #[test]
    fn an_object_part_way_migrated_runs_only_the_rest() {
        for from in 0..=CURRENT {
            let rest = pending(from).unwrap();
            let versions: Vec<u32> = rest.iter().map(|(v, _)| *v).collect();
            assert_eq!(versions, (from + 1..=CURRENT).collect::<Vec<_>>());
            for (v, statements) in rest {
                assert_eq!(statements, MIGRATIONS[v as usize - 1], "version {v}");
            }
        }
    }

    #[test]
    fn a_newer_schema_says_which_versions_and_what_to_deploy() {
        let e = pending(CURRENT + 5).unwrap_err();
        assert_eq!(e, SchemaError::Newer(CURRENT + 5));
        let m = e.to_string();
        assert!(
            m.contains(&format!("schema version {}", CURRENT + 5)),
            "{m}"
        );
        assert!(m.contains(&format!("this gateway's {CURRENT}")), "{m}");
        assert!(m.contains("deploy the newer gateway"), "{m}");
    }
}

//! The Team Durable Object's side of `shared::registry`: the `computers` table as an
//! [`InventoryStore`]. Rows only; every rule is the registry's.

use shared::registry::{Entry, InventoryStore};
use worker::{SqlStorage, SqlStorageValue};

use super::Deserialize;

/// A row of `computers` (schema version 2, `crate::schema`).
#[derive(Debug, Deserialize)]
struct Row {
    id: String,
    executor: String,
    temporary: i64,
    owner: Option<String>,
    stateless: i64,
    last_used: i64,
}

impl From<Row> for Entry {
    fn from(r: Row) -> Self {
        Entry {
            id: r.id,
            place: r.executor,
            temporary: r.temporary != 0,
            owner: r.owner,
            stateless: r.stateless != 0,
            last_used_ms: u64::try_from(r.last_used).unwrap_or_default(),
            // The gateway does not see commands run: its executors count them.
            running: 0,
        }
    }
}

const COLUMNS: &str = "id, executor, temporary, owner, stateless, last_used";

/// The `computers` table of one team's object.
pub(crate) struct SqlStore(pub(crate) SqlStorage);

impl SqlStore {
    fn rows(&self, query: &str, args: Vec<SqlStorageValue>) -> worker::Result<Vec<Entry>> {
        let rows: Vec<Row> = self.0.exec(query, Some(args))?.to_array()?;
        Ok(rows.into_iter().map(Entry::from).collect())
    }
}

fn ms(v: u64) -> SqlStorageValue {
    i64::try_from(v).unwrap_or(i64::MAX).into()
}

impl InventoryStore for SqlStore {
    type Error = worker::Error;

    fn get(&self, id: &str) -> worker::Result<Option<Entry>> {
        let query = format!("SELECT {COLUMNS} FROM computers WHERE id = ?");
        Ok(self.rows(&query, vec![id.into()])?.into_iter().next())
    }

    fn put(&mut self, e: &Entry) -> worker::Result<()> {
        let query =
            format!("INSERT OR REPLACE INTO computers ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)");
        let owner = match &e.owner {
            Some(o) => o.as_str().into(),
            None => SqlStorageValue::Null,
        };
        let args = vec![
            e.id.as_str().into(),
            e.place.as_str().into(),
            i64::from(e.temporary).into(),
            owner,
            i64::from(e.stateless).into(),
            ms(e.last_used_ms),
        ];
        self.0.exec(&query, Some(args)).map(drop)
    }

    fn remove(&mut self, id: &str) -> worker::Result<()> {
        self.0
            .exec("DELETE FROM computers WHERE id = ?", Some(vec![id.into()]))
            .map(drop)
    }

    fn entries(&self) -> worker::Result<Vec<Entry>> {
        self.rows(
            &format!("SELECT {COLUMNS} FROM computers ORDER BY id"),
            vec![],
        )
    }

    fn touch(&mut self, id: &str, now_ms: u64) -> worker::Result<()> {
        self.0
            .exec(
                "UPDATE computers SET last_used = ? WHERE id = ?",
                Some(vec![ms(now_ms), id.into()]),
            )
            .map(drop)
    }
}

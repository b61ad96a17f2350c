//! Saved connection profiles and tables in one SQLite file (`DATA_DIR/connections.sqlite`),
//! through `rusqlite`. Names are unique per kind; a profile used by a table cannot be
//! deleted. Calls are short and serialized by one mutex-held connection.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{params, Connection, OptionalExtension};

/// The file under the data directory.
pub const FILE: &str = "connections.sqlite";

/// A saved profile. `config` is the profile exactly as given (secret included: it never
/// leaves through the API, see `crate::redact`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRecord {
    pub id: i64,
    pub name: String,
    pub connector: String,
    pub config: serde_json::Value,
}

/// A saved table with the statement made for it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRecord {
    pub id: i64,
    pub name: String,
    pub connector: String,
    pub profile_id: i64,
    pub config: serde_json::Value,
    pub schema: serde_json::Value,
    pub sql: String,
}

#[derive(Debug, PartialEq, Eq)]
pub enum StoreError {
    /// A profile or table of that name exists.
    NameTaken,
    /// No row with that id.
    NotFound,
    /// The profile is used by these tables.
    InUse(Vec<String>),
    Sqlite(String),
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::SqliteFailure(f, _)
                if f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE =>
            {
                StoreError::NameTaken
            }
            e => StoreError::Sqlite(e.to_string()),
        }
    }
}

pub struct Store {
    db: Mutex<Connection>,
}

fn json(text: String) -> serde_json::Value {
    serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
}

impl Store {
    /// Opens (creating) `dir/connections.sqlite`, creating `dir` when missing. Errors
    /// name the path.
    pub fn open(dir: &Path) -> anyhow::Result<Store> {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("cannot create data directory {}: {e}", dir.display()))?;
        let path = dir.join(FILE);
        let db = Connection::open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        db.execute_batch(
            "PRAGMA foreign_keys = ON;
             CREATE TABLE IF NOT EXISTS profiles (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 name TEXT NOT NULL UNIQUE,
                 connector TEXT NOT NULL,
                 config TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS tables (
                 id INTEGER PRIMARY KEY AUTOINCREMENT,
                 name TEXT NOT NULL UNIQUE,
                 connector TEXT NOT NULL,
                 profile_id INTEGER NOT NULL REFERENCES profiles(id),
                 config TEXT NOT NULL,
                 schema TEXT NOT NULL,
                 sql TEXT NOT NULL);",
        )
        .map_err(|e| anyhow::anyhow!("cannot set up {}: {e}", path.display()))?;
        Ok(Store { db: Mutex::new(db) })
    }

    fn db(&self) -> std::sync::MutexGuard<'_, Connection> {
        // A panic while holding the lock leaves SQLite itself consistent.
        self.db.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn insert_profile(
        &self,
        name: &str,
        connector: &str,
        config: &serde_json::Value,
    ) -> Result<ProfileRecord, StoreError> {
        let db = self.db();
        db.execute(
            "INSERT INTO profiles (name, connector, config) VALUES (?1, ?2, ?3)",
            params![name, connector, config.to_string()],
        )?;
        Ok(ProfileRecord {
            id: db.last_insert_rowid(),
            name: name.into(),
            connector: connector.into(),
            config: config.clone(),
        })
    }

    pub fn profiles(&self) -> Result<Vec<ProfileRecord>, StoreError> {
        let db = self.db();
        let mut q = db.prepare("SELECT id, name, connector, config FROM profiles ORDER BY id")?;
        let rows = q.query_map([], |r| {
            Ok(ProfileRecord {
                id: r.get(0)?,
                name: r.get(1)?,
                connector: r.get(2)?,
                config: json(r.get(3)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn profile(&self, id: i64) -> Result<ProfileRecord, StoreError> {
        self.profiles()?
            .into_iter()
            .find(|p| p.id == id)
            .ok_or(StoreError::NotFound)
    }

    /// The profile named `name` (for `'connection-profile' = 'name'`).
    pub fn profile_named(&self, name: &str) -> Result<ProfileRecord, StoreError> {
        self.profiles()?
            .into_iter()
            .find(|p| p.name == name)
            .ok_or(StoreError::NotFound)
    }

    pub fn delete_profile(&self, id: i64) -> Result<(), StoreError> {
        let db = self.db();
        let mut q = db.prepare("SELECT name FROM tables WHERE profile_id = ?1 ORDER BY id")?;
        let users: Vec<String> = q.query_map([id], |r| r.get(0))?.collect::<Result<_, _>>()?;
        if !users.is_empty() {
            return Err(StoreError::InUse(users));
        }
        match db.execute("DELETE FROM profiles WHERE id = ?1", [id])? {
            0 => Err(StoreError::NotFound),
            _ => Ok(()),
        }
    }

    pub fn insert_table(&self, t: &TableRecord) -> Result<TableRecord, StoreError> {
        let db = self.db();
        db.execute(
            "INSERT INTO tables (name, connector, profile_id, config, schema, sql)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                t.name,
                t.connector,
                t.profile_id,
                t.config.to_string(),
                t.schema.to_string(),
                t.sql
            ],
        )?;
        Ok(TableRecord {
            id: db.last_insert_rowid(),
            ..t.clone()
        })
    }

    pub fn tables(&self) -> Result<Vec<TableRecord>, StoreError> {
        let db = self.db();
        let mut q = db.prepare(
            "SELECT id, name, connector, profile_id, config, schema, sql FROM tables ORDER BY id",
        )?;
        let rows = q.query_map([], |r| {
            Ok(TableRecord {
                id: r.get(0)?,
                name: r.get(1)?,
                connector: r.get(2)?,
                profile_id: r.get(3)?,
                config: json(r.get(4)?),
                schema: json(r.get(5)?),
                sql: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    pub fn delete_table(&self, id: i64) -> Result<(), StoreError> {
        match self
            .db()
            .execute("DELETE FROM tables WHERE id = ?1", [id])?
        {
            0 => Err(StoreError::NotFound),
            _ => Ok(()),
        }
    }

    /// Whether a table named `name` exists.
    pub fn table_exists(&self, name: &str) -> Result<bool, StoreError> {
        Ok(self
            .db()
            .query_row("SELECT 1 FROM tables WHERE name = ?1", [name], |_| Ok(()))
            .optional()?
            .is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_and_tables_persist_and_a_used_profile_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let config = serde_json::json!({"project": "p"});
        {
            let s = Store::open(dir.path()).unwrap();
            let p = s.insert_profile("local", "pubsub", &config).unwrap();
            assert_eq!(
                s.insert_profile("local", "pubsub", &config),
                Err(StoreError::NameTaken)
            );
            s.insert_table(&TableRecord {
                id: 0,
                name: "bids".into(),
                connector: "pubsub".into(),
                profile_id: p.id,
                config: serde_json::json!({"type": "source"}),
                schema: serde_json::json!({}),
                sql: "CREATE TABLE bids ...".into(),
            })
            .unwrap();
            assert_eq!(
                s.delete_profile(p.id),
                Err(StoreError::InUse(vec!["bids".into()]))
            );
        }
        // A second open sees what the first wrote.
        let s = Store::open(dir.path()).unwrap();
        let p = s.profile_named("local").unwrap();
        assert_eq!(p.config, config);
        let t = s.tables().unwrap();
        assert_eq!(t.len(), 1);
        assert!(s.table_exists("bids").unwrap());
        s.delete_table(t[0].id).unwrap();
        assert_eq!(s.delete_table(t[0].id), Err(StoreError::NotFound));
        s.delete_profile(p.id).unwrap();
        assert_eq!(s.profile(p.id), Err(StoreError::NotFound));
    }
}

//! `[cdr]`: where call detail records go besides the JSON-lines file (`general.cdr`), and the
//! limits of the writer that puts them in a database.

use std::path::PathBuf;

use serde::Deserialize;

use super::{bounded, Diagnostics};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawCdr {
    pub database: String,
    pub batch_rows: u64,
    pub batch_ms: u64,
    pub queue: u64,
    pub shutdown_s: u64,
    pub timeout_ms: u64,
}

impl Default for RawCdr {
    fn default() -> RawCdr {
        RawCdr {
            database: String::new(),
            batch_rows: 500,
            batch_ms: 200,
            queue: 10_000,
            shutdown_s: 5,
            timeout_ms: 5000,
        }
    }
}

/// The CDR settings, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cdr {
    /// None: CDRs go to the JSON-lines file only.
    pub database: Option<CdrDatabase>,
    /// A batch is inserted (in one transaction) when it holds this many rows, or when its
    /// oldest row has waited `batch_ms`.
    pub batch_rows: usize,
    pub batch_ms: u64,
    /// CDRs the workers may queue for the writer; past that a worker spools them to the file.
    pub queue: usize,
    /// How long stopping waits for the writer to put what it holds in the database.
    pub shutdown_s: u64,
    /// How long the writer waits for the database to answer (connecting, a batch) before the
    /// batch goes to the spool: a database that hangs never holds CDRs for ever.
    pub timeout_ms: u64,
}

/// A CDR database, from `cdr.database`.
#[derive(Clone, PartialEq, Eq)]
pub enum CdrDatabase {
    /// `postgres://user:pass@host:port/db` (or `postgresql://`), handed to the driver as is.
    Postgres(String),
    /// `sqlite:PATH`, relative to the data directory.
    Sqlite(PathBuf),
}

impl std::fmt::Debug for CdrDatabase {
    /// Without the URL: it may hold a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CdrDatabase::Postgres(_) => f.write_str("Postgres(..)"),
            CdrDatabase::Sqlite(p) => write!(f, "Sqlite({})", p.display()),
        }
    }
}

pub(crate) fn cdr(raw: RawCdr, d: &mut Diagnostics) -> Cdr {
    let database = match raw.database.as_str() {
        "" => None,
        url if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            Some(CdrDatabase::Postgres(url.to_string()))
        }
        url => match url.strip_prefix("sqlite:") {
            Some(path) if !path.is_empty() => Some(CdrDatabase::Sqlite(path.into())),
            _ => {
                d.error(
                    "cdr.database",
                    "expected \"postgres://USER:PASSWORD@HOST:PORT/DATABASE\" or \"sqlite:FILE\" (relative to general.data_dir), or \"\" for the JSON-lines file only",
                );
                None
            }
        },
    };
    Cdr {
        database,
        batch_rows: bounded(d, "cdr.batch_rows", raw.batch_rows, 1, 10_000) as usize,
        batch_ms: bounded(d, "cdr.batch_ms", raw.batch_ms, 1, 60_000),
        queue: bounded(d, "cdr.queue", raw.queue, 1, 1_000_000) as usize,
        shutdown_s: bounded(d, "cdr.shutdown_s", raw.shutdown_s, 0, 300),
        timeout_ms: bounded(d, "cdr.timeout_ms", raw.timeout_ms, 100, 600_000),
    }
}

//! The CDR table in PostgreSQL or SQLite: its migrations, and one INSERT per batch. A batch
//! is sent as one JSON array that the database itself takes apart (`jsonb_array_elements`,
//! `json_each`): one statement and one round trip for 500 rows, with no parameter limit, and
//! the mapping of CDR fields to columns is written once, in [`COLUMNS`].

use std::path::PathBuf;
use std::time::Duration;

use super::tls::{self, Tls};
use super::writer::Sink;

/// The schema, by version: strowger applies those a database has not had, in order, and
/// records each in `schema_migrations`. Applied migrations are never edited: a change is a
/// new one.
const POSTGRES_MIGRATIONS: &[&str] = &["CREATE TABLE cdr (
    id text PRIMARY KEY,
    call_id text,
    start_time timestamptz,
    answer_time timestamptz,
    end_time timestamptz,
    duration_s double precision,
    billable_s double precision,
    caller text,
    callee text,
    exten text,
    context text,
    user_name text,
    cause integer,
    cause_text text,
    sip_status integer,
    hangup_side text,
    codec text,
    bridged_to text,
    transferred_to text,
    trunk text,
    recording text,
    recording_s double precision,
    recording_complete boolean,
    cdr jsonb NOT NULL
);
CREATE INDEX cdr_start_time ON cdr (start_time);
CREATE INDEX cdr_call_id ON cdr (call_id);"];

/// SQLite's: times are Unix seconds (REAL), booleans 0 or 1.
const SQLITE_MIGRATIONS: &[&str] = &["CREATE TABLE cdr (
    id TEXT PRIMARY KEY,
    call_id TEXT,
    start_time REAL,
    answer_time REAL,
    end_time REAL,
    duration_s REAL,
    billable_s REAL,
    caller TEXT,
    callee TEXT,
    exten TEXT,
    context TEXT,
    user_name TEXT,
    cause INTEGER,
    cause_text TEXT,
    sip_status INTEGER,
    hangup_side TEXT,
    codec TEXT,
    bridged_to TEXT,
    transferred_to TEXT,
    trunk TEXT,
    recording TEXT,
    recording_s REAL,
    recording_complete INTEGER,
    cdr TEXT NOT NULL
);
CREATE INDEX cdr_start_time ON cdr (start_time);
CREATE INDEX cdr_call_id ON cdr (call_id);"];

#[derive(Clone, Copy)]
enum Kind {
    Text,
    Time,
    Real,
    Int,
    Bool,
}

/// Typed columns: (column, the CDR's JSON key, type). The whole CDR goes in `cdr` too.
const COLUMNS: &[(&str, &str, Kind)] = &[
    ("id", "id", Kind::Text),
    ("call_id", "call_id", Kind::Text),
    ("start_time", "start", Kind::Time),
    ("answer_time", "answer", Kind::Time),
    ("end_time", "end", Kind::Time),
    ("duration_s", "duration_s", Kind::Real),
    ("billable_s", "billable_s", Kind::Real),
    ("caller", "from", Kind::Text),
    ("callee", "to", Kind::Text),
    ("exten", "exten", Kind::Text),
    ("context", "context", Kind::Text),
    ("user_name", "user", Kind::Text),
    ("cause", "cause", Kind::Int),
    ("cause_text", "cause_text", Kind::Text),
    ("sip_status", "sip_status", Kind::Int),
    ("hangup_side", "hangup_side", Kind::Text),
    ("codec", "codec", Kind::Text),
    ("bridged_to", "bridged_to", Kind::Text),
    ("transferred_to", "transferred_to", Kind::Text),
    ("trunk", "trunk", Kind::Text),
    ("recording", "recording", Kind::Text),
    ("recording_s", "recording_s", Kind::Real),
    ("recording_complete", "recording_complete", Kind::Bool),
];

/// `INSERT … SELECT` from the batch's elements, each field as `field(key, kind)` reads it.
fn insert(from: &str, element: &str, field: impl Fn(&str, Kind) -> String) -> String {
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.0).collect();
    let values: Vec<String> = COLUMNS.iter().map(|&(_, k, t)| field(k, t)).collect();
    format!(
        "INSERT INTO cdr ({}, cdr) SELECT {}, {element} FROM {from} WHERE true ON CONFLICT (id) DO NOTHING",
        names.join(", "),
        values.join(", ")
    )
}

fn postgres_insert() -> String {
    insert("jsonb_array_elements($1::text::jsonb) AS e", "e", |k, t| {
        let v = format!("(e->>'{k}')");
        match t {
            Kind::Text => v,
            Kind::Time => format!("to_timestamp({v}::float8)"),
            Kind::Real => format!("{v}::float8"),
            Kind::Int => format!("{v}::integer"),
            Kind::Bool => format!("{v}::boolean"),
        }
    })
}

fn sqlite_insert() -> String {
    // `->>` gives SQL values of the JSON's own types (true is 1).
    insert("json_each(?1)", "value", |k, _| format!("value->>'{k}'"))
}

fn batch(cdrs: &[String]) -> String {
    format!("[{}]", cdrs.join(","))
}

/// How long connecting to PostgreSQL may take unless the URL says (`connect_timeout`): the
/// writer holds new CDRs meanwhile.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// PostgreSQL through tokio-postgres on a runtime of the writer thread's own: every round trip
/// is bounded by `cdr.timeout_ms`, so a database that takes the connection but never answers
/// (a locked table, a stopped server) makes the batch go to the spool, not wait for ever.
pub struct Postgres {
    config: tokio_postgres::Config,
    tls: Tls,
    timeout: Duration,
    rt: tokio::runtime::Runtime,
    session: Option<Session>,
    insert: String,
}

/// A connection: the client, and the task that drives its socket, aborted with it so that a
/// server which never answers does not keep a socket per timeout open.
struct Session {
    client: tokio_postgres::Client,
    io: tokio::task::AbortHandle,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.io.abort();
    }
}

impl Postgres {
    /// Checks the URL (and its `sslrootcert`) now; connecting waits for the first batch.
    pub fn new(url: &str, timeout: Duration) -> Result<Postgres, String> {
        let (url, tls) = tls::split(url)?;
        tls.connector()?;
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            format!("cdr.database: {e} — expected postgres://USER:PASSWORD@HOST:PORT/DATABASE")
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("strowger");
        }
        config.ssl_mode(tls.ssl_mode());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cdr.database: cannot start its I/O runtime: {e}"))?;
        Ok(Postgres {
            config,
            tls,
            timeout,
            rt,
            session: None,
            insert: postgres_insert(),
        })
    }

    async fn connect(
        config: &tokio_postgres::Config,
        tls: tokio_postgres_rustls::MakeRustlsConnect,
        timeout: Duration,
    ) -> Result<Session, tokio_postgres::Error> {
        let (client, connection) = config.connect(tls).await?;
        // Driven whenever the writer waits on the runtime: the client's requests need it.
        let io = tokio::spawn(connection).abort_handle();
        let mut session = Session { client, io };
        let client = &mut session.client;
        // The server gives up on a statement when the writer does (a lock never granted).
        client
            .batch_execute(&format!("SET statement_timeout = {}", timeout.as_millis()))
            .await?;
        let tx = client.transaction().await?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now());
             LOCK TABLE schema_migrations IN EXCLUSIVE MODE",
        )
        .await?;
        let have: i32 = tx
            .query_one(
                "SELECT coalesce(max(version), 0) FROM schema_migrations",
                &[],
            )
            .await?
            .get(0);
        for (v, sql) in (1..).zip(POSTGRES_MIGRATIONS).skip(have as usize) {
            tx.batch_execute(sql).await?;
            tx.execute("INSERT INTO schema_migrations (version) VALUES ($1)", &[&v])
                .await?;
        }
        tx.commit().await?;
        Ok(session)
    }

    /// `step` on the runtime, given up after `cdr.timeout_ms`.
    fn bounded<T>(
        rt: &tokio::runtime::Runtime,
        timeout: Duration,
        step: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, String> {
        // The timer is made inside the runtime, whose clock it needs.
        match rt.block_on(async { tokio::time::timeout(timeout, step).await }) {
            Ok(done) => done.map_err(pg_error),
            Err(_) => Err(format!(
                "no answer from PostgreSQL within cdr.timeout_ms ({} ms)",
                timeout.as_millis()
            )),
        }
    }
}

impl Sink for Postgres {
    fn insert(&mut self, cdrs: &[String]) -> Result<(), String> {
        let session = match &mut self.session {
            Some(s) => s,
            None => {
                let tls = self.tls.connector()?;
                let connect = Self::connect(&self.config, tls, self.timeout);
                self.session
                    .insert(Self::bounded(&self.rt, self.timeout, connect)?)
            }
        };
        // One statement is one transaction.
        let batch = batch(cdrs);
        let done = Self::bounded(
            &self.rt,
            self.timeout,
            session.client.execute(&self.insert, &[&batch]),
        );
        if done.is_err() {
            // Dropped, the connection is closed: a statement still running is cancelled by
            // its statement_timeout, and one that committed late is skipped on replay (its ids).
            self.session = None;
        }
        done.map(drop)
    }
}

/// The error with its cause (the driver's Display alone says only "error connecting"), and
/// the setting to look at when TLS or the timeout is the cause.
fn pg_error(e: tokio_postgres::Error) -> String {
    let mut text = match std::error::Error::source(&e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    };
    if text.contains("TLS") || text.contains("certificate") {
        text.push_str(" (check sslmode and sslrootcert in cdr.database)");
    } else if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) {
        text.push_str(" (longer than cdr.timeout_ms)");
    }
    text
}

pub struct Sqlite {
    path: PathBuf,
    conn: Option<rusqlite::Connection>,
    insert: String,
}

impl Sqlite {
    pub fn new(path: PathBuf) -> Sqlite {
        Sqlite {
            path,
            conn: None,
            insert: sqlite_insert(),
        }
    }

    fn open(&self) -> rusqlite::Result<rusqlite::Connection> {
        let mut conn = rusqlite::Connection::open(&self.path)?;
        // Readers (reports, the tests) never block the writer, nor it them for long.
        conn.busy_timeout(Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version INTEGER PRIMARY KEY,
                 applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)",
        )?;
        let have: i64 = tx.query_row(
            "SELECT coalesce(max(version), 0) FROM schema_migrations",
            [],
            |r| r.get(0),
        )?;
        for (v, sql) in (1i64..).zip(SQLITE_MIGRATIONS).skip(have as usize) {
            tx.execute_batch(sql)?;
            tx.execute("INSERT INTO schema_migrations (version) VALUES (?1)", [v])?;
        }
        tx.commit()?;
        Ok(conn)
    }
}

impl Sink for Sqlite {
    fn insert(&mut self, cdrs: &[String]) -> Result<(), String> {
        let conn = match &mut self.conn {
            Some(c) => c,
            None => self.conn.insert(
                self.open()
                    .map_err(|e| format!("{}: {e}", self.path.display()))?,
            ),
        };
        let done = conn.execute(&self.insert, [batch(cdrs)]);
        if done.is_err() {
            self.conn = None;
        }
        done.map(drop)
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLite is a library: the real one runs here, on a file.
    #[test]
    fn sqlite_stores_typed_columns_once_per_id() {
        let path = std::env::temp_dir().join(format!("strowger-cdr-{}.db", fastrand::u64(..)));
        let mut db = Sqlite::new(path.clone());
        let cdr = r#"{"id":"a","call_id":"c1","from":"<sip:1@x>","to":"<sip:2@x>","exten":"2","context":"default","user":null,"start":1700000000.5,"answer":null,"end":1700000002.0,"duration_s":1.5,"billable_s":0.0,"cause":16,"cause_text":"normal_clearing","sip_status":200,"hangup_side":"caller","codec":"PCMU","recording_complete":true}"#;
        db.insert(&[cdr.to_string()]).unwrap();
        db.insert(&[cdr.to_string(), cdr.replace("\"a\"", "\"b\"")])
            .unwrap();
        let conn = rusqlite::Connection::open(&path).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM cdr", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        let row: (String, f64, Option<f64>, i64, String, i64) = conn
            .query_row(
                "SELECT call_id, start_time, answer_time, cause, codec, recording_complete FROM cdr WHERE id = 'a'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?)),
            )
            .unwrap();
        assert_eq!(row, ("c1".into(), 1700000000.5, None, 16, "PCMU".into(), 1));
        let version: i64 = conn
            .query_row("SELECT max(version) FROM schema_migrations", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(version, SQLITE_MIGRATIONS.len() as i64);
        let _ = std::fs::remove_file(path);
    }

    /// A server that takes the connection and never says a word (as a stopped PostgreSQL
    /// does: the kernel still accepts): the insert fails after `cdr.timeout_ms`, not never.
    #[test]
    fn a_database_that_never_answers_fails_the_insert_within_the_timeout() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "postgres://u:p@127.0.0.1:{}/pbx?sslmode=disable",
            silent.local_addr().unwrap().port()
        );
        let mut db = Postgres::new(&url, Duration::from_millis(300)).unwrap();
        for _ in 0..2 {
            let t0 = std::time::Instant::now();
            let e = db.insert(&[r#"{"id":"a"}"#.to_string()]).unwrap_err();
            assert!(e.contains("cdr.timeout_ms"), "{e}");
            let took = t0.elapsed();
            assert!(
                took >= Duration::from_millis(300) && took < Duration::from_secs(3),
                "{took:?}"
            );
        }
        // Each attempt's socket was closed when it was given up: none is left open.
        for _ in 0..2 {
            let (mut conn, _) = silent.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0; 512];
            while std::io::Read::read(&mut conn, &mut buf).expect("closed, not left open") > 0 {}
        }
    }
}

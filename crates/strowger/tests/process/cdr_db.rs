//! CDRs in a database (`[cdr] database`): SQLite and a real PostgreSQL, the latter stopped and
//! restarted in the middle of 1,000 calls — every call's CDR must end up stored exactly once;
//! PostgreSQL over TLS with the CA checked; a locked table that never answers the insert.

use crate::common;

use common::postgres::Postgres;
use common::sipp::{Scenario, Sipp};
use common::switch::{Cdr, Opts};
use common::{tail, wait_for, Strowger, TempDir};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The tests run one at a time: the PostgreSQL test's load would starve the other strowger's
/// start on a 2-core machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The embedded configuration with `[cdr]` keys replaced (`key = value` lines of that table).
fn cdr_config(dir: &Path, keys: &[(&str, &str)]) -> PathBuf {
    let mut text = include_str!("../../../switch/src/default.toml").to_string();
    for (key, value) in keys {
        let line = text
            .lines()
            .skip_while(|l| *l != "[cdr]")
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("no {key} in [cdr] of default.toml"))
            .to_string();
        text = text.replacen(&line, &format!("{key} = {value}"), 1);
    }
    let path = dir.join("cdr.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A few echo calls with SQLite, the writer told to wait a minute before a batch: the rows are
/// stored when strowger stops, with the CDR file's fields.
#[test]
fn sqlite_rows_hold_the_calls_cdrs_and_are_flushed_on_stop() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("cdr-sqlite");
    let config = cdr_config(
        dir.path(),
        &[("database", "\"sqlite:cdr.db\""), ("batch_ms", "60000")],
    );
    let mut s = Strowger::with(
        "cdr-sqlite",
        Opts {
            config_file: Some(config),
            ..Opts::default()
        },
    );
    Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(3, 10, 3)
        .duration_ms(500)
        .run(s.sip, s.dir.path())
        .assert_ok(3);
    let cdrs = s.wait_cdrs(3);
    let db = s.data_dir().join("cdr.db");
    assert_eq!(rows_in(&db), 0, "the batch waits for batch_ms");
    assert!(s.stop().success());
    assert_eq!(rows_in(&db), 3, "stopping flushes what the writer held");

    let conn = rusqlite::Connection::open(&db).unwrap();
    for c in &cdrs {
        type Row = (
            String,
            String,
            String,
            f64,
            Option<f64>,
            f64,
            String,
            i64,
            String,
        );
        let row: Row = conn
            .query_row(
                "SELECT call_id, exten, context, start_time, answer_time, billable_s, codec, \
                 sip_status, cdr FROM cdr WHERE id = ?1",
                [c.str("id")],
                |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ))
                },
            )
            .unwrap_or_else(|e| panic!("no row for {c:?}: {e}"));
        let (call_id, exten, context, start, answer, billable, codec, status, json) = row;
        assert_eq!(call_id, c.str("call_id"));
        assert_eq!(
            (exten.as_str(), context.as_str()),
            ("9196", c.str("context"))
        );
        assert_eq!(start, c.num("start"));
        assert_eq!(answer, Some(c.num("answer")));
        assert!(billable > 0.3 && billable == c.num("billable_s"), "{c:?}");
        assert_eq!((codec.as_str(), status), ("PCMU", 200));
        assert_eq!(json, c.line, "the whole CDR is kept");
    }
    assert!(
        !s.data_dir().join("cdr-spool.jsonl").exists(),
        "nothing was spooled"
    );
}

fn rows_in(db: &Path) -> i64 {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.query_row("SELECT count(*) FROM cdr", [], |r| r.get(0))
        .unwrap_or(0)
}

const CALLS: u32 = 1000;

/// 1,000 short calls at 100/s; PostgreSQL is stopped (fast shutdown) a few seconds in and
/// started again three seconds later. Afterwards the table holds one row per call: the CDRs
/// of the outage were spooled and replayed, and none twice.
#[test]
fn postgres_outage_mid_load_loses_no_cdr_and_stores_none_twice() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("cdr-postgres");
    let mut pg = Postgres::start(dir.path());
    let url = format!("\"{}\"", pg.url);
    let mut s = Strowger::with(
        "cdr-postgres",
        Opts {
            config_file: Some(cdr_config(dir.path(), &[("database", &url)])),
            rtp_ports: Some(200),
            ..Opts::default()
        },
    );
    let sipp = Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(CALLS, 100, 40)
        .duration_ms(100)
        .spawn(Some(s.sip), s.dir.path());
    std::thread::sleep(Duration::from_secs(3));
    let before = count(&pg).0;
    assert!(before > 0, "CDRs reach PostgreSQL before the outage");
    let down = unix_now();
    pg.stop();
    std::thread::sleep(Duration::from_secs(3));
    let up = unix_now();
    pg.resume();
    // On a busy shared machine calls may be refused (503 while media ticks run late): the CDR
    // file says which calls were made, and each of those must be one row.
    let made = sipp.finish();
    let cdrs = s.wait_cdrs(made.successful as usize);
    let calls = cdrs.len() as i64;
    assert!(
        calls as u64 >= made.successful,
        "a CDR line per completed call"
    );
    let in_outage = cdrs
        .iter()
        .filter(|c| (down..up).contains(&c.num("end")))
        .count();
    assert!(
        in_outage > 0,
        "calls ended while PostgreSQL was down ({} of {CALLS} calls completed)\n{}",
        made.successful,
        made.evidence()
    );

    let stored = wait_for(Duration::from_secs(15), || {
        Some(count(&pg)).filter(|&(rows, _)| rows >= calls)
    });
    let (rows, ids) = count(&pg);
    assert!(
        stored.is_some() && rows == calls && ids == rows,
        "{rows} rows with {ids} distinct ids for {calls} calls ({before} before the outage, \
         {in_outage} ended during it)\n{}",
        tail(&s.stderr(), 20)
    );
    let log = s.stderr();
    assert!(
        log.contains("cdr.database:") && log.contains("spooled"),
        "the outage was seen and CDRs spooled:\n{}",
        tail(&log, 20)
    );
    // Every CDR of the file is a row, with its typed columns.
    let mut client = pg.client();
    let c = &cdrs[cdrs.len() / 2];
    let row = client
        .query_one(
            "SELECT exten, sip_status, codec, extract(epoch FROM start_time)::float8, cdr::text \
             FROM cdr WHERE id = $1",
            &[&c.str("id")],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "9196");
    assert_eq!(row.get::<_, i32>(1), 200);
    assert_eq!(row.get::<_, String>(2), "PCMU");
    assert!(
        (row.get::<_, f64>(3) - c.num("start")).abs() < 0.001,
        "{c:?}"
    );
    let json = Cdr::parse(&row.get::<_, String>(4));
    assert_eq!(json.str("call_id"), c.str("call_id"));
    let ids: Vec<String> = cdrs.iter().map(|c| c.str("id").to_string()).collect();
    let found: i64 = client
        .query_one("SELECT count(*) FROM cdr WHERE id = ANY($1)", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(found, calls, "the rows are the CDR file's");
    assert!(s.stop().success());
    assert!(
        !s.data_dir().join("cdr-spool.jsonl").exists()
            || std::fs::metadata(s.data_dir().join("cdr-spool.jsonl"))
                .unwrap()
                .len()
                == 0,
        "the spool was replayed"
    );
}

/// CDRs in the spool, or in its copy being replayed.
fn spooled(data_dir: &Path) -> usize {
    ["cdr-spool.jsonl", "cdr-spool.replay.jsonl"]
        .iter()
        .map(|f| common::read_text(&data_dir.join(f)).lines().count())
        .sum()
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// (rows, distinct ids) in the CDR table; (0, 0) while it cannot be read.
fn count(pg: &Postgres) -> (i64, i64) {
    let Ok(mut c) = postgres::Client::connect(&pg.url, postgres::NoTls) else {
        return (0, 0);
    };
    c.query_one("SELECT count(*), count(DISTINCT id) FROM cdr", &[])
        .map_or((0, 0), |r| (r.get(0), r.get(1)))
}

/// Three echo calls against a PostgreSQL serving TLS, with `sslmode=verify-full` and a CA file
/// that first holds the wrong CA: the writer names sslrootcert, keeps the CDRs in the spool,
/// and once the file holds the CA that signed the server's certificate (no restart: the file
/// is read at each reconnect) stores each CDR once, over TLS.
#[test]
fn postgres_over_tls_checks_the_ca_and_spools_until_the_ca_file_is_right() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("cdr-postgres-tls");
    let pg = Postgres::start_tls(dir.path());
    let ca_file = dir.path().join("pg-ca.pem");
    std::fs::write(&ca_file, common::postgres::new_ca().0.pem()).unwrap();
    let url = format!(
        "\"{}?sslmode=verify-full&sslrootcert={}\"",
        pg.url,
        ca_file.display()
    );
    let mut s = Strowger::with(
        "cdr-postgres-tls",
        Opts {
            config_file: Some(cdr_config(dir.path(), &[("database", &url)])),
            ..Opts::default()
        },
    );
    Sipp::new(Scenario::Builtin("uac"))
        .service("9196")
        .calls(3, 10, 3)
        .duration_ms(100)
        .run(s.sip, s.dir.path())
        .assert_ok(3);
    let cdrs = s.wait_cdrs(3);
    let refused = wait_for(Duration::from_secs(10), || {
        let log = s.stderr();
        (log.contains("cdr.database") && log.contains("sslrootcert")).then_some(())
    });
    assert!(
        refused.is_some(),
        "the wrong CA is reported, naming the setting:\n{}",
        tail(&s.stderr(), 20)
    );
    assert_eq!(count(&pg), (0, 0), "no CDR went to an unverified server");
    assert_eq!(spooled(&s.data_dir()), 3, "the CDRs wait in the spool");

    std::fs::write(&ca_file, pg.ca.as_ref().unwrap()).unwrap();
    let stored = wait_for(Duration::from_secs(15), || {
        Some(count(&pg)).filter(|&(rows, _)| rows >= 3)
    });
    assert_eq!(
        stored,
        Some((3, 3)),
        "each CDR once, after the CA file was fixed:\n{}",
        tail(&s.stderr(), 20)
    );
    let mut client = pg.client();
    let ids: Vec<String> = cdrs.iter().map(|c| c.str("id").to_string()).collect();
    let found: i64 = client
        .query_one("SELECT count(*) FROM cdr WHERE id = ANY($1)", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(found, 3, "the rows are the CDR file's");
    let over_tls: Vec<bool> = client
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'strowger'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(over_tls, [true], "strowger's connection is encrypted");
    assert!(s.stop().success());
}

/// The test holds the CDR table locked (ACCESS EXCLUSIVE, in an open transaction): the
/// writer's insert never gets an answer. Calls made meanwhile complete as usual; after
/// `cdr.timeout_ms` their CDRs go to the spool, and once the lock is released each is stored
/// once.
#[test]
fn a_locked_cdr_table_times_out_to_the_spool_and_calls_go_on() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new("cdr-postgres-lock");
    let pg = Postgres::start(dir.path());
    let url = format!("\"{}\"", pg.url);
    let mut s = Strowger::with(
        "cdr-postgres-lock",
        Opts {
            config_file: Some(cdr_config(
                dir.path(),
                &[("database", &url), ("timeout_ms", "2000")],
            )),
            ..Opts::default()
        },
    );
    let call = |n: u32| {
        Sipp::new(Scenario::Builtin("uac"))
            .service("9196")
            .calls(n, 10, n)
            .duration_ms(100)
            .run(s.sip, s.dir.path())
            .assert_ok(n as u64)
    };
    call(1);
    let first = wait_for(Duration::from_secs(10), || {
        Some(count(&pg)).filter(|&(rows, _)| rows == 1)
    });
    assert!(first.is_some(), "the first CDR is stored");

    let mut locker = pg.client();
    locker
        .batch_execute("BEGIN; LOCK TABLE cdr IN ACCESS EXCLUSIVE MODE")
        .unwrap();
    call(5);
    let cdrs = s.wait_cdrs(6);
    let timed_out = wait_for(Duration::from_secs(15), || {
        let log = s.stderr();
        (log.contains("cdr.timeout_ms") && spooled(&s.data_dir()) >= 5).then_some(())
    });
    assert!(
        timed_out.is_some(),
        "the insert gave up after cdr.timeout_ms and spooled the CDRs:\n{}",
        tail(&s.stderr(), 20)
    );
    locker.batch_execute("ROLLBACK").unwrap();
    let stored = wait_for(Duration::from_secs(15), || {
        Some(count(&pg)).filter(|&(rows, _)| rows >= 6)
    });
    assert_eq!(
        stored,
        Some((6, 6)),
        "each CDR once after the lock:\n{}",
        tail(&s.stderr(), 20)
    );
    let ids: Vec<String> = cdrs.iter().map(|c| c.str("id").to_string()).collect();
    let found: i64 = pg
        .client()
        .query_one("SELECT count(*) FROM cdr WHERE id = ANY($1)", &[&ids])
        .unwrap()
        .get(0);
    assert_eq!(found, 6);
    assert!(s.stop().success());
}

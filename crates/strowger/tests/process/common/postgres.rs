//! A private PostgreSQL cluster for the tests: Debian's `initdb` and `postgres`
//! (scripts/setup.sh) in a temporary directory, on a free loopback port, with a password. It can
//! be stopped (fast shutdown, as `pg_ctl stop -m fast`) and started again mid-test. PostgreSQL
//! refuses to run as root: under root it runs as the `postgres` user, in a directory it owns.
//! [`Postgres::start_tls`] serves TLS too, with a certificate signed by a CA made by the test.

use super::net::free_port;
use super::{read_text, tail, wait_for};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const USER: &str = "strowger";
const PASSWORD: &str = "cdr-test-password";

pub struct Postgres {
    child: Option<Child>,
    bin: PathBuf,
    dir: PathBuf,
    pub port: u16,
    /// What `cdr.database` is set to.
    pub url: String,
    /// The CA (PEM) that signed the server's certificate, when it serves TLS.
    pub ca: Option<String>,
}

impl Postgres {
    /// A new cluster in `parent`/postgres, started.
    pub fn start(parent: &Path) -> Postgres {
        Postgres::start_with(parent, false)
    }

    /// A new cluster that also serves TLS (`ssl=on`), its certificate for 127.0.0.1 and
    /// localhost signed by a new CA ([`Postgres::ca`]).
    pub fn start_tls(parent: &Path) -> Postgres {
        Postgres::start_with(parent, true)
    }

    fn start_with(parent: &Path, tls: bool) -> Postgres {
        let bin = bin_dir();
        let dir = parent.join("postgres");
        std::fs::create_dir_all(&dir).unwrap();
        if as_root() {
            let ok = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown postgres {}", dir.display());
        }
        std::fs::write(dir.join("pwfile"), PASSWORD).unwrap();
        let out = run_as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-U", USER, "--auth=scram-sha-256", "--no-sync"])
            .arg(format!("--pwfile={}", dir.join("pwfile").display()))
            .output()
            .expect("run initdb (scripts/setup.sh installs postgresql)");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = free_port();
        let mut pg = Postgres {
            child: None,
            bin,
            dir,
            port,
            url: format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{port}/postgres"),
            ca: None,
        };
        if tls {
            pg.ca = Some(pg.certificate());
        }
        pg.resume();
        pg
    }

    /// Starts the server (again, after `stop`) on its port, and waits until it listens.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "PostgreSQL is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .unwrap();
        let child = run_as_postgres(&self.bin.join("postgres"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .args(self.ca.as_ref().map_or(vec![], |_| {
                let (cert, key) = self.tls_files();
                vec![
                    "-c".into(),
                    "ssl=on".into(),
                    "-c".into(),
                    format!("ssl_cert_file={}", cert.display()),
                    "-c".into(),
                    format!("ssl_key_file={}", key.display()),
                ]
            }))
            .arg("-k")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn postgres");
        self.child = Some(child);
        let up = wait_for(Duration::from_secs(15), || {
            let log = read_text(&self.log());
            let ready = log.matches("ready to accept connections").count();
            (ready == self.starts() && TcpStream::connect(("127.0.0.1", self.port)).is_ok())
                .then_some(())
        });
        assert!(
            up.is_some(),
            "PostgreSQL did not start on port {}:\n{}",
            self.port,
            tail(&read_text(&self.log()), 20)
        );
    }

    /// Fast shutdown (SIGINT): open connections are cut, as when a database is restarted.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &c.id().to_string()])
                .status();
            let exited = wait_for(Duration::from_secs(15), || c.try_wait().ok().flatten());
            if exited.is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }

    /// A client connection, as strowger's user.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to the test PostgreSQL: {e:?}"))
    }

    /// Writes the server's certificate and key, owned by the server's user (it refuses a key
    /// others may read); returns the CA's certificate.
    fn certificate(&self) -> String {
        let (ca, ca_key) = new_ca();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params =
            rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        let (cert_file, key_file) = self.tls_files();
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        if as_root() {
            let ok = Command::new("chown")
                .arg("postgres:postgres")
                .args([&cert_file, &key_file])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown postgres {}", key_file.display());
        }
        ca.pem()
    }

    fn tls_files(&self) -> (PathBuf, PathBuf) {
        (self.dir.join("server.crt"), self.dir.join("server.key"))
    }

    fn log(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// How many times the server was started (`resume` waits for that many "ready" lines).
    fn starts(&self) -> usize {
        read_text(&self.log())
            .matches("starting PostgreSQL")
            .count()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A new certificate authority and its key.
pub fn new_ca() -> (rcgen::Certificate, rcgen::KeyPair) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    (params.self_signed(&key).unwrap(), key)
}

/// /usr/lib/postgresql/VERSION/bin of the newest version installed.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("/usr/lib/postgresql: run scripts/setup.sh (postgresql)")
        .filter_map(|e| {
            let e = e.ok()?;
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, p)| p.join("postgres").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .expect("no PostgreSQL server in /usr/lib/postgresql")
        .1
}

fn as_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `program`, as the `postgres` user when the tests run as root. setpriv execs it, so the
/// child is the server itself and signals reach it.
fn run_as_postgres(program: &Path) -> Command {
    if as_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--",
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

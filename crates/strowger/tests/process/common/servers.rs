//! Store servers for the tests: redis-server and memcached from Debian (scripts/setup.sh) on
//! free loopback ports, killed on drop; they can be killed and started again on the same port
//! mid-test, and three Redis nodes can be joined into a Redis Cluster. Prometheus, for the
//! metrics, the same way.

use super::json::Json;
use super::net::free_port;
use super::wait_for;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Server {
    child: Option<Child>,
    program: &'static str,
    args: Vec<String>,
    pub port: u16,
    /// The store URL strowger is given.
    pub url: String,
}

impl Server {
    fn spawn(program: &'static str, args: Vec<String>, url: String, port: u16) -> Server {
        let mut s = Server {
            child: None,
            program,
            args,
            port,
            url,
        };
        s.start();
        s
    }

    /// Starts the server (again, after `kill`) on its port.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "{} is already running", self.program);
        let child = Command::new(self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {} (run scripts/setup.sh): {e}", self.program));
        self.child = Some(child);
        let up = wait_for(Duration::from_secs(10), || {
            TcpStream::connect(("127.0.0.1", self.port)).ok()
        });
        assert!(
            up.is_some(),
            "{} {:?} is not listening on port {}",
            self.program,
            self.args,
            self.port
        );
    }

    /// SIGKILL: the server goes away at once, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Redis without persistence (data lives as long as the process).
    pub fn redis() -> Server {
        let port = free_port();
        Server::spawn(
            "redis-server",
            redis_args(port, &["--save", "", "--appendonly", "no"]),
            format!("redis://127.0.0.1:{port}"),
            port,
        )
    }

    /// Redis that writes every change to an append-only file in `dir` before answering it,
    /// so a SIGKILL loses nothing that was acknowledged.
    pub fn redis_durable(dir: &Path) -> Server {
        let port = free_port();
        let dir = dir.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let dir = dir.display().to_string();
        Server::spawn(
            "redis-server",
            redis_args(
                port,
                &[
                    "--save",
                    "",
                    "--appendonly",
                    "yes",
                    "--appendfsync",
                    "always",
                ],
            )
            .into_iter()
            .chain(["--dir".to_string(), dir])
            .collect(),
            format!("redis://127.0.0.1:{port}"),
            port,
        )
    }

    pub fn memcached() -> Server {
        let port = free_port();
        Server::spawn(
            "memcached",
            [
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-u",
                "root",
            ]
            .map(String::from)
            .to_vec(),
            format!("memcached://127.0.0.1:{port}"),
            port,
        )
    }
}

/// A Prometheus server (Debian's `prometheus`) scraping `target`'s /metrics every second with
/// `token` as its bearer credentials, its data and config in `dir`.
pub struct Prometheus {
    server: Server,
}

impl Prometheus {
    pub fn start(dir: &Path, target: SocketAddr, token: &str) -> Prometheus {
        let port = free_port();
        let config = dir.join("prometheus.yml");
        let yml = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  \
             - job_name: strowger\n    authorization:\n      credentials: {token:?}\n    \
             static_configs:\n      - targets: [\"{target}\"]\n"
        );
        std::fs::write(&config, yml).unwrap();
        let args = [
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--log.level=warn".to_string(),
        ];
        let url = format!("http://127.0.0.1:{port}");
        let server = Server::spawn("prometheus", args.to_vec(), url, port);
        Prometheus { server }
    }

    /// The result of the instant query `query` (`/api/v1/query`): each series' labels and value.
    pub fn query(&self, query: &str) -> Vec<(Json, f64)> {
        let escaped: String = query
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        let body = http_get(self.server.port, &format!("/api/v1/query?query={escaped}"));
        let json = Json::parse(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(
            json.get("status").and_then(Json::as_str),
            Some("success"),
            "{body}"
        );
        let Some(Json::Arr(results)) = json.get("data").and_then(|d| d.get("result")) else {
            panic!("no result in {body}");
        };
        results
            .iter()
            .map(|r| {
                let value = match r.get("value") {
                    Some(Json::Arr(v)) => v[1].as_str().and_then(|v| v.parse().ok()),
                    _ => None,
                };
                let labels = r.get("metric").cloned().unwrap_or(Json::Null);
                (
                    labels,
                    value.unwrap_or_else(|| panic!("no value in {body}")),
                )
            })
            .collect()
    }
}

/// The body of an HTTP/1.0 GET on the loopback port `port` (a 200 only).
pub fn http_get(port: u16, path: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).expect("read the response");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{response}"
    );
    body.to_string()
}

fn redis_args(port: u16, extra: &[&str]) -> Vec<String> {
    ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A Redis Cluster of three masters, with or without a replica each, each node's state in `dir`.
pub struct RedisCluster {
    /// The masters first, then their replicas as `redis-cli --cluster create` paired them.
    pub nodes: Vec<Server>,
    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…` (every node).
    pub url: String,
}

/// `redis-cli ARGS` against the node on `port`: its output (empty if it could not run).
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

impl RedisCluster {
    /// Three masters, no replicas.
    pub fn start(dir: &Path) -> RedisCluster {
        RedisCluster::with_replicas(dir, 0)
    }

    /// Three masters and `replicas` replicas of each. A node missing for 1 s is failed
    /// (`cluster-node-timeout 1000`), so a replica takes over a killed master in about 2 s.
    pub fn with_replicas(dir: &Path, replicas: usize) -> RedisCluster {
        let nodes: Vec<Server> = (0..3 * (1 + replicas))
            .map(|_| {
                let port = free_port();
                let node_dir = dir.join(format!("cluster-{port}"));
                std::fs::create_dir_all(&node_dir).unwrap();
                // The bus defaults to port + 10000, past 65535 for a high free port.
                let bus = free_port().to_string();
                let extra = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-port",
                    &bus,
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "1000",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ];
                let mut args = redis_args(port, &extra);
                args.extend(["--dir".to_string(), node_dir.display().to_string()]);
                Server::spawn("redis-server", args, String::new(), port)
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("redis-cli (run scripts/setup.sh): {e}"));
        assert!(out.status.success(), "redis-cli --cluster create: {out:?}");
        let cluster = RedisCluster {
            url: format!("redis+cluster://{}", addrs.join(",")),
            nodes,
        };
        // The nodes agree on the slots, and replicas have synced, a little after create returns.
        let ok = wait_for(Duration::from_secs(30), || {
            let synced = cluster.nodes.iter().all(|n| {
                let info = redis_cli(n.port, &["info", "replication"]);
                info.contains("role:master") || info.contains("master_link_status:up")
            });
            (synced && cluster.ok()).then_some(())
        });
        assert!(
            ok.is_some(),
            "the Redis Cluster never reached cluster_state:ok with its replicas in sync"
        );
        cluster
    }

    /// Every running node says `cluster_state:ok`.
    pub fn ok(&self) -> bool {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .all(|n| redis_cli(n.port, &["cluster", "info"]).contains("cluster_state:ok"))
    }

    /// The running nodes that are masters now.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].child.is_some())
            .filter(|&i| redis_cli(self.nodes[i].port, &["role"]).starts_with("master"))
            .collect()
    }

    /// The keys matching `pattern` on the node `i` (its own, not the cluster's).
    pub fn keys(&self, i: usize, pattern: &str) -> Vec<String> {
        redis_cli(self.nodes[i].port, &["--scan", "--pattern", pattern])
            .lines()
            .map(str::to_string)
            .collect()
    }
}

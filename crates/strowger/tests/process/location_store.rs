//! The location store under failure and shared between instances, with real servers on free
//! loopback ports: Redis or Memcached killed mid-test and started again on the same port, two
//! strowger instances on one Redis, and a three-node Redis Cluster.

use crate::common;

use common::net::free_port;
use common::registrar::{
    call_phone, finals, invite_status, register, registered, start, write_config,
};
use common::servers::{RedisCluster, Server};
use common::sipp::{Scenario, Sipp};
use common::switch::run_cli;
use common::{Strowger, TempDir};

/// A REGISTER while the store is away: 401, then 503 with Retry-After, and never a 200.
fn register_refused(s: &Strowger, user: &str, password: &str) {
    let r = Sipp::new(Scenario::File("register_unavailable.xml"))
        .service(user)
        .port(free_port())
        .arg("-au")
        .arg(user)
        .arg("-ap")
        .arg(password)
        .run(s.sip, s.dir.path());
    r.assert_ok(1);
    assert!(
        r.received().iter().all(|m| m.status() != Some(200)),
        "no 200 for a REGISTER that could not be stored\n{}",
        r.evidence()
    );
    assert_eq!(finals(&r).len(), 1, "{}", r.evidence());
}

/// 1001 registers and is called; the backend is killed: REGISTER gets 503 + Retry-After, a call
/// to 1001 still reaches it (the read cache); the backend is started again on the same port:
/// REGISTER works again without restarting strowger, and a second strowger (no cache of its
/// own) reaches 1001 through the backend, so nothing stored before was lost.
fn outage(label: &str, mut server: Server, dir: &TempDir) {
    let config = write_config(dir.path(), &server.url);
    let s = start(label, &config);
    let (a, b) = (free_port(), free_port());
    registered(&s, "1001", "secret-1001", a);
    call_phone(&s, "1001", a, 1);

    server.kill();
    register_refused(&s, "1002", "secret-1002");
    register_refused(&s, "1001", "secret-1001");
    call_phone(&s, "1001", a, 2);

    server.start();
    registered(&s, "1002", "secret-1002", b);
    call_phone(&s, "1002", b, 3);
    call_phone(&s, "1001", a, 4);
    let fresh = start(&format!("{label}-fresh"), &config);
    call_phone(&fresh, "1001", a, 1);
    call_phone(&fresh, "1002", b, 2);
}

/// Redis keeps its data through the SIGKILL (append-only file, fsync on every write).
#[test]
fn redis_killed_and_restarted() {
    let dir = TempDir::new("store-outage-redis");
    let redis = Server::redis_durable(dir.path());
    outage("store-outage-redis", redis, &dir);
}

/// memcached comes back empty: strowger writes back the registrations and users it knows.
#[test]
fn memcached_killed_and_restarted() {
    let dir = TempDir::new("store-outage-memcached");
    outage("store-outage-memcached", Server::memcached(), &dir);
}

/// Two strowger instances on one Redis: a phone registered through either one is reached
/// through the other, and an un-REGISTER through one is seen by the other (480).
#[test]
fn two_instances_share_one_redis() {
    let dir = TempDir::new("store-shared-redis");
    let redis = Server::redis();
    let config = write_config(dir.path(), &redis.url);
    let one = start("store-shared-one", &config);
    let two = start("store-shared-two", &config);
    let (a, b) = (free_port(), free_port());
    registered(&one, "1001", "secret-1001", a);
    registered(&two, "1002", "secret-1002", b);
    call_phone(&two, "1001", a, 1);
    call_phone(&one, "1002", b, 1);

    Sipp::new(Scenario::File("unregister.xml"))
        .service("1001")
        .port(a)
        .arg("-au")
        .arg("1001")
        .arg("-ap")
        .arg("secret-1001")
        .run(one.sip, one.dir.path())
        .assert_ok(1);
    assert_eq!(
        invite_status(&two, "1001"),
        Some(480),
        "unregistered via one"
    );
}

/// `strowger user …` against `store`: add, list, passwd (an unknown user is refused), then a
/// strowger on that store accepts the new password and refuses the old one; del, and del again
/// is refused. On a network store the strowger runs during passwd, having just checked the
/// old password: it still accepts the new one at once.
fn user_cli(label: &str, store: &str, dir: &TempDir) {
    let cli = |args: &[&str]| {
        let mut all = vec!["user"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--store", store]);
        let out = run_cli(&all, dir.path());
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let dom = ["--domain", "strowger"];
    let settings = [
        "--context",
        "default",
        "--caller-id",
        "\"Two\" <2001>",
        "--max-calls",
        "2",
        "--allow",
        "^9",
    ];
    let (ok, out) = cli(&[
        &["add", "2001", "--password", "old-2001"][..],
        &dom,
        &settings,
    ]
    .concat());
    assert!(ok && out.contains("2001@strowger: added"), "{out}");
    let listed = "2001@strowger  context=default  caller_id=\"Two\" <2001>  max_calls=2  allow=^9";
    let (ok, out) = cli(&["list"]);
    assert!(ok && out.lines().any(|l| l == listed), "{out}");
    let (ok, out) = cli(&[
        &["add", "2002", "--password", "x", "--context", "nowhere"][..],
        &dom,
    ]
    .concat());
    assert!(!ok && out.contains("no such dialplan context"), "{out}");
    let config = write_config(dir.path(), store);
    let port = free_port();
    let running = (!store.starts_with("local:")).then(|| {
        let s = start(label, &config);
        registered(&s, "2001", "old-2001", port);
        s
    });
    let (ok, out) = cli(&[&["passwd", "2001", "--password", "new-2001"][..], &dom].concat());
    assert!(ok && out.contains("password changed"), "{out}");
    let (ok, out) = cli(&["list"]);
    assert!(
        ok && out.lines().any(|l| l == listed),
        "passwd keeps the settings: {out}"
    );
    let (ok, out) = cli(&[&["passwd", "2999", "--password", "x"][..], &dom].concat());
    assert!(!ok && out.contains("no such user"), "{out}");

    let mut s = running.unwrap_or_else(|| start(label, &config));
    registered(&s, "2001", "new-2001", port);
    let old = register(&s, "2001", "old-2001", free_port());
    assert!(
        finals(&old).iter().all(|m| m.status() == Some(403)),
        "the old password is refused\n{}",
        old.evidence()
    );
    s.stop();

    let (ok, out) = cli(&[&["del", "2001"][..], &dom].concat());
    assert!(ok && out.contains("2001@strowger: removed"), "{out}");
    let (ok, out) = cli(&["list"]);
    assert!(ok && !out.contains("2001@"), "{out}");
    let (ok, out) = cli(&[&["del", "2001"][..], &dom].concat());
    assert!(!ok && out.contains("no such user"), "{out}");
}

#[test]
fn user_command_local_store() {
    let dir = TempDir::new("store-users-local");
    let store = format!("local:{}", dir.path().join("store.snap").display());
    user_cli("store-users-local", &store, &dir);
}

#[test]
fn user_command_redis() {
    let dir = TempDir::new("store-users-redis");
    let redis = Server::redis();
    user_cli("store-users-redis", &redis.url, &dir);
}

#[test]
fn user_command_memcached() {
    let dir = TempDir::new("store-users-memcached");
    let mc = Server::memcached();
    user_cli("store-users-memcached", &mc.url, &dir);
}

/// A three-node Redis Cluster (`redis+cluster://`): users managed with `strowger user`, phones
/// registered and called through two strowger instances, their bindings spread over the nodes.
#[test]
fn redis_cluster_register_and_call() {
    let dir = TempDir::new("store-cluster");
    let cluster = RedisCluster::start(dir.path());
    user_cli("store-cluster-users", &cluster.url, &dir);

    let config = write_config(dir.path(), &cluster.url);
    let one = start("store-cluster-one", &config);
    let two = start("store-cluster-two", &config);
    let (a, b) = (free_port(), free_port());
    registered(&one, "1001", "secret-1001", a);
    registered(&one, "1002", "secret-1002", b);
    call_phone(&two, "1001", a, 1);
    call_phone(&two, "1002", b, 2);
    assert_eq!(invite_status(&two, "1999"), Some(404), "1999 is no user");

    // The keys are spread over the cluster: more than one node holds some.
    let holding = cluster
        .nodes
        .iter()
        .filter(|n| {
            let out = std::process::Command::new("redis-cli")
                .args(["-p", &n.port.to_string(), "dbsize"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim() != "0"
        })
        .count();
    assert!(holding >= 2, "keys on {holding} node(s) of 3");
}

//! The location store under failure and shared between instances, with real servers on free
//! loopback ports: Redis or Memcached killed mid-test and started again on the same port, two
//! strowger instances on one Redis, and a three-node Redis Cluster.

mod common;

use common::net::free_port;
use common::registrar::{call_phone, finals, invite_status, registered, start, write_config};
use common::servers::Server;
use common::sipp::{Scenario, Sipp};
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

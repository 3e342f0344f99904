//! The store backends against real servers: redis-server and memcached started here on free
//! loopback ports (scripts/setup.sh installs them), including a restart of the server mid-test.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use store::{Binding, Change, Claim, Credentials, Store};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_listening(port: u16) {
    let until = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < until,
            "server on port {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start(kind: &str, port: u16) -> Option<Server> {
    let mut cmd = match kind {
        "redis" => {
            let mut c = Command::new("redis-server");
            c.args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]);
            c
        }
        _ => {
            let mut c = Command::new("memcached");
            c.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"]);
            if unsafe_is_root() {
                c.args(["-u", "root"]);
            }
            c
        }
    };
    let child = cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    match child {
        Ok(child) => {
            wait_listening(port);
            Some(Server { child })
        }
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "{kind}: {e}; run scripts/setup.sh to install redis-server and memcached"
            );
            eprintln!("skipping: {kind} not installed ({e}); run scripts/setup.sh");
            None
        }
    }
}

fn unsafe_is_root() -> bool {
    std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"))
}

fn binding(contact: &str, expires_at: u64) -> Binding {
    Binding {
        contact: contact.into(),
        expires_at,
        q: 1000,
        received: "127.0.0.1:5070".parse().unwrap(),
        transport: "udp".into(),
        path: vec!["<sip:edge.example;lr>".into()],
        instance: Some("<urn:uuid:1>".into()),
        reg_id: Some(1),
        call_id: "c@x".into(),
        cseq: 7,
    }
}

fn exercise(s: &dyn Store) {
    let t = now();
    let alice = Credentials {
        user: "alice".into(),
        domain: "example.com".into(),
        ha1_md5: "md5".into(),
        ha1_sha256: "sha".into(),
        // Per-user call settings travel with the credentials in every backend.
        context: Some("office".into()),
        caller_id: Some("\"Alice\" <1001>".into()),
        max_calls: 2,
        allow: vec!["^1\\d{3}$".into(), "^9196$".into()],
        forward: store::Forwarding::default(),
        record_calls: Some("stereo,opus".into()),
        dtmf: Some("info".into()),
    };
    s.put_user(&alice).unwrap();
    s.put_user(&Credentials {
        user: "bob".into(),
        ..alice.clone()
    })
    .unwrap();
    assert_eq!(s.user("alice", "example.com").unwrap(), Some(alice.clone()));
    // Forwarding set from a phone is kept with the user's record, its other settings intact.
    let busy = Some(store::Forward::Busy);
    assert!(s
        .set_forward("alice", "example.com", busy, Some("2001"))
        .unwrap());
    let read = s.user("alice", "example.com").unwrap().unwrap();
    assert_eq!(read.forward.target(store::Forward::Busy), Some("2001"));
    assert_eq!(read.allow, alice.allow);
    assert!(s.set_forward("alice", "example.com", None, None).unwrap());
    assert!(!s
        .set_forward("carol", "example.com", busy, Some("1"))
        .unwrap());
    assert_eq!(s.user("carol", "example.com").unwrap(), None);
    let names: Vec<String> = s.users().unwrap().into_iter().map(|c| c.user).collect();
    assert_eq!(names, ["alice", "bob"]);
    assert!(s.del_user("bob", "example.com").unwrap());
    assert!(!s.del_user("bob", "example.com").unwrap());

    let a = binding("sip:a@10.0.0.1", t + 60);
    let mut b = binding("sip:b@10.0.0.2", t + 2);
    b.instance = None;
    let l = s
        .update(
            "alice@example.com",
            &[Change::Put(a.clone()), Change::Put(b.clone())],
            t,
        )
        .unwrap();
    assert_eq!(l.len(), 2);
    // In no particular order (a Redis hash has none).
    let mut l = s.lookup("alice@example.com", t).unwrap();
    l.sort_by(|x, y| x.contact.cmp(&y.contact));
    assert_eq!(l, vec![a.clone(), b.clone()]);
    // A lapsed binding is not returned.
    assert_eq!(
        s.lookup("alice@example.com", t + 5).unwrap(),
        vec![a.clone()]
    );
    // The same RFC 5626 flow (instance and reg-id) from a new contact replaces the old one; the
    // same instance with another reg-id is another flow.
    let a2 = binding("sip:a2@10.0.0.3", t + 60);
    let mut a3 = binding("sip:a3@10.0.0.4", t + 60);
    a3.reg_id = Some(2);
    let l = s
        .update(
            "alice@example.com",
            &[Change::Put(a2.clone()), Change::Put(a3.clone())],
            t,
        )
        .unwrap();
    let mut contacts: Vec<&str> = l.iter().map(|b| b.contact.as_str()).collect();
    contacts.sort_unstable();
    assert_eq!(
        contacts,
        ["sip:a2@10.0.0.3", "sip:a3@10.0.0.4", "sip:b@10.0.0.2"]
    );
    // Changes apply in order; a binding lapsed by now is dropped.
    let l = s
        .update(
            "alice@example.com",
            &[
                Change::Remove {
                    contact: "sip:a2@10.0.0.3".into(),
                },
                Change::Remove {
                    contact: "sip:a3@10.0.0.4".into(),
                },
                Change::Put(a.clone()),
                Change::Remove {
                    contact: "sip:a@10.0.0.1".into(),
                },
            ],
            t,
        )
        .unwrap();
    assert_eq!(l, vec![b.clone()]);
    assert!(s
        .update("alice@example.com", &[], t + 5)
        .unwrap()
        .is_empty());
    s.update("alice@example.com", &[Change::Put(b.clone())], t)
        .unwrap();
    let l = s
        .update("alice@example.com", &[Change::RemoveAll], t)
        .unwrap();
    assert!(l.is_empty());
    assert!(s.lookup("alice@example.com", t).unwrap().is_empty());
}

/// `Change::Limit`: over the limit, `Refuse` applies nothing of the change set (a refresh that
/// adds nothing still passes) and `ReplaceOldest` drops the bindings that lapse first, never one
/// the change set put; two clients of one backend (`other`) cannot both add the last one.
fn limits(s: &dyn Store, other: &dyn Store) {
    use store::Overflow::{Refuse, ReplaceOldest};
    let t = now();
    let at = |c: &str, until: u64| {
        let mut b = binding(c, until);
        b.instance = None;
        b
    };
    let contacts = |l: &[Binding]| {
        let mut v: Vec<String> = l.iter().map(|b| b.contact.clone()).collect();
        v.sort();
        v
    };
    let limit = |max, overflow| Change::Limit { max, overflow };
    for k in 0..3 {
        let b = at(&format!("sip:{k}@x"), t + 60 + k);
        let l = s
            .update("lim@x", &[Change::Put(b), limit(3, Refuse)], t)
            .unwrap();
        assert_eq!(l.len(), k as usize + 1);
    }
    let l = other
        .update(
            "lim@x",
            &[Change::Put(at("sip:3@x", t + 90)), limit(3, Refuse)],
            t,
        )
        .unwrap();
    assert_eq!(contacts(&l), ["sip:0@x", "sip:1@x", "sip:2@x"], "refused");
    // A refresh, and a swap of one contact for another, stay within the limit.
    let swap = [
        Change::Remove {
            contact: "sip:0@x".into(),
        },
        Change::Put(at("sip:1@x", t + 70)),
        Change::Put(at("sip:4@x", t + 70)),
        limit(3, Refuse),
    ];
    let l = s.update("lim@x", &swap, t).unwrap();
    assert_eq!(contacts(&l), ["sip:1@x", "sip:2@x", "sip:4@x"]);
    // Lowered to 2: a refresh that adds nothing passes, a new contact does not.
    let l = s
        .update(
            "lim@x",
            &[Change::Put(at("sip:2@x", t + 80)), limit(2, Refuse)],
            t,
        )
        .unwrap();
    assert_eq!(l.len(), 3);
    let l = s
        .update(
            "lim@x",
            &[Change::Put(at("sip:5@x", t + 80)), limit(2, Refuse)],
            t,
        )
        .unwrap();
    assert_eq!(contacts(&l), ["sip:1@x", "sip:2@x", "sip:4@x"]);
    // Replace the oldest: sip:1 and sip:4 lapse first (t+70), sip:2 at t+80.
    let l = other
        .update(
            "lim@x",
            &[Change::Put(at("sip:6@x", t + 10)), limit(2, ReplaceOldest)],
            t,
        )
        .unwrap();
    assert_eq!(contacts(&l), ["sip:2@x", "sip:6@x"], "the new one stays");
    assert_eq!(
        contacts(&s.lookup("lim@x", t).unwrap()),
        ["sip:2@x", "sip:6@x"]
    );
    s.update("lim@x", &[Change::RemoveAll], t).unwrap();
}

/// Two clients of one server, each acting on what it last saw of an AOR while the other
/// changes it: no change is lost, and a removal of everything is seen by both.
fn shared(one: &dyn Store, two: &dyn Store) {
    let t = now();
    let at = |c: &str| {
        let mut b = binding(c, t + 60);
        b.instance = None;
        b
    };
    let (a, bb, c) = (at("sip:a@1"), at("sip:b@2"), at("sip:c@3"));
    let contacts = |l: Vec<Binding>| {
        let mut v: Vec<String> = l.into_iter().map(|b| b.contact).collect();
        v.sort();
        v
    };
    one.update("s@x", &[Change::Put(a)], t).unwrap();
    two.update("s@x", &[Change::Put(bb)], t).unwrap();
    let l = one.update("s@x", &[Change::Put(c)], t).unwrap();
    assert_eq!(contacts(l), ["sip:a@1", "sip:b@2", "sip:c@3"]);
    let l = two
        .update(
            "s@x",
            &[Change::Remove {
                contact: "sip:b@2".into(),
            }],
            t,
        )
        .unwrap();
    assert_eq!(contacts(l), ["sip:a@1", "sip:c@3"]);
    two.update("s@x", &[Change::RemoveAll], t).unwrap();
    let l = one
        .update(
            "s@x",
            &[Change::Remove {
                contact: "sip:a@1".into(),
            }],
            t,
        )
        .unwrap();
    assert!(l.is_empty(), "{l:?}");
    assert!(one.lookup("s@x", t).unwrap().is_empty());
}

/// Two nodes' claims on one backend: the first free name, renewed by its holder, refused to
/// another with the holder named, given up only by its holder, free once lapsed; the key
/// itself goes with its last claim.
fn claims(one: &dyn Store, two: &dyn Store) {
    let (a, b) = (one.claims().unwrap(), two.claims().unwrap());
    let t = now();
    let lot = "park:default";
    let slots: Vec<String> = vec!["701".into(), "702".into()];
    let taken = |n: &str| Claim::Taken(n.into());
    assert_eq!(a.claim(lot, &slots, "sip:a", t, 60).unwrap(), taken("701"));
    assert_eq!(b.claim(lot, &slots, "sip:b", t, 60).unwrap(), taken("702"));
    let held = b.claim(lot, &slots, "sip:c", t, 60).unwrap();
    assert_eq!(
        held,
        Claim::Held("sip:a".into()),
        "both held: the first one's holder"
    );
    assert_eq!(
        a.claim(lot, &slots, "sip:b", t, 60).unwrap(),
        taken("702"),
        "renewed"
    );
    assert_eq!(b.holder(lot, "701", t).unwrap(), Some("sip:a".into()));
    b.release(lot, "701", "sip:b").unwrap();
    assert_eq!(
        b.holder(lot, "701", t).unwrap(),
        Some("sip:a".into()),
        "not b's"
    );
    a.release(lot, "701", "sip:a").unwrap();
    assert_eq!(b.holder(lot, "701", t).unwrap(), None);
    let later = b.claim(lot, &slots[1..], "sip:c", t + 61, 60).unwrap();
    assert_eq!(later, taken("702"), "b's claim lapsed");
    let room = vec!["8000".to_string()];
    assert_eq!(
        a.claim("room:8000", &room, "sip:a", t, 1).unwrap(),
        taken("8000")
    );
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(
        b.holder("room:8000", "8000", t).unwrap(),
        None,
        "the key expired"
    );
    let roster = "queue:support";
    a.enrol(roster, "1002", true).unwrap();
    b.enrol(roster, "1001", true).unwrap();
    b.enrol(roster, "1002", false).unwrap();
    let want = vec![("1001".to_string(), true), ("1002".to_string(), false)];
    assert_eq!(
        a.roster(roster).unwrap(),
        want,
        "each member's last state, by name"
    );
    assert!(a.roster("queue:none").unwrap().is_empty());
}

/// Stops the server: writes fail (never a fake success), reads of what this process saw come
/// from the read cache and anything else fails; starts it again, empty, on the same port:
/// operations work again without anything being reopened, and what the server lost is back.
fn survive_restart(kind: &str, port: u16, server: Server, s: &dyn Store) -> Server {
    let t = now();
    let x = binding("sip:x@1.1.1.1", t + 60);
    let mut z = binding("sip:z@1.1.1.1", t + 60);
    z.instance = None;
    s.update("x@y", &[Change::Put(x.clone())], t).unwrap();
    drop(server);
    assert!(s.update("x@y", &[Change::Put(z.clone())], t).is_err());
    assert_eq!(s.lookup("x@y", t).unwrap(), vec![x.clone()], "cached");
    assert!(s.lookup("never@seen", t).is_err());
    assert!(s.user("alice", "example.com").unwrap().is_some(), "cached");
    assert!(s.user("dave", "example.com").is_err());
    let e = s.users().unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(
        e.to_string().contains(&port.to_string()),
        "error names the server: {e}"
    );
    let server = start(kind, port).unwrap();
    let l = s.update("x@y", &[Change::Put(z)], t).unwrap();
    assert_eq!(
        l.len(),
        2,
        "the binding the empty server lost is back: {l:?}"
    );
    let names: Vec<String> = s.users().unwrap().into_iter().map(|c| c.user).collect();
    assert_eq!(names, ["alice"], "and the user");
    server
}

#[test]
fn redis_backend() {
    let port = free_port();
    let Some(server) = start("redis", port) else {
        return;
    };
    let s = store::open(&format!("redis://127.0.0.1:{port}")).unwrap();
    exercise(&*s);
    let other = store::open(&format!("redis://127.0.0.1:{port}")).unwrap();
    limits(&*s, &*other);
    shared(&*s, &*other);
    claims(&*s, &*other);
    let _server = survive_restart("redis", port, server, &*s);
}

#[test]
fn memcached_backend() {
    let port = free_port();
    let Some(server) = start("memcached", port) else {
        return;
    };
    let s = store::open(&format!("memcached://127.0.0.1:{port}")).unwrap();
    exercise(&*s);
    let other = store::open(&format!("memcached://127.0.0.1:{port}")).unwrap();
    limits(&*s, &*other);
    shared(&*s, &*other);
    assert!(
        s.claims().is_none(),
        "no atomic first-free-of-many on memcached"
    );
    let _server = survive_restart("memcached", port, server, &*s);
}

#[test]
fn local_backend() {
    let dir = std::env::temp_dir().join(format!("strowger-backends-{}", std::process::id()));
    let path = dir.join("store.snap");
    let s = store::open(&format!("local:{}", path.display())).unwrap();
    exercise(&*s);
    limits(&*s, &*s);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn down_at_start_is_an_error_not_a_hang() {
    let port = free_port();
    let s = store::open(&format!("redis://127.0.0.1:{port}")).unwrap();
    assert!(s.lookup("a@b", now()).unwrap_err().is_unavailable());
    let s = store::open(&format!("memcached://127.0.0.1:{port}")).unwrap();
    assert!(s.lookup("a@b", now()).unwrap_err().is_unavailable());
}

/// The pipe as a worker drives it, over a plain connection: a user read, bindings written over
/// an absent value and over the value last seen, a value another instance changed refused
/// (nothing written, the other's change kept), and a delete left to the blocking path.
#[test]
fn memcached_pipe() {
    use std::io::{Read, Write};
    use store::pipe::{reply, Answer, Ask};
    let port = free_port();
    let Some(_server) = start("memcached", port) else {
        return;
    };
    let url = format!("memcached://127.0.0.1:{port}");
    let (s, other) = (store::open(&url).unwrap(), store::open(&url).unwrap());
    let p = s.pipe().expect("memcached takes asks over a pipe");
    let mut conn = std::net::TcpStream::connect(p.addr()).unwrap();
    let mut ask = |a: &Ask| -> Option<Answer> {
        let mut out = Vec::new();
        let pending = p.begin(a, &mut out)?;
        conn.write_all(&out).unwrap();
        let mut buf = Vec::new();
        loop {
            if let Some((r, n)) = reply(&buf) {
                assert_eq!(n, buf.len(), "one reply per request");
                return p.finish(pending, r);
            }
            let mut chunk = [0u8; 4096];
            let n = conn.read(&mut chunk).unwrap();
            assert!(n > 0, "memcached closed the connection");
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let alice = Credentials {
        user: "alice".into(),
        domain: "x".into(),
        ha1_md5: "m".into(),
        ha1_sha256: "s".into(),
        context: Some("office".into()),
        max_calls: 1,
        ..Credentials::default()
    };
    s.put_user(&alice).unwrap();
    let user = |u: &str| Ask::User {
        user: u.into(),
        domain: "x".into(),
    };
    assert_eq!(ask(&user("alice")), Some(Answer::User(Some(alice))));
    assert_eq!(ask(&user("bob")), Some(Answer::User(None)));

    let t = now();
    let own = |c: &str| Binding {
        instance: None,
        reg_id: None,
        ..binding(c, t + 60)
    };
    let put = |c: &str| Ask::Update {
        aor: "alice@x".into(),
        changes: vec![Change::Put(own(c))],
        now: t,
    };
    let (b1, b2, b3) = (own("sip:a@h1"), own("sip:a@h2"), own("sip:a@h3"));
    assert_eq!(
        ask(&put("sip:a@h1")),
        Some(Answer::Bindings(vec![b1.clone()]))
    );
    assert_eq!(
        s.lookup("alice@x", t).unwrap(),
        std::slice::from_ref(&b1),
        "stored"
    );
    assert_eq!(
        ask(&put("sip:a@h2")),
        Some(Answer::Bindings(vec![b1.clone(), b2.clone()])),
        "over the value last seen: one compare-and-set"
    );
    other
        .update("alice@x", &[Change::Put(b3.clone())], t)
        .unwrap();
    assert_eq!(ask(&put("sip:a@h4")), None, "changed elsewhere: refused");
    assert_eq!(
        s.lookup("alice@x", t).unwrap(),
        [b1, b2, b3],
        "the other instance's change stands, nothing of the refused one"
    );
    let remove = Ask::Update {
        aor: "alice@x".into(),
        changes: vec![Change::RemoveAll],
        now: t,
    };
    let mut out = Vec::new();
    assert!(p.begin(&remove, &mut out).is_none() && out.is_empty());
}

//! Tests that send hostile or third-party traffic run inside a network namespace with nothing
//! but loopback: the outer test re-runs this test binary's ignored inner test under `unshare -n`
//! (root), and the inner test refuses to run anywhere else.

use std::process::Command;

const NETNS_ENV: &str = "STROWGER_TEST_IN_NETNS";

/// Runs this binary's test `inner` inside `unshare -n` with loopback up, and checks it passed.
pub fn in_private_netns(inner: &str) {
    in_unshared("-n", "ip link set lo up && ", inner);
}

/// Runs this binary's test `inner` inside `unshare -mn`: loopback alone as above, and mounts
/// private to it and the processes it starts (a small tmpfs standing for a full disk).
pub fn in_private_mount_ns(inner: &str) {
    in_unshared("-mn", "ip link set lo up && ", inner);
}

/// Runs test `inner` inside `unshare FLAG`, after the shell command `setup`.
fn in_unshared(flag: &str, setup: &str, inner: &str) {
    let out = Command::new("unshare")
        .args([
            flag,
            "--",
            "sh",
            "-c",
            &format!("{setup}exec \"$0\" \"$@\""),
        ])
        .arg(std::env::current_exe().unwrap())
        .args([
            // A filter, not --exact: in the one test binary the test's name has its module
            // in front; the check below that exactly one test passed keeps it unambiguous.
            inner,
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NETNS_ENV, "1")
        .output()
        .expect("run unshare (util-linux; needs root)");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(
        out.status.success(),
        "{inner} inside the namespace failed ({}):\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "the inner test did not run:\n{text}"
    );
}

/// An inner test's first line: it runs only inside the namespace the outer test made, where
/// `lo` is the only interface.
pub fn assert_isolated() {
    assert_eq!(
        std::env::var(NETNS_ENV).as_deref(),
        Ok("1"),
        "run through the outer test (unshare -n)"
    );
    let devs = std::fs::read_to_string("/proc/self/net/dev").unwrap();
    let ifaces: Vec<&str> = devs
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, ["lo"], "only loopback may exist here");
}

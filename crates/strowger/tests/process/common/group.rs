//! Helper programs that fork (Kamailio, dnsmasq) run in a process group of their own, so the
//! whole group can be stopped when the test ends.

use super::{read_text, tail, wait_for};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A helper process in a process group of its own (Kamailio forks its workers), the whole
/// group stopped on drop, its output in a file.
pub struct Proc {
    child: Child,
    name: &'static str,
    log: std::path::PathBuf,
}

impl Proc {
    pub fn spawn(name: &'static str, cmd: &mut Command, dir: &Path) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        use std::os::unix::process::CommandExt;
        let child = cmd
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} (run scripts/setup.sh): {e}"));
        Proc { child, name, log }
    }

    pub fn log(&self) -> String {
        read_text(&self.log)
    }

    pub fn assert_alive(&mut self) {
        if let Ok(Some(st)) = self.child.try_wait() {
            panic!("{} exited ({st}):\n{}", self.name, tail(&self.log(), 30));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        // SIGTERM lets Kamailio's main process stop its children; SIGKILL to the group then
        // ends whatever is left.
        let group = -(self.child.id() as i32);
        // SAFETY: kill(2) on the process group this test started.
        unsafe { libc::kill(group, libc::SIGTERM) };
        let _ = wait_for(Duration::from_secs(3), || {
            self.child.try_wait().ok().flatten()
        });
        // SAFETY: as above.
        unsafe { libc::kill(group, libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

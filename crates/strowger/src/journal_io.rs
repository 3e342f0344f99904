//! The files of the journals of calls in progress (`switch::journal`): one per worker, next to
//! the CDR file (`cdr.jsonl.journal-0`, …). A worker appends each batch of notes before the SIP messages of the same batch leave; on
//! start the journals a previous run left are turned into CDRs and removed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use switch::journal::{recover, Write as JournalWrite};

/// The journal of worker `worker`, beside the CDR file `cdr`.
pub fn path(cdr: &Path, worker: usize) -> PathBuf {
    let mut name = cdr.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".journal-{worker}"));
    cdr.with_file_name(name)
}

/// Writes a CDR (with the node-failure disposition) for every call the journals beside `cdr`
/// left open — the previous run was killed — through `write` (the CDR file and database), then
/// removes the journals. Returns how many calls were recovered.
pub fn recover_left_open(cdr: &Path, mut write: impl FnMut(String)) -> usize {
    let dir = match cdr.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Some(prefix) = path(cdr, 0)
        .file_name()
        .and_then(|n| n.to_str())
        .map(|n| n.trim_end_matches('0').to_string())
    else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut recovered = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(&prefix)) else {
            continue;
        };
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let file = e.path();
        let text = match std::fs::read(&file) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(err) => {
                tracing::error!(
                    "cannot read the call journal {}: {err} — the calls it held get no CDR",
                    file.display()
                );
                continue;
            }
        };
        for c in recover(&text) {
            write(c.to_json());
            recovered += 1;
        }
        // The CDRs are out (a database stores each once, however often this runs): reset.
        if let Err(err) = std::fs::remove_file(&file) {
            tracing::error!(
                "cannot remove the call journal {}: {err} (remove it by hand, or its calls get a second CDR line in the file on the next start)",
                file.display()
            );
        }
    }
    if recovered > 0 {
        tracing::warn!(
            "{recovered} call(s) were up when this node last stopped without hanging them up: their CDRs are written with the disposition \"{}\"",
            switch::journal::NODE_FAILURE
        );
    }
    recovered
}

/// A worker's journal file.
pub struct JournalFile {
    path: PathBuf,
    file: Option<File>,
    /// A failure to write is logged once.
    failed: bool,
}

impl JournalFile {
    pub fn new(path: PathBuf) -> JournalFile {
        JournalFile {
            path,
            file: None,
            failed: false,
        }
    }

    /// Appends a batch of notes (one write(2): in the kernel, it survives the process being
    /// killed), or replaces the file with a compacted one.
    pub fn write(&mut self, w: JournalWrite) {
        let done = match w {
            JournalWrite::Append(s) => self.append(s),
            JournalWrite::Replace(s) => self.replace(s),
        };
        if let Err(e) = done {
            if !std::mem::replace(&mut self.failed, true) {
                tracing::error!(
                    "cannot write the call journal {}: {e} — if this node is killed its calls get no CDR (check the disk, or general.cdr's directory)",
                    self.path.display()
                );
            }
            self.file = None;
        }
    }

    fn append(&mut self, b: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            self.file = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        match self.file.as_mut() {
            Some(f) => f.write_all(b),
            None => Ok(()),
        }
    }

    /// Written aside and renamed over the journal: a kill at any point leaves one whole file.
    fn replace(&mut self, b: &[u8]) -> std::io::Result<()> {
        let mut aside = self.path.clone().into_os_string();
        aside.push(".new");
        std::fs::write(&aside, b)?;
        std::fs::rename(&aside, &self.path)?;
        self.file = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journals_left_behind_become_cdrs_once() {
        let dir = std::env::temp_dir().join(format!("strowger-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cdr = dir.join("cdr.jsonl");
        let mut j = switch::journal::Journal::default();
        j.opened(
            3,
            &switch::cdr::Cdr {
                call_id: "a@b".into(),
                start: 50.0,
                ..Default::default()
            },
        );
        j.answered(3, 51.0);
        let mut f = JournalFile::new(path(&cdr, 1));
        j.take(52_000, |_| {}, |w| f.write(w));
        std::fs::write(dir.join("cdr.jsonl.journal-x"), "not a journal").unwrap();
        let mut lines = Vec::new();
        assert_eq!(recover_left_open(&cdr, |l| lines.push(l)), 1);
        assert!(lines[0].contains("\"call_id\":\"a@b\""), "{}", lines[0]);
        assert!(lines[0].contains("\"billable_s\":1.0"), "{}", lines[0]);
        assert!(!path(&cdr, 1).exists(), "the journal is reset");
        assert_eq!(recover_left_open(&cdr, |l| lines.push(l)), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

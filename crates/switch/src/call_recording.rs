//! Recording whole calls in the background (`record-call`, the `RECORD_CALLS` variable, a
//! user's `record_calls`): the caller's media leg is tapped (media's `Engine::record_call`),
//! the shell's writer thread gets the other end with [`Event::RecordCall`], and the CDR says
//! which file, how long, and whether it is complete.

use std::sync::Arc;
use std::time::Instant;

use media::{FileFormat, Mix, RecordingStatus};

use crate::call::Call;
use crate::engine::Engine;
use crate::io::Event;

/// The variable that records the calls that set it (or inherit it from their user), with
/// the same value as a user's `record_calls`.
pub const RECORD_CALLS: &str = "RECORD_CALLS";

/// A call's recording under way.
#[derive(Debug)]
pub(crate) struct Recorded {
    file: String,
    status: Arc<RecordingStatus>,
}

/// How a call is recorded: `mono` or `stereo`, optionally with `,opus` or `,wav`
/// (`RECORD_CALLS=stereo,opus`); `off` (or empty) records nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordCalls {
    pub mix: Mix,
    pub format: FileFormat,
}

impl RecordCalls {
    pub fn parse(value: &str) -> Result<Option<RecordCalls>, String> {
        if matches!(value.trim(), "" | "off") {
            return Ok(None);
        }
        let mut out = RecordCalls {
            mix: Mix::Mono,
            format: FileFormat::Wav,
        };
        for part in value.split(',').map(str::trim) {
            match (parse_mix(part), parse_format(part)) {
                (Ok(m), _) => out.mix = m,
                (_, Ok(f)) => out.format = f,
                _ => {
                    return Err(format!(
                        "{value:?} — expected mono or stereo, optionally with \",opus\" or \",wav\" (or off)"
                    ))
                }
            }
        }
        Ok(Some(out))
    }
}

/// `record-call mix=`.
pub(crate) fn parse_mix(v: &str) -> Result<Mix, String> {
    match v {
        "mono" => Ok(Mix::Mono),
        "stereo" => Ok(Mix::Stereo),
        other => Err(format!("{other:?} — expected mono or stereo")),
    }
}

/// `record-call format=`.
pub(crate) fn parse_format(v: &str) -> Result<FileFormat, String> {
    match v {
        "wav" => Ok(FileFormat::Wav),
        "opus" => Ok(FileFormat::Opus),
        other => Err(format!("{other:?} — expected wav or opus")),
    }
}

/// A file name from a Call-ID: characters other than letters, digits, `-`, `_`, `.` and `@`
/// become `_`, so no Call-ID names a path outside the recordings' directory.
pub(crate) fn file_name(call_id: &str) -> String {
    call_id
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' | '@' => c,
            _ => '_',
        })
        .collect()
}

impl Engine {
    /// Starts recording call `call` to `file` (relative to the data directory), replacing a
    /// recording under way; the steps go on at once.
    pub(crate) fn record_call(
        &mut self,
        call: usize,
        file: String,
        mix: Mix,
        format: FileFormat,
        now: Instant,
    ) {
        // A Call-ID or caller in the name must not lead it out of its directory.
        if std::path::Path::new(&file)
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            let msg = format!("record-call {file}: a file name with \"..\" is refused (check the record-call step's variables); the call is not recorded");
            return self.warn_call(call, msg);
        }
        // The caller's media leg, made now if the call is not answered yet.
        let media = self.ensure_media(call, Call::CALLER, now);
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let (true, Some(m)) = (media, c.caller().media) else {
            let msg = format!("record-call {file}: the call has no media to record");
            return self.warn_call(call, msg);
        };
        let Some(recording) = self.media.record_call(m, mix, now) else {
            return;
        };
        let c = &mut self.calls[call];
        c.call_recording = Some(Box::new(Recorded {
            file: file.clone(),
            status: recording.status.clone(),
        }));
        self.events.push_back(Event::RecordCall {
            name: file,
            format,
            recording,
        });
    }

    /// Before a step: starts the recording `RECORD_CALLS` asks for, once (an unknown value is
    /// reported and then ignored).
    pub(crate) fn record_if_asked(&mut self, call: usize, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        if c.call_recording.is_some() {
            return;
        }
        let Some(value) = c.vars.get(RECORD_CALLS) else {
            return;
        };
        match RecordCalls::parse(value) {
            Ok(None) => {}
            Ok(Some(how)) => {
                let name = format!(
                    "calls/{}.{}",
                    file_name(c.caller().call_id()),
                    how.format.extension()
                );
                self.record_call(call, name, how.mix, how.format, now);
            }
            Err(e) => {
                c.vars.set(RECORD_CALLS, "off");
                let msg = format!("{RECORD_CALLS}={e} (set in the dialplan, or the user's record_calls); the call is not recorded");
                self.warn_call(call, msg);
            }
        }
    }

    /// The call ends: its recording's last audio goes to the writer, and the CDR says which
    /// file, how long and whether complete.
    pub(crate) fn end_call_recording(&mut self, c: &mut Call, now: Instant) {
        let Some(r) = c.call_recording.take() else {
            return;
        };
        if let Some(m) = c.caller().media {
            self.media.stop_call_recording(m, now);
        }
        into_cdr(c, *r);
    }

    /// Stops call `call`'s recording while the call goes on (the API's `DELETE .../record`);
    /// false if it had none.
    pub(crate) fn stop_call_recording(&mut self, call: usize, now: Instant) -> bool {
        let Some(c) = self.calls.get_mut(call) else {
            return false;
        };
        let Some(r) = c.call_recording.take() else {
            return false;
        };
        if let Some(m) = c.caller().media {
            self.media.stop_call_recording(m, now);
        }
        into_cdr(c, *r);
        true
    }
}

/// A stopped recording in its call's CDR: which file, how long, whether complete.
fn into_cdr(c: &mut Call, r: Recorded) {
    c.cdr.recording = Some(r.file);
    c.cdr.recording_s = Some(r.status.duration().as_millis() as f64 / 1000.0);
    c.cdr.recording_complete = Some(r.status.complete());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_calls_takes_a_mix_and_a_format_in_any_order() {
        let stereo_opus = RecordCalls {
            mix: Mix::Stereo,
            format: FileFormat::Opus,
        };
        assert_eq!(RecordCalls::parse("stereo,opus"), Ok(Some(stereo_opus)));
        assert_eq!(RecordCalls::parse("opus, stereo"), Ok(Some(stereo_opus)));
        let mono = RecordCalls::parse("mono").unwrap().unwrap();
        assert_eq!((mono.mix, mono.format), (Mix::Mono, FileFormat::Wav));
        assert_eq!(RecordCalls::parse("off"), Ok(None));
        assert_eq!(RecordCalls::parse(""), Ok(None));
        let e = RecordCalls::parse("stero").unwrap_err();
        assert!(e.contains("expected mono or stereo"), "{e}");
    }

    #[test]
    fn a_users_record_calls_is_checked_when_the_configuration_loads() {
        let user = "[[users]]\nuser = \"1001\"\npassword = \"a\"\nrecord_calls = ";
        let rules = "[[dialplan.contexts.default.rules]]\nexten = \"1\"\nsteps = [\"echo\"]\n";
        let good = format!("{user}\"stereo,opus\"\n{rules}");
        let c = crate::config::Config::from_str(&good, "t.toml").unwrap();
        assert_eq!(c.users[0].record_calls.as_deref(), Some("stereo,opus"));
        let bad = format!("{user}\"both\"\n{rules}");
        let e: Vec<String> = crate::config::Config::from_str(&bad, "t.toml")
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            e.iter()
                .any(|l| l.contains("users[0].record_calls")
                    && l.contains("expected mono or stereo")),
            "{e:?}"
        );
    }

    #[test]
    fn file_names_from_call_ids_stay_in_their_directory() {
        assert_eq!(file_name("1-2@127.0.0.1"), "1-2@127.0.0.1");
        assert_eq!(file_name("../../etc/x y"), ".._.._etc_x_y");
    }
}

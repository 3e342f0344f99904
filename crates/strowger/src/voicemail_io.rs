//! Voicemail boxes off the workers: one thread runs every box operation and reads every
//! message or greeting a call plays, in the order the workers asked (the menu moves a message
//! to `Old` before it plays it there), so a slow or absent store (`voicemail.store` in Redis)
//! never holds up a worker's calls. Answers go back to the worker that asked; a box an
//! operation changed goes to every other worker (`Envelope::MailboxChanged`). With boxes in
//! Redis a second thread listens for boxes other nodes changed and hands them to every worker
//! too, so phones subscribed here hear of messages left anywhere.

use crate::worker::{Envelope, Mailboxes};
use media::Prompt;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;
use store::voicemail::{Mailbox, MailboxOp};

/// Operations waiting at most: past it one fails at once (the call hears so) rather than
/// queueing behind a store that does not answer.
const QUEUE: usize = 256;

/// How long the listener waits before subscribing again after Redis went away.
const RETRY: Duration = Duration::from_secs(1);

enum Job {
    Op {
        worker: usize,
        token: u64,
        user: String,
        op: MailboxOp,
    },
    Audio {
        worker: usize,
        token: u64,
        path: String,
    },
}

/// The workers' handle on the voicemail thread.
#[derive(Clone)]
pub struct VoicemailIo {
    tx: SyncSender<Job>,
}

impl VoicemailIo {
    /// Starts the voicemail thread on `boxes`, and with boxes in Redis, the listener.
    pub fn start(
        boxes: store::voicemail::Mailboxes,
        workers: usize,
        mail: Arc<Mailboxes>,
    ) -> Result<VoicemailIo, String> {
        let boxes = Arc::new(boxes);
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        let (b, m) = (boxes.clone(), mail.clone());
        std::thread::Builder::new()
            .name("voicemail".into())
            .spawn(move || {
                for job in rx {
                    run(&b, &m, workers, job);
                }
            })
            .map_err(|e| format!("cannot start the voicemail thread: {e}"))?;
        if matches!(*boxes, store::voicemail::Mailboxes::Redis { .. }) {
            std::thread::Builder::new()
                .name("voicemail-mwi".into())
                .spawn(move || listen(&boxes, &mail, workers))
                .map_err(|e| format!("cannot start the voicemail listener: {e}"))?;
        }
        Ok(VoicemailIo { tx })
    }

    /// Runs `op` on `user`'s box for `worker`: the answer comes back as
    /// `Envelope::Voicemail`.
    pub fn submit(
        &self,
        worker: usize,
        token: u64,
        user: String,
        op: MailboxOp,
    ) -> Result<(), String> {
        self.send(Job::Op {
            worker,
            token,
            user,
            op,
        })
    }

    /// Reads a message or greeting (`voicemail/…`) for `worker`: it comes back as
    /// `Envelope::Prompt`.
    pub fn audio(&self, worker: usize, token: u64, path: String) -> Result<(), String> {
        self.send(Job::Audio {
            worker,
            token,
            path,
        })
    }

    fn send(&self, job: Job) -> Result<(), String> {
        self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => format!(
                "{QUEUE} voicemail operations already wait for voicemail.store (is it slow or down?)"
            ),
            TrySendError::Disconnected(_) => "the voicemail thread has stopped".to_string(),
        })
    }
}

fn run(boxes: &store::voicemail::Mailboxes, mail: &Mailboxes, workers: usize, job: Job) {
    match job {
        Job::Op {
            worker,
            token,
            user,
            op,
        } => {
            let result = boxes.run(&user, &op);
            if let Some(b) = result.as_ref().ok().filter(|_| op != MailboxOp::List) {
                for w in (0..workers).filter(|&w| w != worker) {
                    changed(mail, w, &user, b);
                }
            }
            let answer = Envelope::Voicemail {
                token,
                user,
                result,
            };
            mail.send(worker, answer);
        }
        Job::Audio {
            worker,
            token,
            path,
        } => {
            let result = boxes
                .audio(&path)
                .and_then(|wav| Prompt::from_wav_bytes(&wav).map_err(|e| e.to_string()))
                .map(Arc::new);
            mail.send(worker, Envelope::Prompt { token, result });
        }
    }
}

fn changed(mail: &Mailboxes, worker: usize, user: &str, b: &Mailbox) {
    let (user, mailbox) = (user.to_string(), b.clone());
    mail.send(worker, Envelope::MailboxChanged { user, mailbox });
}

/// Hands every box another node changed, as it is now, to every worker; subscribes again
/// after Redis went away (what changed meanwhile is told with the next change).
fn listen(boxes: &store::voicemail::Mailboxes, mail: &Mailboxes, workers: usize) {
    let store::voicemail::Mailboxes::Redis { redis, .. } = boxes else {
        return;
    };
    let mut reported = false;
    loop {
        let heard = redis.listen(|user| {
            reported = false;
            match boxes.run(user, &MailboxOp::List) {
                Ok(b) => (0..workers).for_each(|w| changed(mail, w, user, &b)),
                Err(e) => tracing::warn!("voicemail box {user}: {e}"),
            }
        });
        if let Err(e) = heard {
            if !reported {
                tracing::warn!("message-waiting from other nodes: {e}");
                reported = true;
            }
            std::thread::sleep(RETRY);
        }
    }
}

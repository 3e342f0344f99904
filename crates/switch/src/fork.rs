//! The response context of a request the proxy role forwards (RFC 3261 §16.6, §16.7): one
//! server transaction towards the caller, one client transaction per branch. A user's contacts
//! are tried by q: those of equal q at once (parallel forking), the groups of lower q in turn
//! (serial), the next group when the previous one ends with no 2xx and no 6xx or when
//! `proxy.fork_timeout_s` runs out. The first 2xx goes to the caller and the other branches are
//! cancelled; a later 2xx of an INVITE is forwarded too (§16.7 step 5); a 6xx cancels the rest;
//! with every branch ended and no 2xx the best final response goes (step 6), a 401/407 with
//! every branch's challenges (step 7).
//!
//! Pure state and choices: proxy.rs sends what they decide.

use sip::header::HeaderName;
use sip::transaction::{ClientTxId, Peer};
use sip::Message;
use std::collections::VecDeque;
use std::time::Instant;

/// Where one branch goes.
pub(crate) struct Target {
    pub(crate) ruri: String,
    pub(crate) routes: Vec<String>,
    pub(crate) hop: Peer,
}

struct Branch {
    ctx: ClientTxId,
    hop: Peer,
    /// Answered 2xx: kept for its retransmissions until its transaction ends.
    answered: bool,
}

/// A final response to choose from: one received on a branch, or one strowger makes itself
/// for a branch that got none (`msg` None: 408 on timeout, 480 for a connection gone).
pub(crate) struct Final {
    pub(crate) status: u16,
    pub(crate) msg: Option<Message>,
    from: Option<ClientTxId>,
}

/// One forwarded request's branches and the responses they gave.
pub(crate) struct Context {
    /// Where the caller is, for a 2xx sent outside the transaction.
    pub(crate) peer: Peer,
    /// The request as received: the next groups are forwarded from it, a local final built on it.
    pub(crate) req: Message,
    branches: Vec<Branch>,
    /// The groups not tried yet, the next first.
    later: VecDeque<Vec<Target>>,
    /// When the current group gives way to the next (None: once it ends).
    pub(crate) group_by: Option<Instant>,
    best: Option<Final>,
    /// The WWW-/Proxy-Authenticate headers of every 401 and 407: (branch, name, value).
    challenges: Vec<(ClientTxId, HeaderName, String)>,
    /// A final response went to the caller.
    answered: bool,
    /// A 6xx or the caller's CANCEL: no new branch starts.
    stopped: bool,
}

/// What a final response on a branch leads to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Other branches are still going.
    Wait,
    /// The first 2xx: to the caller, and the other branches (listed) cancelled.
    Answer(Vec<ClientTxId>),
    /// A 2xx after the first: to the caller outside the transaction.
    Late,
    /// A 6xx while branches (listed) are still going: cancelled, their end awaited.
    Stop(Vec<ClientTxId>),
    /// The group ended without 2xx or 6xx: the next one starts.
    Next,
    /// Every branch ended without 2xx: the best final response goes to the caller.
    Best,
}

impl Context {
    /// `groups`: the targets by descending q; the first group is forwarded by the caller of this.
    pub(crate) fn new(peer: Peer, req: Message, groups: VecDeque<Vec<Target>>) -> Context {
        Context {
            peer,
            req,
            branches: Vec::with_capacity(1),
            later: groups,
            group_by: None,
            best: None,
            challenges: Vec::new(),
            answered: false,
            stopped: false,
        }
    }

    pub(crate) fn add(&mut self, ctx: ClientTxId, hop: Peer) {
        self.branches.push(Branch {
            ctx,
            hop,
            answered: false,
        });
    }

    /// Provisional responses go to the caller until a final one has.
    pub(crate) fn relays_provisional(&self) -> bool {
        !self.answered
    }

    /// No branch is going (none could be sent).
    pub(crate) fn is_idle(&self) -> bool {
        self.branches.is_empty()
    }

    /// Groups remain to be tried after the current one.
    pub(crate) fn has_later(&self) -> bool {
        !self.later.is_empty()
    }

    /// The branches still waiting for a final response going to `hop`.
    pub(crate) fn waiting_on(&self, hop: Peer) -> impl Iterator<Item = ClientTxId> + '_ {
        self.branches
            .iter()
            .filter(move |b| !b.answered && b.hop == hop)
            .map(|b| b.ctx)
    }

    /// A branch's transaction ended (or it is dropped): true when nothing is left of the
    /// context, which can go.
    pub(crate) fn remove(&mut self, ctx: ClientTxId) -> bool {
        self.branches.retain(|b| b.ctx != ctx);
        self.branches.is_empty() && (self.answered || self.later.is_empty())
    }

    fn pending(&self) -> Vec<ClientTxId> {
        self.branches
            .iter()
            .filter(|b| !b.answered)
            .map(|b| b.ctx)
            .collect()
    }

    /// A final response (or, `msg` None, the one strowger makes for a branch that got none)
    /// on branch `ctx`.
    pub(crate) fn on_final(
        &mut self,
        ctx: ClientTxId,
        status: u16,
        msg: Option<&Message>,
    ) -> Verdict {
        if (200..300).contains(&status) {
            if let Some(b) = self.branches.iter_mut().find(|b| b.ctx == ctx) {
                b.answered = true;
            }
            if std::mem::replace(&mut self.answered, true) {
                return Verdict::Late;
            }
            self.stopped = true;
            self.later.clear();
            return Verdict::Answer(self.pending());
        }
        self.branches.retain(|b| b.ctx != ctx);
        if self.answered {
            return Verdict::Wait;
        }
        if matches!(status, 401 | 407) {
            let msg = msg.into_iter().flat_map(Message::headers);
            self.challenges.extend(
                msg.filter(|(n, ..)| {
                    matches!(
                        n,
                        HeaderName::WwwAuthenticate | HeaderName::ProxyAuthenticate
                    )
                })
                .map(|(n, _, v)| (ctx, n, v.to_string())),
            );
        }
        if self
            .best
            .as_ref()
            .is_none_or(|b| rank(status) < rank(b.status))
        {
            self.best = Some(Final {
                status,
                msg: msg.cloned(),
                from: Some(ctx),
            });
        }
        let pending = self.pending();
        if status >= 600 && !std::mem::replace(&mut self.stopped, true) {
            self.later.clear();
            if !pending.is_empty() {
                return Verdict::Stop(pending);
            }
        }
        if !pending.is_empty() {
            Verdict::Wait
        } else if !self.stopped && !self.later.is_empty() {
            Verdict::Next
        } else {
            self.answered = true;
            Verdict::Best
        }
    }

    /// The next group to forward (after `Verdict::Next` or a group timer).
    pub(crate) fn next_group(&mut self) -> Vec<Target> {
        self.later.pop_front().unwrap_or_default()
    }

    /// The group timer set for `at` is due: the current group's branches to cancel, if the
    /// next group is to start now (false: the timer is stale).
    pub(crate) fn group_due(&mut self, at: Instant) -> Option<Vec<ClientTxId>> {
        if self.group_by != Some(at) || self.answered || self.stopped || self.later.is_empty() {
            return None;
        }
        self.group_by = None;
        Some(self.pending())
    }

    /// The caller cancelled: no new branch, and the branches going are cancelled.
    pub(crate) fn cancel(&mut self) -> Vec<ClientTxId> {
        self.stopped = true;
        self.later.clear();
        self.pending()
    }

    /// The chosen final response and the challenges of the other 401/407s to add to it.
    pub(crate) fn best(&mut self) -> (Final, Vec<(HeaderName, String)>) {
        let best = self.best.take().unwrap_or(Final {
            status: 408,
            msg: None,
            from: None,
        });
        let more = if matches!(best.status, 401 | 407) {
            self.challenges
                .drain(..)
                .filter(|(c, ..)| Some(*c) != best.from)
                .map(|(_, n, v)| (n, v))
                .collect()
        } else {
            Vec::new()
        };
        (best, more)
    }
}

/// How good a final response is for the caller when no branch answered 2xx (lower is better;
/// RFC 3261 §16.7 step 6): a 6xx, else the lowest class; within it, responses the caller can
/// act on by resubmitting (401, 407, 415, 420, 484) first and the no-answer kind (408, 480,
/// 487) last.
fn rank(status: u16) -> (u16, u8) {
    let class = if status >= 600 { 0 } else { status / 100 };
    let tier = match status {
        401 | 407 | 415 | 420 | 484 => 0,
        408 | 480 | 487 => 2,
        _ => 1,
    };
    (class, tier)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sip::transaction::{Transactions, Transport};

    fn peer(port: u16) -> Peer {
        Peer {
            transport: Transport::Udp,
            addr: format!("127.0.0.1:{port}").parse().unwrap(),
        }
    }

    fn target(port: u16) -> Target {
        Target {
            ruri: format!("sip:u@127.0.0.1:{port}"),
            routes: Vec::new(),
            hop: peer(port),
        }
    }

    fn request() -> Message {
        Message::parse(
            b"INVITE sip:u@example.com SIP/2.0\r\nCall-ID: x\r\n\r\n",
            false,
        )
        .unwrap()
    }

    fn response(status: u16, challenge: &str) -> Message {
        let text = format!(
            "SIP/2.0 {status} X\r\nCall-ID: x\r\nProxy-Authenticate: Digest realm=\"{challenge}\"\r\n\r\n"
        );
        Message::parse(text.as_bytes(), false).unwrap()
    }

    /// Client transaction ids, as a transaction layer makes them.
    fn ids(txs: &mut Transactions, n: usize) -> Vec<ClientTxId> {
        let req = b"OPTIONS sip:x SIP/2.0\r\n\r\n";
        (0..n)
            .map(|_| txs.send_request(req.to_vec(), peer(5100), Instant::now()))
            .collect()
    }

    /// A context with `first` branches going and `later` groups waiting; returns its branches
    /// and one more id.
    fn forked(first: usize, later: &[usize]) -> (Context, Vec<ClientTxId>) {
        let mut txs = Transactions::new(Default::default());
        let groups = later
            .iter()
            .map(|n| (0..*n).map(|i| target(6000 + i as u16)).collect())
            .collect();
        let mut cx = Context::new(peer(5061), request(), groups);
        let ids = ids(&mut txs, first + 1);
        for (i, ctx) in ids[..first].iter().enumerate() {
            cx.add(*ctx, peer(5100 + i as u16));
        }
        (cx, ids)
    }

    #[test]
    fn the_first_2xx_answers_and_cancels_the_rest_a_later_one_is_forwarded_too() {
        let (mut cx, b) = forked(3, &[1]);
        assert_eq!(cx.on_final(b[1], 486, None), Verdict::Wait);
        assert_eq!(cx.on_final(b[0], 200, None), Verdict::Answer(vec![b[2]]));
        assert!(!cx.relays_provisional());
        assert!(!cx.has_later(), "no group after a 2xx");
        assert_eq!(cx.on_final(b[2], 200, None), Verdict::Late);
        assert!(
            !cx.remove(b[0]) && cx.remove(b[2]),
            "gone with its last 2xx"
        );
    }

    #[test]
    fn a_group_that_fails_gives_way_to_the_next_and_the_best_response_wins() {
        let (mut cx, b) = forked(2, &[1]);
        assert_eq!(cx.on_final(b[0], 480, None), Verdict::Wait);
        assert_eq!(
            cx.on_final(b[1], 486, Some(&response(486, "r"))),
            Verdict::Next
        );
        let next = cx.next_group();
        assert_eq!(next.len(), 1);
        cx.add(b[2], next[0].hop);
        assert_eq!(cx.on_final(b[2], 503, None), Verdict::Best);
        let (best, more) = cx.best();
        assert_eq!(best.status, 486, "4xx beats 5xx, a definite 486 beats 480");
        assert!(best.msg.is_some() && more.is_empty());
    }

    #[test]
    fn a_6xx_stops_the_fork_and_is_chosen() {
        let (mut cx, b) = forked(2, &[2]);
        assert_eq!(cx.on_final(b[0], 603, None), Verdict::Stop(vec![b[1]]));
        assert!(!cx.has_later());
        assert_eq!(cx.on_final(b[1], 487, None), Verdict::Best);
        assert_eq!(cx.best().0.status, 603);
    }

    #[test]
    fn challenges_of_every_branch_are_merged_into_the_chosen_one() {
        let (mut cx, b) = forked(3, &[]);
        cx.on_final(b[0], 407, Some(&response(407, "a")));
        cx.on_final(b[1], 404, None);
        assert_eq!(
            cx.on_final(b[2], 401, Some(&response(401, "b"))),
            Verdict::Best
        );
        let (best, more) = cx.best();
        assert_eq!(best.status, 407);
        assert_eq!(
            more,
            [(
                HeaderName::ProxyAuthenticate,
                "Digest realm=\"b\"".to_string()
            )]
        );
    }

    #[test]
    fn no_response_at_all_is_408_and_a_cancel_starts_no_group() {
        let (mut cx, b) = forked(1, &[1]);
        assert_eq!(cx.cancel(), vec![b[0]]);
        assert_eq!(cx.group_due(Instant::now()), None);
        assert_eq!(cx.on_final(b[0], 408, None), Verdict::Best);
        let (best, _) = cx.best();
        assert_eq!((best.status, best.msg.is_none()), (408, true));
    }

    #[test]
    fn the_group_timer_cancels_the_group_and_a_stale_one_does_nothing() {
        let (mut cx, b) = forked(2, &[1]);
        let at = Instant::now();
        cx.group_by = Some(at);
        assert_eq!(cx.group_due(at + std::time::Duration::from_secs(1)), None);
        assert_eq!(cx.group_due(at), Some(vec![b[0], b[1]]));
        assert_eq!(cx.group_due(at), None, "once");
        assert_eq!(cx.next_group().len(), 1);
    }
}

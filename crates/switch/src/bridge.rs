//! The `bridge` app: strowger as a B2BUA dials a second leg, relays its progress to the caller
//! and, once it answers, relays media between the two legs.

use crate::call::{Leg, LegIdx, LegRef, Signal, Wait};
use crate::control::Notice;
use crate::dialog::Dialog;
use crate::engine::{owner, Engine, ALLOW, SUPPORTED};
use sdp::SessionDescription;
use sip::header::{parse_u32, HeaderName};
use sip::transaction::{Peer, Transport};
use sip::{Message, Method, Uri};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

/// Where a SIP URI points: IP literals and `localhost` (DNS comes with the trunk work).
pub fn resolve(uri: &Uri) -> Option<Peer> {
    let ip: IpAddr = match uri.ip() {
        Some(ip) => ip,
        None if uri.host.eq_ignore_ascii_case("localhost") => IpAddr::V4(Ipv4Addr::LOCALHOST),
        None => return None,
    };
    let param = uri.params.get("transport");
    let is = |t: &str| param.is_some_and(|p| p.eq_ignore_ascii_case(t));
    // A sips: URI is reached over TLS only (RFC 3261 §26.2.2), on port 5061 by default.
    let transport = if uri.scheme.eq_ignore_ascii_case("sips") || is("tls") {
        Transport::Tls
    } else if is("tcp") {
        Transport::Tcp
    } else {
        Transport::Udp
    };
    let port = if transport == Transport::Tls {
        5061
    } else {
        5060
    };
    Some(Peer {
        transport,
        addr: SocketAddr::new(ip, uri.port.unwrap_or(port)),
    })
}

/// What a callee leg may have of its own rather than a plain bridge's.
#[derive(Default)]
pub(crate) struct LegOptions {
    /// The From of its INVITE (a name-addr without tag); None: the caller's.
    pub from: Option<String>,
    /// The codecs it offers; None: `rtp.codecs`.
    pub caps: Option<sdp::Caps>,
    /// How its far end takes digits (the dialled user's or trunk's); None: `rtp.dtmf`.
    pub dtmf: Option<media::DtmfMode>,
}

impl Engine {
    pub(crate) fn start_bridge(
        &mut self,
        call: usize,
        target: &str,
        timeout: Duration,
        now: Instant,
    ) {
        let Some(peer) = Uri::parse(target)
            .ok()
            .filter(Uri::is_sip)
            .as_ref()
            .and_then(resolve)
        else {
            self.warn_call(
                call,
                format!(
                    "bridge: cannot route to {target:?}: use sip:user@IP[:port] in the dialplan"
                ),
            );
            self.bridge_failed(call, 502, now);
            return;
        };
        self.bridge_to(call, target, peer, Vec::new(), timeout, now);
    }

    /// Dials `target` (the Request-URI) at `peer` (where to send it: for a registered phone,
    /// the address its REGISTER came from, or the first hop of its Path) with `route_set` as
    /// the Route headers (a registered phone's Path, RFC 3327 §5.3).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bridge_to(
        &mut self,
        call: usize,
        target: &str,
        peer: Peer,
        route_set: Vec<String>,
        timeout: Duration,
        now: Instant,
    ) {
        let opts = LegOptions::default();
        self.bridge_leg(call, target, peer, route_set, opts, timeout, now);
    }

    /// `bridge_to` with `opts` (a From of its own, codecs of its own); returns the new callee
    /// leg.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bridge_leg(
        &mut self,
        call: usize,
        target: &str,
        peer: Peer,
        route_set: Vec<String>,
        opts: LegOptions,
        timeout: Duration,
        now: Instant,
    ) -> Option<LegIdx> {
        let c = &self.calls[call];
        let max_forwards = c
            .invite
            .as_ref()
            .and_then(|i| i.header(HeaderName::MaxForwards))
            .and_then(parse_u32)
            .unwrap_or(70);
        if max_forwards == 0 {
            self.bridge_failed(call, 483, now);
            return None;
        }
        let caller = match (&opts.from, &c.user, &c.invite) {
            // A trunk's own caller ID (trunks.rs) wins over everything.
            (Some(f), _, _) => f.clone(),
            // An authenticated user: its caller ID, whatever its From said.
            (None, Some(user), _) => user.caller_from(self.local_for(peer)),
            (None, None, Some(invite)) => invite
                .header(HeaderName::From)
                .map(crate::dialog::without_tag)
                .unwrap_or_default(),
            // An IAX2 caller: its number at strowger.
            (None, None, None) => format!(
                "<sip:{}@{}>",
                c.vars.get("CALLER").unwrap_or("anonymous"),
                self.local_for(peer)
            ),
        };
        let call_id = self.own_call_id();
        let local = self.local_for(peer);
        let tag = self.tag();
        let dialog = Dialog {
            call_id: call_id.clone(),
            local_tag: tag,
            remote_tag: String::new(),
            local_uri: caller,
            remote_uri: format!("<{target}>"),
            remote_target: target.to_string(),
            route_set,
            local_cseq: 0,
            remote_cseq: 0,
            peer,
            max_forwards: max_forwards - 1,
            local_contact: format!(
                "<sip:strowger@{local}{}>",
                crate::engine::transport_param(peer.transport)
            ),
        };
        // The offer is of the callee's family (its contact or target), RFC 6157 §3.2.
        let media = self.s.media.for_remote(peer.addr.ip());
        let sdp = self.local_session(media.announce, peer.transport);
        let mut leg = Leg::new(Signal::Sip(dialog), sdp, None, None);
        leg.dtmf = opts.dtmf;
        let leg = self.calls[call].set_callee(leg);
        self.calls.index_call_id(call_id, LegRef { call, leg });
        if !self.ensure_media(call, leg, now) {
            self.bridge_failed(call, 503, now);
            return None;
        }
        let caps = opts.caps.unwrap_or_else(|| self.s.caps.clone());
        let c = &mut self.calls[call];
        let out = c.leg_mut(leg)?;
        let sdp_offer = out.sdp.offer(&caps, out.port);
        out.our_offer = Some(sdp_offer);
        self.send_invite(call, leg, None, now);
        let until = now + timeout;
        self.calls[call].wait = Wait::Bridge { until };
        self.calls[call].cdr.bridged_to = Some(target.to_string());
        self.calls.arm(call, until);
        Some(leg)
    }

    /// A new Call-ID for a dialog or registration strowger starts: one that hashes to this
    /// worker (`owner`), so the answers find their way back here.
    pub(crate) fn own_call_id(&mut self) -> String {
        loop {
            let id = format!("{:032x}{}", self.rng.u128(..), crate::reinvite::OWN_CALL_ID);
            if owner(&id, self.s.workers) == self.s.worker {
                return id;
            }
        }
    }

    /// Sends the INVITE of outbound leg `leg` with its offer, to its dialog's peer: the first
    /// one, or again in a new transaction (next CSeq, new branch) answering a challenge with
    /// `auth` (header name and value) or to another server of a trunk.
    pub(crate) fn send_invite(
        &mut self,
        call: usize,
        leg: LegIdx,
        auth: Option<(&str, &str)>,
        now: Instant,
    ) {
        let branch = self.branch();
        let ua = self.s.user_agent.clone();
        let Some(peer) = self.calls[call]
            .leg(leg)
            .and_then(Leg::dialog)
            .map(|d| d.peer)
        else {
            return;
        };
        let local = self.local_for(peer);
        let Some(out) = self.calls[call].leg_mut(leg) else {
            return;
        };
        let offer = out
            .our_offer
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let Signal::Sip(d) = &mut out.signal else {
            return;
        };
        let mut b = d.request(&Method::Invite, &branch, local, None);
        b.header("Allow", ALLOW);
        b.header("Supported", SUPPORTED.join(", "));
        b.header("User-Agent", ua);
        if let Some((name, value)) = auth {
            b.header(name, value);
        }
        let bytes = b.finish(Some(("application/sdp", offer.as_bytes())));
        let ctx = self.txs.send_request(bytes, peer, now);
        if let Some(out) = self.calls[call].leg_mut(leg) {
            out.invite_tx = Some(ctx);
        }
        self.calls.index_invite(ctx, LegRef { call, leg });
    }

    /// A first response to the outbound INVITE.
    pub(crate) fn bridge_response(
        &mut self,
        call: usize,
        msg: &Message,
        status: u16,
        now: Instant,
    ) {
        if status >= 300 {
            self.leg_failed(call, status, now);
            return;
        }
        let has_sdp = !msg.body().is_empty();
        let mut refused = None;
        if has_sdp {
            if let Some(at) = self.calls[call].callee_idx() {
                refused = self.accept_answer(call, at, msg.body(), now).err();
            }
        }
        if status < 200 {
            if status == 100 {
                return;
            }
            let early = has_sdp
                && self.calls[call]
                    .callee()
                    .is_some_and(|o| o.negotiated.is_some());
            if early {
                self.provisional(call, 183, "Session Progress", true, now);
                self.link_media(call);
            } else if !self.calls[call].early_media {
                self.provisional(call, 180, "Ringing", false, now);
            }
            return;
        }
        // 2xx: confirm the dialog, ACK it, answer the caller and join the media.
        let Some(out) = self.calls[call].callee_mut() else {
            return;
        };
        let Signal::Sip(d) = &mut out.signal else {
            return;
        };
        // The contact dialled (before the 2xx's Contact replaces the remote target).
        let target = d.remote_target.clone();
        d.confirm_uac(msg);
        let cseq = d.local_cseq;
        if let (Some(e), Some(at)) = (refused, self.calls[call].callee_idx()) {
            self.ack_answer(call, at, cseq);
            self.answer_refused(call, at, e, now);
            return;
        }
        let Some(out) = self.calls[call].callee_mut() else {
            return;
        };
        out.invite_tx = None;
        out.confirmed = true;
        self.call_notice(call, crate::control::CALL, |call_id| Notice::Bridged {
            call_id,
            to: target.clone(),
        });
        self.calls[call].cdr.bridged_to = Some(target);
        // The first to answer wins; the other forks are cancelled.
        self.ring_end(call);
        let losers = self.calls[call].take_ringing();
        for mut leg in losers {
            self.release_outbound(&mut leg, 26, true, now);
        }
        self.queue_answered(call, now);
        if let Some(at) = self.calls[call].callee_idx() {
            self.ack_answer(call, at, cseq);
            self.move_if_indistinct(LegRef { call, leg: at }, now);
        }
        if !self.answer(call, now) {
            return;
        }
        self.link_media(call);
        self.calls[call].wait = Wait::Forever;
        self.dial_answered(call);
    }

    /// ACKs the 2xx (CSeq `cseq`) to leg `at`'s INVITE; the ACK is kept for the 2xx's
    /// retransmissions.
    pub(crate) fn ack_answer(&mut self, call: usize, at: LegIdx, cseq: u32) {
        let branch = self.branch();
        let out = self.calls[call].leg(at);
        let Some(peer) = out.and_then(Leg::dialog).map(|d| d.peer) else {
            return;
        };
        let local = self.local_for(peer);
        let Some(out) = self.calls[call].leg_mut(at) else {
            return;
        };
        let Signal::Sip(d) = &mut out.signal else {
            return;
        };
        let mut b = d.request(&Method::Ack, &branch, local, Some(cseq));
        // RFC 3261 §22.1: an ACK for a 2xx carries the credentials of its INVITE.
        if let Some((name, value)) = out.trunk.as_ref().and_then(|t| t.credentials()) {
            b.header(name, value);
        }
        let ack = (d.peer, b.finish(None).into());
        out.ack = Some(ack.clone());
        self.out.push_back(ack);
    }

    /// Takes the SDP answer in a response to leg `at`'s offer; Err if it answers the offer
    /// but cannot be taken (then the offer stays open, and a 2xx ends the leg).
    pub(crate) fn accept_answer(
        &mut self,
        call: usize,
        at: LegIdx,
        body: &[u8],
        now: Instant,
    ) -> Result<(), sdp::NegotiationError> {
        let symmetric = self.s.symmetric_rtp;
        let Some(out) = self.calls[call].leg_mut(at) else {
            return Ok(());
        };
        let Some(offer) = out.our_offer.as_ref() else {
            return Ok(());
        };
        let Ok(answer) = SessionDescription::parse(body) else {
            return Ok(());
        };
        let neg = out.sdp.accept_answer(offer, &answer)?;
        out.our_offer = None;
        if let Some(m) = out.media {
            self.media
                .update_leg(m, crate::engine::leg_update(&neg, symmetric));
            crate::sdes::Keying::of(Some(&neg), &out.sdp, &self.s.webrtc_certificate).apply(
                &mut self.media,
                m,
                now,
            );
        }
        out.negotiated = Some(neg);
        Ok(())
    }

    /// Leg `at` answered with a 2xx (ACKed already) whose SDP cannot be taken, `e` says why:
    /// the leg is ended with a BYE (RFC 3261 §13.2.2.4; Q.850 88, incompatible destination),
    /// counted and logged, and the call goes on as if the leg had refused with 488.
    pub(crate) fn answer_refused(
        &mut self,
        call: usize,
        at: LegIdx,
        e: sdp::NegotiationError,
        now: Instant,
    ) {
        let Some(mut leg) = self.calls.get_mut(call).and_then(|c| c.remove_leg(at)) else {
            return;
        };
        let to = leg
            .dialog()
            .map(|d| d.remote_target.clone())
            .unwrap_or_default();
        self.note_refused_answer(call, e, &format!("the leg to {to}"));
        leg.confirmed = true;
        self.release_outbound(&mut leg, 88, true, now);
        self.leg_failed(call, 488, now);
    }

    fn link_media(&mut self, call: usize) {
        let c = &self.calls[call];
        if let (Some(a), Some(b)) = (c.caller().media, c.callee().and_then(|o| o.media)) {
            self.media.bridge(a, b);
        }
    }

    /// Makes the ringing leg whose INVITE is `ctx` the call's callee (the callee it replaces
    /// rings on). False if that leg does not have that INVITE pending.
    pub(crate) fn select_fork(&mut self, at: LegRef, ctx: sip::transaction::ClientTxId) -> bool {
        let Some(c) = self.calls.get_mut(at.call) else {
            return false;
        };
        if !c.leg(at.leg).is_some_and(|l| l.invite_tx == Some(ctx)) {
            return false;
        }
        c.select_callee(at.leg)
    }

    /// The current outbound leg failed with `status`: while other forks still ring, drop it and
    /// remember the best failure; once none is left, the bridge fails with the best one.
    pub(crate) fn leg_failed(&mut self, call: usize, status: u16, now: Instant) {
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let best = c.best_status.map_or(status, |b| better_final(b, status));
        if c.ringing().next().is_none() {
            c.best_status = None;
            self.bridge_failed(call, best, now);
            return;
        }
        c.best_status = Some(best);
        let failed = c.take_callee(true);
        if let Some(m) = c.caller().media {
            // It may have been sending early media.
            self.media.unbridge(m);
        }
        if let Some(mut leg) = failed {
            self.release_outbound(&mut leg, 16, false, now);
            self.queue_fork_failed(call, leg.call_id(), status, now);
        }
    }

    /// The outbound leg failed (error response, timeout, no route): the next member of a ring
    /// group or a forwarding takes over (hunt.rs), or the program goes on with DIALSTATUS set,
    /// and the caller gets that status if nothing else answers it.
    pub(crate) fn bridge_failed(&mut self, call: usize, status: u16, now: Instant) {
        self.ring_end(call);
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let mut legs = c.take_ringing();
        legs.extend(c.take_callee(false));
        c.best_status = None;
        for mut leg in legs {
            self.release_outbound(&mut leg, 16, true, now);
        }
        if let Some(m) = self.calls[call].caller().media {
            self.media.unbridge(m);
        }
        if self.queue_agents_failed(call, status, now) {
            return;
        }
        // None: the hunt took the call on (it rings something else, or runs another rule).
        let Some(status) = self.dial_next(call, status, now) else {
            return;
        };
        let Some(c) = self.calls.get_mut(call) else {
            return;
        };
        let dialstatus = match status {
            486 | 600 => "BUSY",
            408 | 480 | 487 => "NOANSWER",
            503 => "CONGESTION",
            _ => "CHANUNAVAIL",
        };
        c.vars.set("DIALSTATUS", dialstatus);
        c.vars.set("BRIDGE_STATUS", status.to_string());
        c.bridge_status = Some(status);
        c.wait = Wait::None;
        self.calls.run_later(call);
    }

    /// A 2xx for an outbound INVITE whose call is already gone (the caller hung up while the
    /// callee answered): ACK it and end that dialog at once.
    pub(crate) fn orphan_answer(&mut self, mut dialog: Dialog, msg: &Message, now: Instant) {
        dialog.confirm_uac(msg);
        let local = self.local_for(dialog.peer);
        let branch = self.branch();
        let cseq =
            sip::CSeq::parse(msg.header(HeaderName::CSeq).unwrap_or_default()).map_or(1, |c| c.seq);
        let ack = dialog
            .request(&Method::Ack, &branch, local, Some(cseq))
            .finish(None);
        self.out.push_back((dialog.peer, ack.into()));
        let branch = self.branch();
        let bye = dialog
            .request(&Method::Bye, &branch, local, None)
            .finish(None);
        self.txs.send_request(bye, dialog.peer, now);
    }
}

/// The better of two final responses for the caller when every fork failed (RFC 3261 §16.7,
/// simplified): a 6xx wins, then the lowest class; within 4xx, a definite answer such as 486
/// beats the no-answer kind (408, 480, 487); otherwise the first one stays.
pub(crate) fn better_final(a: u16, b: u16) -> u16 {
    let rank = |s: u16| -> (u16, u16) {
        let class = if s >= 600 { 0 } else { s / 100 };
        (class, u16::from(matches!(s, 408 | 480 | 487)))
    };
    if rank(b) < rank(a) {
        b
    } else {
        a
    }
}

#[cfg(test)]
mod tests {
    use super::{better_final, resolve};
    use sip::transaction::Transport;
    use sip::Uri;

    #[test]
    fn sips_and_transport_tls_go_over_tls() {
        let peer = |u: &str| resolve(&Uri::parse(u).unwrap()).unwrap();
        let sips = peer("sips:9196@127.0.0.1");
        assert_eq!((sips.transport, sips.addr.port()), (Transport::Tls, 5061));
        let tls = peer("sip:9196@127.0.0.1:5071;transport=TLS");
        assert_eq!((tls.transport, tls.addr.port()), (Transport::Tls, 5071));
        assert_eq!(
            peer("sip:9196@127.0.0.1;transport=tcp").transport,
            Transport::Tcp
        );
        assert_eq!(peer("sip:9196@127.0.0.1").addr.port(), 5060);
    }

    #[test]
    fn best_final_response() {
        assert_eq!(better_final(480, 486), 486);
        assert_eq!(better_final(486, 408), 486);
        assert_eq!(better_final(503, 480), 480);
        assert_eq!(better_final(486, 603), 603);
        assert_eq!(better_final(302, 404), 302);
        assert_eq!(better_final(404, 486), 404);
    }
}

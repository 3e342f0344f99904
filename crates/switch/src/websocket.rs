//! Phones on WebSockets (RFC 7118): only the connection a phone opened reaches it (§5), so
//! when the shell finds that connection gone, a call ringing it fails at once with 480
//! instead of waiting out timer B on a request that can never arrive.

use crate::engine::Engine;
use sip::transaction::Peer;
use std::time::Instant;

impl Engine {
    /// The WebSocket connection of `peer` is gone: every INVITE waiting on it fails with 480
    /// (Temporarily Unavailable: the phone may connect again), each as its own fork, the
    /// proxy role's branches too.
    pub(crate) fn websocket_gone(&mut self, peer: Peer, now: Instant) {
        let mut waiting = Vec::new();
        for call in self.calls.ids() {
            for (_, leg) in self.calls[call].legs() {
                if let Some(ctx) = leg
                    .invite_tx
                    .filter(|_| leg.dialog().map(|d| d.peer) == Some(peer))
                {
                    waiting.push(ctx);
                }
            }
        }
        for ctx in waiting {
            if let Some(at) = self.calls.leg_by_client_tx(ctx, true) {
                if self.select_fork(at, ctx) {
                    self.leg_failed(at.call, 480, now);
                }
            }
        }
        self.run_pending(now);
        self.proxy_peer_gone(peer, now);
    }
}

//! SIP over WebSocket in the engine (RFC 7118): a phone registered over a WebSocket (the shell
//! hands its messages in as `Transport::Ws`) is called over that transport at the address it
//! registered from — its Contact names an `.invalid` host no one can reach — with a WS Via;
//! when the shell finds its connection gone, the caller hears 480 at once, not after timer B.

use crate::net::*;
use crate::tls::register_then_call;
use sip::transaction::{Peer, Transport};

#[test]
fn a_phone_registered_over_a_websocket_is_called_over_it_and_its_loss_fails_fast() {
    let phone = addr("127.0.0.1:40620");
    let (mut n, sw, to_phone) = register_then_call(Transport::Ws, phone, "df7jal23ls0d.invalid");
    let invite = to_phone
        .iter()
        .find(|m| m.starts_with("INVITE "))
        .unwrap_or_else(|| panic!("no INVITE to the WebSocket phone: {to_phone:?}"));
    assert!(
        invite.starts_with("INVITE sip:1001@df7jal23ls0d.invalid;transport=ws "),
        "{invite}"
    );
    assert!(invite.contains("\r\nVia: SIP/2.0/WS "), "{invite}");

    // The connection closed before the INVITE could go down it: the shell says so.
    websocket_gone_fails_the_call_with_480(&mut n, sw, phone);
}

/// The shell tells `sw` that `phone`'s WebSocket is gone: the caller (ALICE) gets 480 at once.
pub(crate) fn websocket_gone_fails_the_call_with_480(
    n: &mut Net,
    sw: Id,
    phone: std::net::SocketAddr,
) {
    n.sw(sw).node().unreachable(Peer {
        transport: Transport::Ws,
        addr: phone,
    });
    let to_alice: Vec<String> = n
        .sw(sw)
        .node()
        .drain()
        .into_iter()
        .filter(|p| p.to == addr(ALICE))
        .map(|p| String::from_utf8_lossy(&p.bytes).into_owned())
        .collect();
    assert!(
        to_alice.iter().any(|m| m.starts_with("SIP/2.0 480 ")),
        "{to_alice:?}"
    );
}

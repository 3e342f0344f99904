//! Calls through strowger on the simulated network (tests/net): IPv6, hold and codec changes,
//! early media, loss and reordering, shutdown, overload.

mod net;

use net::*;

#[test]
fn smoke() {
    let mut n = Net::new(1);
    let sw = n.switch(
        &config("[vars]\nbridge_target = \"127.0.0.1:5090\"\nself = \"127.0.0.1:5060\"\n"),
        &["127.0.0.1:5060"],
        1,
    );
    let a = n.ua("127.0.0.1:5061", "alice");
    let now = n.now;
    let c = n
        .agent(a)
        .invite("sip:44444@127.0.0.1", addr("127.0.0.1:5060"), now);
    n.run_for(secs(1));
    assert_eq!(n.agent(a).call(c).state, State::Confirmed);
    let now = n.now;
    n.agent(a).bye(c, now);
    n.run_for(secs(1));
    assert_eq!(n.sw(sw).cdrs().len(), 1);
}

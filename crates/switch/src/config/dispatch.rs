//! `[[dispatch]]`: sets of strowger nodes an edge spreads requests over (switch::dispatch), and
//! `proxy.dispatch`, which sends the proxied domains to one of them.

use std::time::Duration;

use serde::Deserialize;
use sip::transaction::Peer;
use sip::Uri;

use super::{bounded, Diagnostics};

/// A set as the file gives it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawDispatch {
    pub name: String,
    pub nodes: Vec<String>,
    pub probe_interval_s: u64,
    pub probe_failures: u64,
    pub timeout_ms: u64,
}

impl Default for RawDispatch {
    fn default() -> RawDispatch {
        RawDispatch {
            name: String::new(),
            nodes: Vec::new(),
            probe_interval_s: 5,
            probe_failures: 2,
            timeout_ms: 2000,
        }
    }
}

/// One dispatch set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DispatchSet {
    pub name: String,
    pub nodes: Vec<Node>,
    /// Every node gets an OPTIONS this often.
    pub probe_interval: Duration,
    /// Probes in a row that fail (unanswered within `timeout` or the interval, or 5xx) before a
    /// node is down.
    pub probe_failures: u32,
    /// An INVITE with no response at all from its node by then goes to the next node; a probe
    /// unanswered by then fails.
    pub timeout: Duration,
}

/// A node of a set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's URI without `weight` (the Request-URI of its probes, and for logs).
    pub uri: String,
    pub peer: Peer,
    /// Its share of new dialogs relative to the others' (`;weight=N`, 1 to 100).
    pub weight: u32,
}

pub(crate) fn dispatch(raw: Vec<RawDispatch>, d: &mut Diagnostics) -> Vec<DispatchSet> {
    let mut sets: Vec<DispatchSet> = Vec::new();
    for (i, r) in raw.into_iter().enumerate() {
        let key = |k: &str| format!("dispatch[{i}].{k}");
        if r.name.is_empty() || sets.iter().any(|s| s.name == r.name) {
            d.error(
                &key("name"),
                format_args!(
                    "{:?} — each [[dispatch]] set needs a name of its own",
                    r.name
                ),
            );
        }
        if r.nodes.is_empty() {
            d.error(
                &key("nodes"),
                "is empty — list the nodes, e.g. [\"sip:10.0.0.2:5060;weight=2\"]",
            );
        }
        let nodes = r
            .nodes
            .iter()
            .enumerate()
            .filter_map(|(j, n)| match node(n) {
                Ok(n) => Some(n),
                Err(why) => {
                    d.error(&key(&format!("nodes[{j}]")), format_args!("{n:?} — {why}"));
                    None
                }
            })
            .collect();
        let interval = bounded(d, &key("probe_interval_s"), r.probe_interval_s, 1, 3600);
        let failures = bounded(d, &key("probe_failures"), r.probe_failures, 1, 100);
        let timeout = bounded(d, &key("timeout_ms"), r.timeout_ms, 100, 32_000);
        sets.push(DispatchSet {
            name: r.name,
            nodes,
            probe_interval: Duration::from_secs(interval),
            probe_failures: failures as u32,
            timeout: Duration::from_millis(timeout),
        });
    }
    let all: usize = sets.iter().map(|s| s.nodes.len()).sum();
    if all > crate::metrics::DISPATCH_NODES {
        d.error(
            "dispatch",
            format_args!(
                "{all} nodes in all — at most {} (split the cluster over several edges)",
                crate::metrics::DISPATCH_NODES
            ),
        );
    }
    sets
}

/// A node from `sip:ADDRESS[:PORT][;transport=tcp][;weight=N]`.
fn node(text: &str) -> Result<Node, String> {
    let expected = "expected a SIP URI with an IP address, e.g. \"sip:10.0.0.2:5060;weight=2\"";
    let uri = Uri::parse(text).map_err(|_| expected.to_string())?;
    let peer = crate::bridge::resolve(&uri)
        .filter(|_| uri.user.is_none())
        .ok_or_else(|| expected.to_string())?;
    let weight = match uri.params.get("weight") {
        None => 1,
        Some(w) => w
            .parse()
            .ok()
            .filter(|w| (1..=100).contains(w))
            .ok_or_else(|| format!("weight {w:?} — expected 1 to 100"))?,
    };
    let uri = text
        .split(';')
        .filter(|p| !p.to_ascii_lowercase().starts_with("weight="))
        .collect::<Vec<_>>()
        .join(";");
    Ok(Node { uri, peer, weight })
}

/// `proxy.dispatch`: the set named must exist, and the proxy must have domains to send there.
pub(crate) fn link(
    name: &str,
    sets: &[DispatchSet],
    domains: &[String],
    d: &mut Diagnostics,
) -> Option<usize> {
    if name.is_empty() {
        return None;
    }
    let found = sets.iter().position(|s| s.name == name);
    if found.is_none() {
        let names: Vec<&str> = sets.iter().map(|s| s.name.as_str()).collect();
        d.error(
            "proxy.dispatch",
            format_args!("no [[dispatch]] set is named {name:?} (sets: {names:?})"),
        );
    }
    if domains.is_empty() {
        d.error(
            "proxy.domains",
            format_args!(
                "is empty, so nothing goes to proxy.dispatch = {name:?} — list the domains the \
                 edge serves, e.g. [\"pbx.example.com\"]"
            ),
        );
    }
    found
}

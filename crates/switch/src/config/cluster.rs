//! `[cluster]`: this node among others sharing one Redis (conference rooms and park slots
//! claimed there: cluster.rs).

use serde::Deserialize;
use sip::transaction::Transport;
use sip::Uri;
use std::net::SocketAddr;
use std::sync::Arc;

use super::Diagnostics;

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawCluster {
    pub node_uri: String,
}

/// `[cluster]` as loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cluster {
    /// Where the other nodes send this node's callers (`sip:IP[:PORT]`); None: the first UDP
    /// listen address.
    pub node_uri: Option<String>,
}

pub(crate) fn cluster(raw: RawCluster, d: &mut Diagnostics) -> Cluster {
    let uri = raw.node_uri.trim();
    if uri.is_empty() {
        return Cluster::default();
    }
    // The other nodes bridge to it as to any `bridge sip:…` target: an IP address.
    let ok = Uri::parse(uri).is_ok_and(|u| u.is_sip() && u.user.is_none() && u.ip().is_some());
    if !ok {
        d.error(
            "cluster.node_uri",
            format_args!("{uri:?} is not this node's SIP address: use sip:IP[:PORT] (e.g. \"sip:10.0.0.5:5060\"), no user part"),
        );
    }
    Cluster {
        node_uri: Some(uri.to_string()),
    }
}

impl Cluster {
    /// This node's URI for the others when `store` is shared (Redis), else None: rooms and
    /// slots then stay on this node. Err when it is shared but this node's address cannot be
    /// told (no `cluster.node_uri`, and SIP listens on a wildcard address): the message says
    /// what to set.
    pub fn node(
        &self,
        store: &str,
        listen: &[(Transport, SocketAddr)],
    ) -> Result<Option<Arc<str>>, String> {
        if !store.starts_with("redis://") && !store.starts_with("redis+cluster://") {
            return Ok(None);
        }
        if let Some(u) = &self.node_uri {
            return Ok(Some(u.as_str().into()));
        }
        let udp = listen.iter().find(|(t, _)| *t == Transport::Udp);
        match udp.map(|(_, a)| *a) {
            Some(a) if !a.ip().is_unspecified() => Ok(Some(format!("sip:{a}").into())),
            _ => Err(format!(
                "cluster.node_uri is not set and SIP listens on no address other nodes can reach \
                 (sip.listen): conference rooms and park slots stay on this node; set \
                 cluster.node_uri = \"sip:THIS-NODE-IP:PORT\" to share them with the nodes of \
                 the store {store}"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_store_needs_an_address_the_others_reach() {
        let udp = |a: &str| vec![(Transport::Udp, a.parse().unwrap())];
        let none = Cluster::default();
        let redis = "redis://127.0.0.1:6379";
        assert_eq!(none.node("local:x.snap", &udp("0.0.0.0:5060")), Ok(None));
        assert_eq!(
            none.node("memcached://h:1", &udp("10.0.0.5:5060")),
            Ok(None)
        );
        assert_eq!(
            none.node(redis, &udp("10.0.0.5:5060")),
            Ok(Some("sip:10.0.0.5:5060".into()))
        );
        let e = none.node(redis, &udp("0.0.0.0:5060")).unwrap_err();
        assert!(e.contains("cluster.node_uri = \"sip:"), "{e}");
        let set = Cluster {
            node_uri: Some("sip:10.0.0.6:5070".into()),
        };
        assert_eq!(
            set.node("redis+cluster://h:7000", &udp("0.0.0.0:5060")),
            Ok(Some("sip:10.0.0.6:5070".into()))
        );
    }
}

//! `strowger show peers`: the SIP users with the contacts they registered (read from the location
//! store, as the running switch sees them) and the `[[iax2.peers]]` with the state the running
//! switch last wrote to its data directory (where a dynamic peer registered from, until when, and
//! its last POKE's round trip), and the `[[trunks]]` with where each is registered.

use std::time::{SystemTime, UNIX_EPOCH};
use switch::config::{Config, IaxHost};
use switch::iax::PEERS_STATE;

pub fn show(cfg: &Config) -> Result<(), String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let url = &cfg.registrar.store;
    let store = store::open(url).map_err(|e| format!("registrar.store {url:?}: {e}"))?;
    println!("SIP users (registrar.store {url}):");
    let users = store
        .users()
        .map_err(|e| format!("cannot list users in {url}: {e}"))?;
    if users.is_empty() {
        println!("  none (add one with `strowger user add`)");
    }
    for u in users {
        let aor = format!("{}@{}", u.user, u.domain);
        let bindings = store
            .lookup(&aor, now)
            .map_err(|e| format!("cannot read the contacts of {aor} in {url}: {e}"))?;
        if bindings.is_empty() {
            println!("  {aor:<24} not registered");
        }
        for b in bindings {
            println!(
                "  {aor:<24} {} from {} over {}, expires in {} s",
                b.contact,
                b.received,
                b.transport,
                b.expires_at.saturating_sub(now)
            );
        }
    }
    let path = cfg.general.data_dir.join(PEERS_STATE);
    let state: Option<serde_json::Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    println!(
        "IAX2 peers ([[iax2.peers]]; state {}):",
        match &state {
            Some(s) => format!(
                "as of {} s ago, from {}",
                now.saturating_sub(s["written"].as_f64().unwrap_or(0.0) as u64),
                path.display()
            ),
            None => format!("none in {}: is strowger running with IAX2?", path.display()),
        }
    );
    if cfg.iax2.peers.is_empty() {
        println!("  none");
    }
    for p in &cfg.iax2.peers {
        let st = state.as_ref().map(|s| &s["peers"][&p.name]);
        let at = match p.host {
            IaxHost::Static(a) => a.to_string(),
            IaxHost::Dynamic => {
                let from = st.and_then(|s| s["registered_from"].as_str());
                let until = st
                    .and_then(|s| s["registered_until"].as_f64())
                    .map(|u| u as u64);
                match (from, until) {
                    (Some(f), Some(u)) if u > now => {
                        format!("{f} (registered, expires in {} s)", u - now)
                    }
                    _ => "dynamic (not registered)".into(),
                }
            }
        };
        let reach = match st.map(|s| (&s["reachable"], &s["rtt_ms"])) {
            Some((serde_json::Value::Bool(true), rtt)) => format!("reachable, {rtt} ms"),
            Some((serde_json::Value::Bool(false), _)) => "UNREACHABLE".into(),
            _ => "not qualified".into(),
        };
        let codecs: Vec<&str> = p.codecs.iter().map(|f| f.name()).collect();
        let mut flags = Vec::new();
        if p.trunk {
            flags.push("trunk");
        }
        if p.register {
            flags.push("registers to it");
        }
        println!(
            "  {:<12} {at:<48} {reach:<18} {} {}",
            p.name,
            codecs.join(","),
            flags.join(", ")
        );
    }
    trunks(cfg, now);
    Ok(())
}

/// The `[[trunks]]`: host, and for those that register, where and until when (or why not).
fn trunks(cfg: &Config, now: u64) {
    let path = cfg.general.data_dir.join(switch::trunks::TRUNKS_STATE);
    let state: Option<serde_json::Value> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    println!("SIP trunks ([[trunks]]; state in {}):", path.display());
    if cfg.trunks.is_empty() {
        println!("  none");
    }
    for t in &cfg.trunks {
        let st = state.as_ref().map(|s| &s["trunks"][&t.name]);
        let until = st
            .and_then(|s| s["registered_until"].as_f64())
            .map(|u| u as u64);
        let reg = match (st.and_then(|s| s["registered_at"].as_str()), until) {
            _ if !t.register => "does not register".to_string(),
            (Some(at), Some(u)) if u > now => {
                format!("registered at {at}, expires in {} s", u - now)
            }
            _ => match st.and_then(|s| s["last_error"].as_str()) {
                Some(e) => format!("NOT REGISTERED: {e}"),
                None => "not registered".to_string(),
            },
        };
        println!("  {:<12} {:<32} {reg}", t.name, t.host.uri_host());
    }
}

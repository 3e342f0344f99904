//! `strowger ctl`: the control API from the command line — tables for people, `--json` for
//! scripts. It finds the API and its token as the server does (`--config`, `--data-dir`), or
//! takes `--api URL --token T`.

use clap::{Args, Subcommand};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use switch::config::Config;

#[derive(Args)]
pub struct CtlArgs {
    /// The API's base URL (default: api.listen of the configuration, https:// with api.tls_cert).
    #[arg(long, value_name = "URL")]
    api: Option<String>,
    /// For an https:// API: the PEM certificate(s) to trust (default: api.tls_cert).
    #[arg(long, value_name = "FILE")]
    ca: Option<std::path::PathBuf>,
    /// The bearer token (default: api.token, or the data directory's api.token).
    #[arg(long)]
    token: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    cmd: CtlCmd,
}

#[derive(Subcommand)]
enum CtlCmd {
    /// Show calls in progress, registrations, IAX2 peers, the counters, or the translation
    /// matrix (µs of CPU per second of audio between two formats).
    Show {
        #[arg(value_parser = ["calls", "registrations", "peers", "stats", "translation"])]
        what: String,
    },
    /// Read the configuration file again and apply it, as SIGHUP does; a configuration that
    /// fails its check changes nothing and its errors are printed.
    Reload,
    /// Hang a call up (BYE/CANCEL on every leg; the CDR says the cause).
    Hangup {
        /// The call's id (its caller's Call-ID, as `ctl show calls` lists it).
        id: String,
        /// normal, busy, rejected, noanswer, or a Q.850 name or number.
        #[arg(long, default_value = "normal")]
        cause: String,
    },
    /// Place a call: ring FROM (a user, or a sip: URI at a trusted peer) and, once it answers,
    /// run the dialplan for TO on that leg. Prints the new call's id.
    Originate {
        from: String,
        to: String,
        /// The dialplan context (default: dialplan.default_context).
        #[arg(long)]
        context: Option<String>,
        /// The number FROM's phone shows (default: TO).
        #[arg(long)]
        caller_id: Option<String>,
        /// How long FROM may ring, in seconds.
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Digits as if the call's caller (or `--leg callee`) pressed them: the call's app hears
    /// them, the party bridged to it gets them in its own DTMF form.
    Dtmf {
        id: String,
        digits: String,
        #[arg(long, value_parser = ["caller", "callee"])]
        leg: Option<String>,
    },
    /// Start or stop recording a call (stereo; `--file` under the data directory, default
    /// calls/CALL-ID.wav).
    Record {
        id: String,
        #[arg(value_parser = ["start", "stop"])]
        what: String,
        #[arg(long)]
        file: Option<String>,
    },
    /// Blind transfer of a bridged call's caller (or `--leg callee`) to an extension of the
    /// call's context; the other party is released.
    Transfer {
        id: String,
        to: String,
        #[arg(long, value_parser = ["caller", "callee"])]
        leg: Option<String>,
    },
    /// Play a prompt to a bridged call's caller (or `--leg callee`) in place of its party
    /// until it ends: demo, tts:TEXT, or a WAV file under the data directory.
    Play {
        id: String,
        file: String,
        #[arg(long, value_parser = ["caller", "callee"])]
        leg: Option<String>,
    },
    /// Mute the caller (or `--leg callee`): `in`, what it says reaches nobody; `out`, it hears
    /// nothing; `both`. `--off` undoes it.
    Mute {
        id: String,
        #[arg(value_parser = ["in", "out", "both"], default_value = "in")]
        direction: String,
        #[arg(long, value_parser = ["caller", "callee"])]
        leg: Option<String>,
        #[arg(long)]
        off: bool,
    },
    /// Print the event stream until interrupted, one event a line.
    Events {
        /// Comma-separated: call, dtmf, registration, peer, overload (default: all).
        #[arg(long)]
        types: Option<String>,
    },
}

/// The API's address and token, from the flags or the configuration and its data directory.
struct Endpoint {
    base: String,
    token: String,
    /// The certificates an https:// API must present one of; None for http://.
    ca: Option<Vec<rustls::pki_types::CertificateDer<'static>>>,
}

fn endpoint(args: &CtlArgs, cfg: &Config) -> Result<Endpoint, String> {
    let scheme = if cfg.api.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let base = match (&args.api, cfg.api.listen) {
        (Some(u), _) => u.trim_end_matches('/').to_string(),
        (None, Some(a)) => format!("{scheme}://{a}"),
        (None, None) => {
            return Err(
                "the API is off (api.listen = \"\"): set api.listen, or give --api URL".into(),
            )
        }
    };
    let token = match (&args.token, &cfg.api.token) {
        (Some(t), _) | (None, Some(t)) => t.clone(),
        (None, None) => read_token(&cfg.general.data_dir)?,
    };
    let ca = match (base.starts_with("https://"), &args.ca, &cfg.api.tls) {
        (false, _, _) => None,
        (true, Some(f), _) => Some(crate::tls::read_certs(f, "--ca")?),
        (true, None, Some(t)) => Some(crate::tls::read_certs(&t.cert, "api.tls_cert")?),
        (true, None, None) => {
            return Err(format!(
                "{base} is https: give --ca FILE, the certificate it presents (or its CA)"
            ))
        }
    };
    Ok(Endpoint { base, token, ca })
}

fn read_token(data_dir: &Path) -> Result<String, String> {
    let path = data_dir.join(crate::api::TOKEN_FILE);
    std::fs::read_to_string(&path)
        .map(|t| t.trim().to_string())
        .map_err(|e| {
            format!(
                "cannot read the API token {}: {e} — start strowger once (it makes one), give \
                 --data-dir as the server has it, or --token",
                path.display()
            )
        })
}

pub fn run(args: CtlArgs, cfg: &Config) -> Result<(), String> {
    let ep = endpoint(&args, cfg)?;
    match &args.cmd {
        CtlCmd::Show { what } if what == "calls" => {
            let v = request(&ep, "GET", "/api/v1/calls?limit=1000")?;
            match args.json {
                true => println!("{v}"),
                false => print_calls(&v),
            }
        }
        CtlCmd::Show { what } if what == "registrations" => {
            let v = request(&ep, "GET", "/api/v1/registrations?limit=1000")?;
            match args.json {
                true => println!("{v}"),
                false => print_registrations(&v),
            }
        }
        CtlCmd::Show { what } if what == "peers" => {
            let v = request(&ep, "GET", "/api/v1/iax2/peers")?;
            match args.json {
                true => println!("{v}"),
                false => print_peers(&v),
            }
        }
        CtlCmd::Show { what } if what == "translation" => {
            let v = request(&ep, "GET", "/api/v1/translation")?;
            match args.json {
                true => println!("{v}"),
                false => print_translation(&v),
            }
        }
        CtlCmd::Reload => {
            let v = request(&ep, "POST", "/api/v1/reload")?;
            match args.json {
                true => println!("{v}"),
                false => print_reload(&v),
            }
        }
        CtlCmd::Show { .. } => {
            let v = request(&ep, "GET", "/api/v1/stats")?;
            match args.json {
                true => println!("{v}"),
                false => print_fields(&v),
            }
        }
        CtlCmd::Hangup { id, cause } => {
            let path = format!("/api/v1/calls/{}?cause={}", encode(id), encode(cause));
            let v = request(&ep, "DELETE", &path)?;
            match args.json {
                true => println!("{v}"),
                false => println!("hung up {id} (cause {})", v["cause"]),
            }
        }
        CtlCmd::Originate {
            from,
            to,
            context,
            caller_id,
            timeout,
        } => {
            let body = serde_json::json!({
                "from": from, "to": to, "context": context,
                "caller_id": caller_id, "timeout_s": timeout,
            });
            let body = strip_nulls(body);
            let v = send(&ep, "POST", "/api/v1/calls", Some(&body))?;
            let id = v["id"].as_str().unwrap_or("?");
            done(&v, args.json, &format!("calling {from} for {to}: {id}"));
        }
        CtlCmd::Dtmf { id, digits, leg } => {
            let body = strip_nulls(serde_json::json!({ "digits": digits, "leg": leg }));
            let v = send(
                &ep,
                "POST",
                &format!("/api/v1/calls/{}/dtmf", encode(id)),
                Some(&body),
            )?;
            done(&v, args.json, &format!("sent {digits} in {id}"));
        }
        CtlCmd::Record { id, what, file } => {
            let path = format!("/api/v1/calls/{}/record", encode(id));
            let v = match what.as_str() {
                "start" => {
                    let body = strip_nulls(serde_json::json!({ "file": file }));
                    send(&ep, "POST", &path, Some(&body))?
                }
                _ => request(&ep, "DELETE", &path)?,
            };
            done(&v, args.json, &format!("recording of {id}: {what}"));
        }
        CtlCmd::Transfer { id, to, leg } => {
            let body = strip_nulls(serde_json::json!({ "to": to, "leg": leg }));
            let path = format!("/api/v1/calls/{}/transfer", encode(id));
            let v = send(&ep, "POST", &path, Some(&body))?;
            done(&v, args.json, &format!("transferring {id} to {to}"));
        }
        CtlCmd::Play { id, file, leg } => {
            let body = strip_nulls(serde_json::json!({ "file": file, "leg": leg }));
            let path = format!("/api/v1/calls/{}/play", encode(id));
            let v = send(&ep, "POST", &path, Some(&body))?;
            done(&v, args.json, &format!("playing {file} in {id}"));
        }
        CtlCmd::Mute {
            id,
            direction,
            leg,
            off,
        } => {
            let path = format!("/api/v1/calls/{}/mute", encode(id));
            let v = if *off {
                let query = leg
                    .as_deref()
                    .map_or(String::new(), |l| format!("?leg={l}"));
                request(&ep, "DELETE", &format!("{path}{query}"))?
            } else {
                let body = strip_nulls(serde_json::json!({ "direction": direction, "leg": leg }));
                send(&ep, "POST", &path, Some(&body))?
            };
            let what = if *off { "unmuted" } else { "muted" };
            done(&v, args.json, &format!("{id}: {what}"));
        }
        CtlCmd::Events { types } => tail(&ep, types.as_deref(), args.json)?,
    }
    Ok(())
}

/// A command's answer: its JSON for scripts, `line` for people.
fn done(v: &Value, json: bool, line: &str) {
    match json {
        true => println!("{v}"),
        false => println!("{line}"),
    }
}

/// The fields of an object that are set (the API takes an absent field, not a null).
fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(o.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        v => v,
    }
}

/// One request; the API's `{"error"}` becomes the error.
fn request(ep: &Endpoint, method: &str, path: &str) -> Result<Value, String> {
    send(ep, method, path, None)
}

/// One request with a JSON body for a POST.
fn send(ep: &Endpoint, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
    let mut config = ureq::Agent::config_builder();
    if let Some(ca) = &ep.ca {
        let roots = ca
            .iter()
            .map(|c| ureq::tls::Certificate::from_der(c).to_owned())
            .collect();
        let tls = ureq::tls::TlsConfig::builder()
            .unversioned_rustls_crypto_provider(crate::tls::provider())
            .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
            .build();
        config = config.tls_config(tls);
    }
    let agent: ureq::Agent = config
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(10)))
        .build()
        .into();
    let url = format!("{}{path}", ep.base);
    let auth = format!("Bearer {}", ep.token);
    let sent = match method {
        "DELETE" => agent.delete(&url).header("Authorization", &auth).call(),
        "POST" => {
            let post = agent.post(&url).header("Authorization", &auth);
            match body {
                Some(b) => post.send_json(b),
                None => post.send_empty(),
            }
        }
        _ => agent.get(&url).header("Authorization", &auth).call(),
    };
    let resp =
        sent.map_err(|e| format!("{url}: {e} — is strowger running with this api.listen?"))?;
    let status = resp.status();
    let v: Value = resp
        .into_body()
        .read_json()
        .map_err(|e| format!("{url}: {status}, unreadable answer: {e}"))?;
    match status.is_success() {
        true => Ok(v),
        false => {
            // A refused reload lists every problem, as check-config does.
            let details: Vec<&str> = v["errors"]
                .as_array()
                .map(|e| e.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut msg = format!("{status}: {}", v["error"].as_str().unwrap_or("?"));
            for d in details {
                msg.push_str("\n  ");
                msg.push_str(d);
            }
            Err(msg)
        }
    }
}

/// Percent-encodes what is not unreserved (RFC 3986), for a Call-ID in a path.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn print_calls(v: &Value) {
    let calls = v["calls"].as_array().cloned().unwrap_or_default();
    println!(
        "{:<40} {:<9} {:<10} {:<8} {:>8}  LEGS",
        "ID", "STATE", "CONTEXT", "EXTEN", "SECONDS"
    );
    for c in &calls {
        let legs: Vec<String> = c["legs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                let s = |k: &str| l[k].as_str().unwrap_or("").to_string();
                format!("{} {} {} {}", s("role"), s("peer"), s("state"), s("codec"))
            })
            .collect();
        let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
        println!(
            "{:<40} {:<9} {:<10} {:<8} {:>8.1}  {}",
            s("id"),
            s("state"),
            s("context"),
            s("exten"),
            c["duration_s"].as_f64().unwrap_or(0.0),
            legs.join("; ")
        );
    }
    println!("{} call(s)", calls.len());
}

fn print_registrations(v: &Value) {
    println!(
        "{:<24} {:<40} {:<22} {:>8}",
        "AOR", "CONTACT", "FROM", "EXPIRES"
    );
    for r in v["registrations"].as_array().into_iter().flatten() {
        for c in r["contacts"].as_array().into_iter().flatten() {
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            println!(
                "{:<24} {:<40} {:<22} {:>8}",
                r["aor"].as_str().unwrap_or(""),
                s("contact"),
                s("received"),
                c["expires_in"]
            );
        }
    }
}

fn print_peers(v: &Value) {
    println!(
        "{:<12} {:<24} {:<24} {:<10} CODECS",
        "PEER", "HOST", "REGISTERED FROM", "REACHABLE"
    );
    for p in v["peers"].as_array().into_iter().flatten() {
        let s = |k: &str| p[k].as_str().unwrap_or("-").to_string();
        let reach = match p["reachable"].as_bool() {
            Some(true) => format!("{} ms", p["rtt_ms"]),
            Some(false) => "NO".into(),
            None => "-".into(),
        };
        let codecs: Vec<&str> = p["codecs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        println!(
            "{:<12} {:<24} {:<24} {reach:<10} {}",
            s("name"),
            s("host"),
            s("registered_from"),
            codecs.join(",")
        );
    }
}

fn print_fields(v: &Value) {
    if let Some(o) = v.as_object() {
        for (k, val) in o.iter().filter(|(_, val)| !val.is_array()) {
            println!("{k:<22} {val}");
        }
        for w in v["workers"].as_array().into_iter().flatten() {
            println!("worker {w}");
        }
    }
}

/// Prints events as they come (the stream's JSON with `--json`, else a short line each).
fn tail(ep: &Endpoint, types: Option<&str>, json: bool) -> Result<(), String> {
    use tungstenite::client::IntoClientRequest;
    let ws = ep.base.replacen("http", "ws", 1);
    let url = match types {
        Some(t) => format!("{ws}/api/v1/events?types={}", encode(t)),
        None => format!("{ws}/api/v1/events"),
    };
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| format!("{url}: {e}"))?;
    let auth = format!("Bearer {}", ep.token);
    req.headers_mut().insert(
        "Authorization",
        auth.parse()
            .map_err(|_| "the token is not a valid header value")?,
    );
    match &ep.ca {
        None => {
            let (socket, _) = tungstenite::connect(req).map_err(|e| format!("{url}: {e}"))?;
            print_events(socket, &url, json)
        }
        Some(ca) => {
            let tls = crate::tls::client_config(ca)?;
            let host = req.uri().host().unwrap_or_default().to_string();
            let port = req.uri().port_u16().unwrap_or(443);
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| format!("{url}: {e}"))?;
            let conn = rustls::ClientConnection::new(tls, name).map_err(|e| e.to_string())?;
            let tcp = std::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
                .map_err(|e| format!("{url}: {e}"))?;
            let stream = rustls::StreamOwned::new(conn, tcp);
            let (socket, _) =
                tungstenite::client(req, stream).map_err(|e| format!("{url}: {e}"))?;
            print_events(socket, &url, json)
        }
    }
}

fn print_events<S: std::io::Read + std::io::Write>(
    mut socket: tungstenite::WebSocket<S>,
    url: &str,
    json: bool,
) -> Result<(), String> {
    loop {
        match socket.read().map_err(|e| format!("{url}: {e}"))? {
            tungstenite::Message::Text(t) if json => println!("{t}"),
            tungstenite::Message::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap_or_default();
                let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
                let detail = match s("type").as_str() {
                    "overload" => format!("worker {}", v["worker"]),
                    "dtmf" => format!("{} digit {}", s("call_id"), s("digit")),
                    _ => s("call_id"),
                };
                println!(
                    "{:.3} {} {} {detail}",
                    v["time"].as_f64().unwrap_or(0.0),
                    s("type"),
                    s("event")
                );
            }
            tungstenite::Message::Close(f) => {
                return Err(format!("the server closed the stream: {f:?}"));
            }
            _ => {}
        }
    }
}

/// The translation matrix as `strowger show translation` prints it: rows from, columns to.
fn print_translation(v: &Value) {
    let names: Vec<&str> = v["formats"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    print!("{:>9}", "");
    for n in &names {
        print!("{n:>9}");
    }
    println!();
    let rows = v["cost_us"].as_array().cloned().unwrap_or_default();
    for (n, row) in names.iter().zip(rows) {
        print!("{n:>9}");
        for c in row.as_array().cloned().unwrap_or_default() {
            match c.as_f64() {
                Some(us) => print!("{us:>9.0}"),
                None => print!("{:>9}", "-"),
            }
        }
        println!();
    }
}

fn print_reload(v: &Value) {
    println!("reloaded");
    let list = |k: &str| -> Vec<String> {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for w in list("warnings") {
        println!("warning: {w}");
    }
    for k in list("needs_restart") {
        println!("needs a restart: {k} (left as it was)");
    }
    if v["log_level_pinned"].as_bool() == Some(true) {
        println!("general.log_level not applied: RUST_LOG sets the log level");
    }
}

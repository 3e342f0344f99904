//! `strowger`: the softswitch process. Loads the configuration, starts one worker per core and
//! hands the main thread to the supervisor (SIGHUP reloads, SIGTERM drains, SIGINT stops).

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use strowger::launch::{self, Launch, Overrides};
use strowger::{codec_cli, ctl, logging, peers, runtime, users};
use switch::config::Config;

#[derive(Parser)]
#[command(
    name = "strowger",
    version,
    about = "An open-source softswitch and IP PBX"
)]
struct Cli {
    /// TOML configuration file (default: the embedded demo configuration on 127.0.0.1).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Listen for SIP on this address (UDP and TCP), replacing sip.listen.
    #[arg(long, value_name = "ADDR:PORT")]
    sip_listen: Option<String>,
    /// Also listen for SIP over TLS on this address (after --sip-listen, which drops sip.listen's
    /// tls: entries).
    #[arg(long, value_name = "ADDR:PORT")]
    tls_listen: Option<String>,
    /// Also listen for SIP over WebSocket (RFC 7118) on this address.
    #[arg(long, value_name = "ADDR:PORT")]
    ws_listen: Option<String>,
    /// Also listen for SIP over secure WebSocket on this address (the TLS certificate).
    #[arg(long, value_name = "ADDR:PORT")]
    wss_listen: Option<String>,
    /// Listen for IAX2 on this UDP address, replacing iax2.listen (IAX2 is off without it).
    #[arg(long, value_name = "ADDR:PORT")]
    iax_listen: Option<String>,
    /// Serve the control API on this loopback address, replacing api.listen ("" for none).
    #[arg(long, value_name = "ADDR:PORT")]
    api_listen: Option<String>,
    /// RTP port range, replacing rtp.ports.
    #[arg(long, value_name = "LO-HI")]
    rtp_ports: Option<String>,
    /// Directory for recordings, prompts and CDRs, replacing general.data_dir.
    #[arg(long, value_name = "DIR", global = true)]
    data_dir: Option<String>,
    /// Number of workers (threads), replacing general.workers (0 = one per core).
    #[arg(long)]
    workers: Option<usize>,
    /// Log from this level up, replacing general.log_level (debug adds every SIP message).
    #[arg(long, value_name = "LEVEL", value_parser = switch::config::LogLevel::NAMES)]
    log_level: Option<String>,
    /// The location and credential store, replacing registrar.store: local:PATH,
    /// redis://HOST:PORT, redis+cluster://HOST:PORT,… or memcached://HOST:PORT.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
    /// Set a dialplan variable ([vars]), e.g. --var bridge_target=127.0.0.1:5090.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Validate a configuration file and report every problem with file, line and key.
    CheckConfig { file: PathBuf },
    /// Print the embedded default configuration (a starting point for your own).
    DefaultConfig,
    /// Operate a running strowger through its control API: `ctl show calls|registrations|peers|stats`,
    /// `ctl hangup ID`, `ctl events` (`--json` for scripts).
    Ctl(ctl::CtlArgs),
    /// Manage the users phones register as (digest credentials in the store).
    #[command(subcommand)]
    User(users::UserCmd),
    /// Encode, decode or round-trip a file with one codec (WAV in; WAV out for roundtrip), or
    /// transcode a coded file to another codec (`transcode --codec FROM --to TO`) along the
    /// translation graph's path, printing the CPU it took per frame. Encoders use the
    /// configuration's settings (`rtp.speex_quality`, `rtp.opus_*`), as calls do.
    Codec {
        /// encode, decode, roundtrip or transcode
        #[arg(value_parser = ["encode", "decode", "roundtrip", "transcode"])]
        op: String,
        #[arg(long)]
        codec: String,
        /// The codec to transcode to (transcode only).
        #[arg(long)]
        to: Option<String>,
        input: PathBuf,
        output: PathBuf,
    },
    /// Show state: `show translation [--paths]` measures codec costs (at the configuration's
    /// settings) and prints the matrix and each format's implementation;
    /// `show peers` lists SIP users with their registered contacts, IAX2 peers with their
    /// registration and reachability, and SIP trunks with where each is registered.
    Show {
        #[arg(value_parser = ["translation", "peers"])]
        what: String,
        /// Also list every path step by step.
        #[arg(long)]
        paths: bool,
    },
}

/// A configuration file read and checked, or the lines check-config prints about it.
fn load(path: Option<&PathBuf>) -> Result<Config, String> {
    launch::read(path).map_err(|lines| lines.join("\n"))
}

fn finish(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::CheckConfig { file }) => {
            return match load(Some(&file)) {
                Ok(cfg) => {
                    for w in &cfg.warnings {
                        eprintln!("{w}");
                    }
                    println!("{}: OK", file.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            };
        }
        Some(Command::Codec {
            op,
            codec,
            to,
            input,
            output,
        }) => {
            return match load(cli.config.as_ref()) {
                Ok(cfg) => finish(codec_cli::run(
                    &op,
                    &codec,
                    to.as_deref(),
                    &input,
                    &output,
                    &cfg.rtp,
                )),
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            };
        }
        Some(Command::Show { what, paths }) if what == "translation" => {
            return match load(cli.config.as_ref()) {
                Ok(cfg) => finish(codec_cli::show_translation(paths, &cfg.rtp)),
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(2)
                }
            };
        }
        Some(Command::Show { .. }) => {
            let mut cfg = match load(cli.config.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            if let Some(Err(e)) = cli.data_dir.as_deref().map(|v| cfg.override_data_dir(v)) {
                eprintln!("strowger: {e}");
                return ExitCode::from(2);
            }
            return finish(peers::show(&cfg));
        }
        Some(Command::Ctl(args)) => {
            let mut cfg = match load(cli.config.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            if let Some(Err(e)) = cli.data_dir.as_deref().map(|v| cfg.override_data_dir(v)) {
                eprintln!("strowger: {e}");
                return ExitCode::from(2);
            }
            return finish(ctl::run(args, &cfg).map_err(|e| format!("strowger ctl: {e}")));
        }
        Some(Command::DefaultConfig) => {
            print!("{}", switch::config::DEFAULT_TOML);
            return ExitCode::SUCCESS;
        }
        Some(Command::User(cmd)) => {
            let cfg = match load(cli.config.as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            return match users::run(cmd, &cfg) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("strowger: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        None => {}
    }
    let launch = Launch {
        file: cli.config,
        overrides: Overrides {
            sip_listen: cli.sip_listen,
            tls_listen: cli.tls_listen,
            ws_listen: cli.ws_listen,
            wss_listen: cli.wss_listen,
            iax_listen: cli.iax_listen,
            rtp_ports: cli.rtp_ports,
            data_dir: cli.data_dir,
            workers: cli.workers,
            log_level: cli.log_level,
            api_listen: cli.api_listen,
            store: cli.store,
            vars: cli.vars,
        },
    };
    let cfg = match launch.load() {
        Ok(c) => c,
        Err(lines) => {
            eprintln!("{}", lines.join("\n"));
            return ExitCode::from(2);
        }
    };
    // From here on the server logs: errors and warnings too, so a log collector sees them.
    logging::init(cfg.general.log_level, cfg.general.log_format);
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    match runtime::run(cfg, launch) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

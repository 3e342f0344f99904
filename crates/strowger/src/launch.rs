//! Where the server's configuration comes from: the file it was started with (or the embedded
//! one) and the command line's overrides. Kept whole so a reload reads the file again and puts
//! the same overrides on top, as the start did.

use std::path::PathBuf;
use switch::config::{Config, Transport};

/// The command line's replacements for configuration keys (`None`: the file's value).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub sip_listen: Option<String>,
    /// `--tls-listen ADDR:PORT`: one more `tls:` listener.
    pub tls_listen: Option<String>,
    /// `--ws-listen` and `--wss-listen`.
    pub ws_listen: Option<String>,
    pub wss_listen: Option<String>,
    pub iax_listen: Option<String>,
    pub rtp_ports: Option<String>,
    pub data_dir: Option<String>,
    pub workers: Option<usize>,
    pub log_level: Option<String>,
    /// `--api-listen ADDR` ("" for no API).
    pub api_listen: Option<String>,
    /// `--store URL`, replacing registrar.store.
    pub store: Option<String>,
    /// `--var NAME=VALUE`.
    pub vars: Vec<String>,
}

/// The configuration file (None: the embedded one) and the overrides.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    pub file: Option<PathBuf>,
    pub overrides: Overrides,
}

impl Launch {
    /// The configuration as `strowger check-config` checks it, with the overrides applied; on
    /// failure, the lines check-config prints (file:line:column: key: problem, then a count).
    pub fn load(&self) -> Result<Config, Vec<String>> {
        let mut cfg = read(self.file.as_ref())?;
        self.overrides
            .apply(&mut cfg)
            .map_err(|e| vec![format!("strowger: {e}")])?;
        Ok(cfg)
    }
}

/// The configuration file `path` parsed and checked (None: the embedded configuration).
pub fn read(path: Option<&PathBuf>) -> Result<Config, Vec<String>> {
    let Some(p) = path else {
        return Ok(Config::embedded());
    };
    let text = std::fs::read_to_string(p)
        .map_err(|e| vec![format!("{}: cannot read: {e}", p.display())])?;
    Config::from_str(&text, &p.display().to_string()).map_err(|errs| {
        let problems = errs.iter().filter(|e| !e.warning).count();
        errs.iter()
            .map(ToString::to_string)
            .chain([format!("{problems} problem(s) in the configuration")])
            .collect()
    })
}

impl Overrides {
    pub fn apply(&self, cfg: &mut Config) -> Result<(), String> {
        if let Some(v) = &self.sip_listen {
            cfg.override_sip_listen(v)?;
        }
        let extra = [
            (Transport::Tls, &self.tls_listen),
            (Transport::Ws, &self.ws_listen),
            (Transport::Wss, &self.wss_listen),
        ];
        for (transport, addr) in extra {
            if let Some(a) = addr {
                cfg.add_listen(transport, a)?;
            }
        }
        if let Some(v) = &self.rtp_ports {
            cfg.override_rtp_ports(v)?;
        }
        if let Some(v) = &self.data_dir {
            cfg.override_data_dir(v)?;
        }
        if let Some(v) = &self.iax_listen {
            cfg.iax2.override_listen(v)?;
        }
        if let Some(v) = &self.log_level {
            cfg.override_log_level(v)?;
        }
        if let Some(v) = &self.api_listen {
            cfg.api.override_listen(v)?;
        }
        if let Some(v) = &self.store {
            // The store's own message names every form it takes.
            v.parse::<store::StoreUrl>()
                .map_err(|e| format!("--store {e}"))?;
            cfg.registrar.store.clone_from(v);
        }
        if let Some(w) = self.workers {
            if w > 64 {
                return Err(format!(
                    "--workers {w} — at most 64 workers (0 = one per core)"
                ));
            }
            cfg.general.workers = w;
        }
        for v in &self.vars {
            let Some((name, value)) = v.split_once('=') else {
                return Err(format!(
                    "--var {v:?} — expected NAME=VALUE, e.g. --var bridge_target=127.0.0.1:5090"
                ));
            };
            cfg.dialplan.set_global(name, value);
        }
        Ok(())
    }
}

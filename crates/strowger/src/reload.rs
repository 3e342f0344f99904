//! The reload handle: reads the configuration again as the process started with it (the same
//! file, the same command-line overrides), checks it as `strowger check-config` does, and if it
//! passes hands it to every worker through its inbox (`switch::Input::Reload`). A configuration
//! that fails changes nothing: the errors are returned (and logged by the SIGHUP path).
//!
//! SIGHUP calls it, and so does the control API (`POST /api/v1/reload`, `strowger ctl reload`).

use crate::launch::Launch;
use crate::worker::{Envelope, Mailboxes};
use std::sync::{Arc, Mutex};
use switch::config::Config;

/// Cheap to clone; any thread may call [`Reloader::reload`] (reloads take turns).
#[derive(Clone)]
pub struct Reloader {
    inner: Arc<Inner>,
}

struct Inner {
    launch: Launch,
    /// The configuration in force (with the keys only a restart changes as at start): the one
    /// source every reader of the configuration after start goes to ([`Reloader::config`]).
    current: Mutex<Arc<Config>>,
    mail: Arc<Mailboxes>,
    workers: usize,
    /// Where `[[users]]` are loaded, as at start.
    store: Arc<dyn store::Store>,
}

/// What a reload that passed did.
#[derive(Debug, serde::Serialize)]
pub struct ReloadReport {
    /// Keys that changed but take effect only at the next start ("needs a restart: KEY").
    pub needs_restart: Vec<&'static str>,
    /// Warnings of the new configuration (as check-config prints them).
    pub warnings: Vec<String>,
    /// Whether a changed `general.log_level` was left alone because RUST_LOG governs the log.
    pub log_level_pinned: bool,
}

impl Reloader {
    pub fn new(
        launch: Launch,
        current: Config,
        mail: Arc<Mailboxes>,
        workers: usize,
        store: Arc<dyn store::Store>,
    ) -> Reloader {
        Reloader {
            inner: Arc::new(Inner {
                launch,
                current: Mutex::new(Arc::new(current)),
                mail,
                workers,
                store,
            }),
        }
    }

    /// Reads, checks and applies the configuration; `Err`: every problem, nothing changed.
    pub fn reload(&self) -> Result<ReloadReport, Vec<String>> {
        let new = self.inner.launch.load()?;
        let mut current = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        let needs_restart = switch::reload::needs_restart(&current, &new);
        let new = switch::reload::keep_restart_keys(&current, new);
        crate::runtime::load_users(&*self.inner.store, &new.users).map_err(|e| vec![e])?;
        let log_level_pinned = new.general.log_level != current.general.log_level
            && !crate::logging::set_level(new.general.log_level);
        // Read again whether or not `[moh.*]` changed: files may have been added or replaced.
        let music = crate::music::load(&new.music, &new.general.data_dir);
        let r = Arc::new(switch::Reload::new(new.clone()).with_music(Arc::new(music)));
        for w in 0..self.inner.workers {
            self.inner.mail.send(w, Envelope::Reload(r.clone()));
        }
        let warnings = new.warnings.iter().map(ToString::to_string).collect();
        *current = Arc::new(new);
        Ok(ReloadReport {
            needs_restart,
            warnings,
            log_level_pinned,
        })
    }

    /// The configuration in force: as started, or as the last reload that passed left it.
    pub fn config(&self) -> Arc<Config> {
        let current = self.inner.current.lock().unwrap_or_else(|e| e.into_inner());
        current.clone()
    }

    /// `general.drain_timeout_s` as last loaded.
    pub fn drain_timeout(&self) -> std::time::Duration {
        self.config().general.drain_timeout
    }

    /// [`Reloader::reload`], with what it did or why not in the log (SIGHUP and the API).
    pub fn reload_and_log(&self) -> Result<ReloadReport, Vec<String>> {
        let file = self
            .inner
            .launch
            .file
            .as_ref()
            .map_or("the embedded configuration".into(), |f| {
                f.display().to_string()
            });
        let result = self.reload();
        match &result {
            Ok(r) => {
                tracing::info!("reloaded {file}");
                for w in &r.warnings {
                    tracing::warn!("{w}");
                }
                for key in &r.needs_restart {
                    tracing::warn!("reload of {file}: needs a restart: {key} (left as it was)");
                }
                if r.log_level_pinned {
                    tracing::warn!(
                        "reload of {file}: general.log_level not applied: RUST_LOG sets the log level"
                    );
                }
            }
            Err(errors) => {
                for e in errors {
                    tracing::error!("reload refused: {e}");
                }
                tracing::error!(
                    "reload of {file} refused: the configuration in force is unchanged (fix the \
                     file, `strowger check-config {file}`, then reload again)"
                );
            }
        }
        result
    }
}

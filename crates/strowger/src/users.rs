//! `strowger user add|del|list|passwd`: the users phones register and call as. Passwords are
//! stored as digest HA1s (MD5 and SHA-256 of user:domain:password), never as text; with them,
//! each user's call settings (context, caller ID, call limit, allowed patterns).

use clap::Subcommand;
use switch::config::Config;

#[derive(Subcommand)]
pub enum UserCmd {
    /// Add a user (or replace it, password and settings).
    Add {
        user: String,
        #[arg(long)]
        password: String,
        /// Default: registrar.domain of the configuration.
        #[arg(long)]
        domain: Option<String>,
        /// The dialplan context the user's calls run in (default: dialplan.default_context).
        #[arg(long)]
        context: Option<String>,
        /// The caller ID of the user's calls: a number, or "\"Name\" <number>" (default: the
        /// user name).
        #[arg(long, value_name = "ID")]
        caller_id: Option<String>,
        /// Calls the user may have at once (default 0: no limit).
        #[arg(long, value_name = "N", default_value_t = 0)]
        max_calls: u32,
        /// A regex the dialled extension must match; repeat for more (default: anything the
        /// user's context routes).
        #[arg(long, value_name = "REGEX")]
        allow: Vec<String>,
        /// Default: registrar.store of the configuration.
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
    /// Remove a user.
    Del {
        user: String,
        #[arg(long)]
        domain: Option<String>,
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
    /// List users.
    List {
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
    /// Change a user's password (its settings stay).
    Passwd {
        user: String,
        #[arg(long)]
        password: String,
        #[arg(long)]
        domain: Option<String>,
        #[arg(long, value_name = "URL")]
        store: Option<String>,
    },
}

fn open(url: Option<&String>, cfg: &Config) -> Result<std::sync::Arc<dyn store::Store>, String> {
    let url = url.map_or(cfg.registrar.store.as_str(), String::as_str);
    store::open(url).map_err(|e| format!("--store: {e}"))
}

fn check_name(user: &str) -> Result<(), String> {
    if user.is_empty() || user.contains(['@', ':', ' ', '"']) {
        return Err(format!(
            "{user:?} — expected a SIP user name such as 1001 (no @, :, spaces or quotes)"
        ));
    }
    Ok(())
}

/// A user to add, as `user add` and the control API take it.
#[derive(serde::Deserialize)]
pub struct NewUser {
    pub user: String,
    pub password: String,
    /// Default: registrar.domain.
    pub domain: Option<String>,
    pub context: Option<String>,
    pub caller_id: Option<String>,
    #[serde(default)]
    pub max_calls: u32,
    #[serde(default)]
    pub allow: Vec<String>,
}

impl NewUser {
    /// The user's credentials (HA1s, never the password), once every setting checks out
    /// against `cfg`.
    pub fn credentials(self, cfg: &Config) -> Result<store::Credentials, String> {
        check_name(&self.user)?;
        if self.password.is_empty() {
            return Err("password must not be empty".into());
        }
        if let Some(c) = self
            .context
            .as_ref()
            .filter(|c| !cfg.dialplan.has_context(c))
        {
            return Err(format!(
                "context {c:?}: the configuration has no such dialplan context (give the \
                 configuration the switch runs with: strowger --config FILE user add ...)"
            ));
        }
        if let Some(id) = &self.caller_id {
            switch::auth::CallerId::parse(id).map_err(|e| format!("caller ID {e}"))?;
        }
        for a in &self.allow {
            switch::auth::check_pattern(a).map_err(|e| format!("allow {e}"))?;
        }
        let domain = self.domain.unwrap_or_else(|| cfg.registrar.domain.clone());
        Ok(store::Credentials {
            context: self.context,
            caller_id: self.caller_id,
            max_calls: self.max_calls,
            allow: self.allow,
            ..switch::registrar::credentials(&self.user, &domain, &self.password)
        })
    }
}

/// `old` with a new password (its settings and forwarding stay).
pub fn with_password(
    old: store::Credentials,
    password: &str,
) -> Result<store::Credentials, String> {
    if password.is_empty() {
        return Err("password must not be empty".into());
    }
    let new = switch::registrar::credentials(&old.user, &old.domain, password);
    Ok(store::Credentials {
        ha1_md5: new.ha1_md5,
        ha1_sha256: new.ha1_sha256,
        ..old
    })
}

pub fn run(cmd: UserCmd, cfg: &Config) -> Result<(), String> {
    let dom = |d: Option<String>| d.unwrap_or_else(|| cfg.registrar.domain.clone());
    match cmd {
        UserCmd::Add {
            user,
            password,
            domain,
            context,
            caller_id,
            max_calls,
            allow,
            store,
        } => {
            let new = NewUser {
                user,
                password,
                domain,
                context,
                caller_id,
                max_calls,
                allow,
            };
            let c = new.credentials(cfg)?;
            let s = open(store.as_ref(), cfg)?;
            s.put_user(&c).map_err(|e| e.to_string())?;
            println!("{}@{}: added", c.user, c.domain);
        }
        UserCmd::Passwd {
            user,
            password,
            domain,
            store,
        } => {
            let s = open(store.as_ref(), cfg)?;
            let domain = dom(domain);
            let Some(old) = s.user(&user, &domain).map_err(|e| e.to_string())? else {
                return Err(format!(
                    "{user}@{domain}: no such user (add it with `strowger user add`)"
                ));
            };
            s.put_user(&with_password(old, &password)?)
                .map_err(|e| e.to_string())?;
            println!("{user}@{domain}: password changed");
        }
        UserCmd::Del {
            user,
            domain,
            store,
        } => {
            let s = open(store.as_ref(), cfg)?;
            let domain = dom(domain);
            if !s.del_user(&user, &domain).map_err(|e| e.to_string())? {
                return Err(format!("{user}@{domain}: no such user"));
            }
            println!("{user}@{domain}: removed");
        }
        UserCmd::List { store } => {
            let s = open(store.as_ref(), cfg)?;
            for c in s.users().map_err(|e| e.to_string())? {
                println!("{}", listing(&c));
            }
        }
    }
    Ok(())
}

/// A user as `user list` shows it: USER@DOMAIN, then its settings that are not the defaults and
/// the forwarding its phone set.
fn listing(c: &store::Credentials) -> String {
    let mut line = format!("{}@{}", c.user, c.domain);
    if let Some(x) = &c.context {
        line.push_str(&format!("  context={x}"));
    }
    if let Some(x) = &c.caller_id {
        line.push_str(&format!("  caller_id={x}"));
    }
    if c.max_calls > 0 {
        line.push_str(&format!("  max_calls={}", c.max_calls));
    }
    for a in &c.allow {
        line.push_str(&format!("  allow={a}"));
    }
    for kind in store::Forward::ALL {
        if let Some(t) = c.forward.target(kind) {
            line.push_str(&format!("  forward_{}={t}", kind.name()));
        }
    }
    line
}

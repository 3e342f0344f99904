//! `strowger user add|del|list|passwd`: the users phones register as. Passwords are stored as
//! digest HA1s (MD5 and SHA-256 of user:domain:password), never as text.

use clap::Subcommand;
use switch::config::Config;

#[derive(Subcommand)]
pub enum UserCmd {
    /// Add a user (or replace its password).
    Add {
        user: String,
        #[arg(long)]
        password: String,
        /// Default: registrar.domain of the configuration.
        #[arg(long)]
        domain: Option<String>,
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
    /// Change a user's password.
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

pub fn run(cmd: UserCmd, cfg: &Config) -> Result<(), String> {
    let dom = |d: Option<String>| d.unwrap_or_else(|| cfg.registrar.domain.clone());
    match cmd {
        UserCmd::Add {
            user,
            password,
            domain,
            store,
        } => {
            check_name(&user)?;
            if password.is_empty() {
                return Err("--password must not be empty".into());
            }
            let s = open(store.as_ref(), cfg)?;
            let domain = dom(domain);
            s.put_user(&switch::registrar::credentials(&user, &domain, &password))
                .map_err(|e| e.to_string())?;
            println!("{user}@{domain}: added");
        }
        UserCmd::Passwd {
            user,
            password,
            domain,
            store,
        } => {
            if password.is_empty() {
                return Err("--password must not be empty".into());
            }
            let s = open(store.as_ref(), cfg)?;
            let domain = dom(domain);
            if s.user(&user, &domain).map_err(|e| e.to_string())?.is_none() {
                return Err(format!(
                    "{user}@{domain}: no such user (add it with `strowger user add`)"
                ));
            }
            s.put_user(&switch::registrar::credentials(&user, &domain, &password))
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
                println!("{}@{}", c.user, c.domain);
            }
        }
    }
    Ok(())
}

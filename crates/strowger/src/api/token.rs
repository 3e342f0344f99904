//! The API's bearer token: `api.token`, or one made on first start and kept in the data
//! directory, where `strowger ctl` finds it.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The token file in the data directory.
pub const TOKEN_FILE: &str = "api.token";

/// The token in `<data_dir>/api.token`, made (32 random bytes, hex, mode 0600) if there is none.
pub fn load_or_create(data_dir: &Path) -> Result<String, String> {
    let path = data_dir.join(TOKEN_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(format!(
                "cannot read the API token {}: {e} (fix its permissions, or set api.token)",
                path.display()
            ))
        }
    }
    let token: String = crate::runtime::secret()?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::create_dir_all(data_dir)
        .and_then(|_| {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&path)
        })
        .and_then(|mut f| f.write_all(format!("{token}\n").as_bytes()))
        .map_err(|e| {
            format!(
                "cannot write the API token {}: {e} (set general.data_dir, or api.token)",
                path.display()
            )
        })?;
    Ok(token)
}

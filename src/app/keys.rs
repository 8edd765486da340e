//! Where the signing key comes from: the configured secret, a key file
//! (created on first use), or the database.

use std::path::{Path, PathBuf};

use rand::Rng;

use crate::domain::auth::Keys;
use crate::store::Store;

/// Where the signing key comes from.
#[derive(Clone, Default)]
pub struct KeySource {
    /// `DPGATE_JWT_SECRET`.
    pub secret: Option<String>,
    /// `DPGATE_KEY_FILE`.
    pub file: Option<PathBuf>,
}

impl std::fmt::Debug for KeySource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("KeySource")
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("file", &self.file)
            .finish()
    }
}

/// The signing keys: the configured secret, else the key file (created on
/// first use), else the database's stored key (Postgres) or a key file
/// beside the SQLite database.
pub async fn keys(
    source: &KeySource,
    database_url: &str,
    store: &dyn Store,
) -> anyhow::Result<Keys> {
    if let Some(secret) = &source.secret {
        return Keys::from_secret(secret);
    }
    if let Some(path) = &source.file {
        return Keys::from_secret(&load_or_create_key_file(path)?);
    }
    if let Some(path) = default_key_file(database_url) {
        return Keys::from_secret(&load_or_create_key_file(&path)?);
    }
    match store.signing_key(&fresh_secret()).await? {
        Some(secret) => Keys::from_secret(&secret),
        None => anyhow::bail!(
            "no signing key: set DPGATE_JWT_SECRET or DPGATE_KEY_FILE for this database"
        ),
    }
}

/// A fresh random secret (256 bits, hex) from the OS CSPRNG.
pub fn fresh_secret() -> String {
    let mut bytes = [0u8; 32];
    crate::dp::OsNoise::new().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Where the signing key comes from when neither `DPGATE_JWT_SECRET` nor
/// `DPGATE_KEY_FILE` is set: beside the SQLite file, or inside Postgres so
/// that every replica shares it.
pub fn default_key_file(database_url: &str) -> Option<PathBuf> {
    let path = database_url
        .strip_prefix("sqlite://")
        .or_else(|| database_url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next().unwrap_or(path);
    if path.is_empty() || path == ":memory:" {
        return None;
    }
    Some(Path::new(path).with_extension("key"))
}

/// Reads the secret in `path`, creating it (mode 0600) if it does not exist.
pub fn load_or_create_key_file(path: &Path) -> anyhow::Result<String> {
    use std::io::Write;
    match std::fs::read_to_string(path) {
        Ok(secret) => Ok(secret.trim().to_owned()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let secret = fresh_secret();
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut file = options.open(path)?;
            file.write_all(secret.as_bytes())?;
            Ok(secret)
        }
        Err(error) => Err(error.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_key_file_sits_beside_the_sqlite_database() {
        assert_eq!(
            default_key_file("sqlite://dpgate.db"),
            Some(PathBuf::from("dpgate.key"))
        );
        assert_eq!(
            default_key_file("sqlite:///var/lib/dpgate/data.db?mode=rwc"),
            Some(PathBuf::from("/var/lib/dpgate/data.key"))
        );
        assert_eq!(default_key_file("sqlite::memory:"), None);
        assert_eq!(default_key_file("postgres://localhost/dpgate"), None);
    }

    #[test]
    fn a_key_file_is_created_once_and_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.key");
        let first = load_or_create_key_file(&path).unwrap();
        assert_eq!(first.len(), 64);
        assert_eq!(load_or_create_key_file(&path).unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}

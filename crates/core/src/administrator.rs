//! The administrator (article 3.3.2a): the global registry of applications
//! and their credentials. Every label carries its owner application, so this
//! is where "who may do what" starts: a client authenticates once, gets its
//! [`AppId`], and everything it publishes is stamped with it.

use labios_label::{AppId, Error, Result};
use labios_store::{AppRecord, Inventory};
use std::sync::Arc;

/// The access key of a deployment's service credential: trusted tools of
/// the operator (the S3 gateway) present it to read the registry, secrets
/// included, so that they can verify requests signed by any application.
pub const SERVICE_KEY: &str = "LABIOS-SERVICE";

/// The application local, unauthenticated programs run as (embedded use).
pub const DEFAULT_APP: AppId = 0;
pub const DEFAULT_APP_NAME: &str = "default";

const MAX_NAME: usize = 64;
const KEY_PREFIX: &str = "LBK";
const KEY_RANDOM: usize = 17;
const SECRET_LEN: usize = 40;
const MAX_SETTING_VALUE: usize = 4096;
const UPPER_ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

pub struct Administrator {
    inventory: Arc<dyn Inventory>,
    /// Serializes registry changes made through this administrator so that a
    /// name check and the insert that follows it cannot interleave.
    registry: tokio::sync::Mutex<()>,
}

impl Administrator {
    pub fn new(inventory: Arc<dyn Inventory>) -> Self {
        Administrator {
            inventory,
            registry: tokio::sync::Mutex::new(()),
        }
    }

    /// Registers an application under a unique name with fresh credentials.
    pub async fn create_app(&self, name: &str) -> Result<AppRecord> {
        check_name("application name", name)?;
        let _guard = self.registry.lock().await;
        if name == DEFAULT_APP_NAME || self.find(|a| a.name == name).await?.is_some() {
            return Err(Error::AlreadyExists(format!("application {name:?}")));
        }
        let id = self.fresh_id().await?;
        let app = new_record(id, name)?;
        self.inventory.put_app(app.clone()).await?;
        Ok(app)
    }

    /// The default application (id 0), created with random credentials the
    /// first time it is asked for and returned unchanged afterwards.
    pub async fn ensure_default_app(&self) -> Result<AppRecord> {
        let _guard = self.registry.lock().await;
        if let Some(app) = self.inventory.app(DEFAULT_APP).await? {
            return Ok(app);
        }
        let app = new_record(DEFAULT_APP, DEFAULT_APP_NAME)?;
        self.inventory.put_app(app.clone()).await?;
        Ok(app)
    }

    /// Maps credentials to the application they belong to. No credentials at
    /// all means a local embedded caller, which runs as the default app.
    pub async fn authenticate(&self, key: Option<&str>, secret: Option<&str>) -> Result<AppId> {
        let denied = || Error::PermissionDenied("invalid credentials".into());
        let (key, secret) = match (key, secret) {
            (None, None) => return Ok(DEFAULT_APP),
            (Some(k), Some(s)) => (k, s),
            _ => return Err(denied()),
        };
        match self.find(|a| a.key == key).await? {
            Some(app) if constant_time_eq(app.secret.as_bytes(), secret.as_bytes()) => Ok(app.id),
            _ => Err(denied()),
        }
    }

    pub async fn app(&self, id: AppId) -> Result<AppRecord> {
        self.inventory
            .app(id)
            .await?
            .ok_or_else(|| Error::NotFound(format!("application {id}")))
    }

    pub async fn apps(&self) -> Result<Vec<AppRecord>> {
        self.inventory.apps().await
    }

    /// Sets (or replaces) one per-application setting and returns the record.
    pub async fn set_setting(&self, id: AppId, key: &str, value: &str) -> Result<AppRecord> {
        check_name("setting name", key)?;
        if value.len() > MAX_SETTING_VALUE {
            return Err(Error::InvalidArgument(format!(
                "setting {key:?} is longer than {MAX_SETTING_VALUE} bytes"
            )));
        }
        let _guard = self.registry.lock().await;
        let mut app = self.app(id).await?;
        match app.settings.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.to_string(),
            None => app.settings.push((key.to_string(), value.to_string())),
        }
        self.inventory.put_app(app.clone()).await?;
        Ok(app)
    }

    async fn find(&self, pred: impl Fn(&AppRecord) -> bool) -> Result<Option<AppRecord>> {
        Ok(self.inventory.apps().await?.into_iter().find(|a| pred(a)))
    }

    /// Id 0 is the default app, so a counter that starts at 0 is skipped past.
    async fn fresh_id(&self) -> Result<AppId> {
        loop {
            let raw = self.inventory.next_id("app").await?;
            if raw == 0 {
                continue;
            }
            return AppId::try_from(raw).map_err(|_| Error::Full("application id space".into()));
        }
    }
}

/// Names are what operators type and what appears in paths and logs: keep
/// them short and free of anything that needs quoting.
fn check_name(what: &str, name: &str) -> Result<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(ok_char) {
        return Err(Error::InvalidArgument(format!(
            "{what} {name:?} must be 1-{MAX_NAME} characters of A-Z a-z 0-9 . _ -"
        )));
    }
    Ok(())
}

fn new_record(id: AppId, name: &str) -> Result<AppRecord> {
    Ok(AppRecord {
        id,
        name: name.to_string(),
        key: format!("{KEY_PREFIX}{}", random_string(UPPER_ALNUM, KEY_RANDOM)?),
        secret: random_string(ALNUM, SECRET_LEN)?,
        settings: Vec::new(),
    })
}

/// `len` characters drawn uniformly from `alphabet` (rejection sampling, so
/// no character is more likely than another).
fn random_string(alphabet: &[u8], len: usize) -> Result<String> {
    let limit = 256 - 256 % alphabet.len();
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 64];
    while out.len() < len {
        getrandom::fill(&mut buf)
            .map_err(|e| Error::Unavailable(format!("system random source: {e}")))?;
        for &b in buf.iter().filter(|&&b| (b as usize) < limit) {
            if out.len() == len {
                break;
            }
            out.push(alphabet[b as usize % alphabet.len()] as char);
        }
    }
    Ok(out)
}

/// A fresh secret of the same strength as an application's.
pub fn new_secret() -> Result<String> {
    random_string(ALNUM, SECRET_LEN)
}

/// Compares without an early exit so response time does not reveal how much
/// of a guessed secret was right.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (i, &x) in a.iter().enumerate() {
        diff |= x ^ b.get(i).copied().unwrap_or(!x);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use labios_store::embedded::RedbInventory;

    fn admin() -> Administrator {
        Administrator::new(Arc::new(RedbInventory::in_memory().unwrap()))
    }

    #[tokio::test]
    async fn created_apps_authenticate_with_their_credentials() {
        let admin = admin();
        let app = admin.create_app("climate-sim").await.unwrap();
        assert_ne!(app.id, DEFAULT_APP);
        assert!(app.key.starts_with("LBK") && app.key.len() == 20);
        assert_eq!(app.secret.len(), 40);
        let id = admin
            .authenticate(Some(&app.key), Some(&app.secret))
            .await
            .unwrap();
        assert_eq!(id, app.id);
        let other = admin.create_app("viz").await.unwrap();
        assert_ne!(other.id, app.id);
        assert_ne!(other.key, app.key);
        assert_eq!(admin.app(app.id).await.unwrap(), app);
        assert_eq!(admin.apps().await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn bad_credentials_are_denied() {
        let admin = admin();
        let app = admin.create_app("a").await.unwrap();
        let denied = Error::PermissionDenied("invalid credentials".into());
        let wrong_secret = admin.authenticate(Some(&app.key), Some("nope")).await;
        assert_eq!(wrong_secret.unwrap_err(), denied);
        let wrong_key = admin.authenticate(Some("LBKX"), Some(&app.secret)).await;
        assert_eq!(wrong_key.unwrap_err(), denied);
        let half = admin.authenticate(Some(&app.key), None).await;
        assert_eq!(half.unwrap_err(), denied);
        assert_eq!(admin.authenticate(None, None).await.unwrap(), DEFAULT_APP);
    }

    #[tokio::test]
    async fn names_must_be_valid_and_unique() {
        let admin = admin();
        admin.create_app("dup").await.unwrap();
        let e = admin.create_app("dup").await.unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
        let e = admin.create_app(DEFAULT_APP_NAME).await.unwrap_err();
        assert!(matches!(e, Error::AlreadyExists(_)), "{e}");
        let e = admin.create_app("no spaces").await.unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert!(matches!(
            admin.app(999).await.unwrap_err(),
            Error::NotFound(_)
        ));
    }

    #[tokio::test]
    async fn default_app_is_created_once() {
        let admin = admin();
        let first = admin.ensure_default_app().await.unwrap();
        assert_eq!(
            (first.id, first.name.as_str()),
            (DEFAULT_APP, DEFAULT_APP_NAME)
        );
        assert_eq!(admin.ensure_default_app().await.unwrap(), first);
        let id = admin
            .authenticate(Some(&first.key), Some(&first.secret))
            .await
            .unwrap();
        assert_eq!(id, DEFAULT_APP);
    }

    #[tokio::test]
    async fn settings_are_set_and_replaced() {
        let admin = admin();
        let app = admin.create_app("s").await.unwrap();
        admin.set_setting(app.id, "policy", "minmax").await.unwrap();
        let app = admin.set_setting(app.id, "policy", "random").await.unwrap();
        assert_eq!(
            app.settings,
            vec![("policy".to_string(), "random".to_string())]
        );
        assert_eq!(admin.app(app.id).await.unwrap().settings, app.settings);
        assert!(admin.set_setting(app.id, "bad key", "x").await.is_err());
        assert!(admin.set_setting(12345, "k", "v").await.is_err());
    }

    #[test]
    fn random_strings_use_their_alphabet() {
        let s = random_string(UPPER_ALNUM, 1000).unwrap();
        assert_eq!(s.len(), 1000);
        assert!(s.bytes().all(|b| UPPER_ALNUM.contains(&b)));
        assert_ne!(
            random_string(ALNUM, 40).unwrap(),
            random_string(ALNUM, 40).unwrap()
        );
    }

    #[test]
    fn constant_time_eq_compares() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secre"));
        assert!(!constant_time_eq(b"", b"x"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn names_are_checked() {
        for good in ["a", "my-app_1.0", &"x".repeat(64)] {
            check_name("n", good).unwrap();
        }
        for bad in ["", "a b", "a/b", "é", &"x".repeat(65)] {
            let e = check_name("application name", bad).unwrap_err();
            assert!(e.to_string().contains("application name"), "{e}");
        }
    }
}

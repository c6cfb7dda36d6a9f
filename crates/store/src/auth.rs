//! Label verification against the application registry, shared by the
//! dispatcher and the workers (README "Tenants"). Secrets are cached for a
//! short time so that verifying costs one registry lookup per application
//! and TTL, not one per label; a new or re-keyed application is seen within
//! the TTL.

use crate::Inventory;
use labios_label::{auth, AppId, Error, Label, Result};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a looked-up secret (or its absence) is trusted.
pub const SECRET_TTL: Duration = Duration::from_secs(5);

/// Each application's secret (`None`: not registered) and when it was read.
type Secrets = HashMap<AppId, (Option<Arc<str>>, Instant)>;

pub struct LabelVerifier {
    inventory: Arc<dyn Inventory>,
    cache: Mutex<Secrets>,
    enabled: bool,
}

impl LabelVerifier {
    pub fn new(inventory: Arc<dyn Inventory>) -> Self {
        LabelVerifier {
            inventory,
            cache: Mutex::new(HashMap::new()),
            enabled: true,
        }
    }

    /// A verifier that accepts every label: for benchmarks and component
    /// tests that feed hand-made labels, never for a deployment.
    pub fn disabled(inventory: Arc<dyn Inventory>) -> Self {
        LabelVerifier {
            enabled: false,
            ..LabelVerifier::new(inventory)
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The secret of application `app`, if it is registered.
    pub async fn secret(&self, app: AppId) -> Result<Option<Arc<str>>> {
        if let Some((secret, at)) = self.cache.lock().get(&app) {
            if at.elapsed() < SECRET_TTL {
                return Ok(secret.clone());
            }
        }
        let secret: Option<Arc<str>> = self
            .inventory
            .app(app)
            .await?
            .map(|a| Arc::from(a.secret.as_str()));
        self.cache
            .lock()
            .insert(app, (secret.clone(), Instant::now()));
        Ok(secret)
    }

    /// Ok when `label` carries a valid signature of its owner. A registry
    /// that cannot be reached is `Unavailable` (the label may be retried);
    /// anything else is `PermissionDenied`.
    pub async fn verify(&self, label: &Label) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        match self.secret(label.owner).await? {
            Some(secret) => auth::verify(label, secret.as_bytes()),
            None => Err(auth::denied(label.owner)),
        }
    }

    /// Signs a label the system issues on an application's behalf (a worker
    /// deleting the file a rename replaces).
    pub async fn sign(&self, label: &mut Label) -> Result<()> {
        if !self.enabled {
            return Ok(());
        }
        let secret = self
            .secret(label.owner)
            .await?
            .ok_or_else(|| Error::PermissionDenied(format!("no application {}", label.owner)))?;
        auth::sign(label, secret.as_bytes());
        Ok(())
    }
}

//! Who is asking: S3 access keys are the access keys of the tenant registry
//! (article 3.3.2a), so `labios app create` is all it takes to get S3
//! credentials, and every request runs as a LABIOS client of that
//! application, confined to it exactly as any other client is.

use crate::errors;
use crate::object_buckets::ObjectBuckets;
use async_trait::async_trait;
use bytes::Bytes;
use labios_client::Client;
use labios_label::{AppId, Error, FileId, Result};
use labios_store::AppRecord;
use s3s::auth::{Credentials, S3Auth, SecretKey};
use s3s::{s3_error, S3Error, S3ErrorCode, S3Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the gateway needs of a deployment (implemented by the `labios`
/// binary for the embedded and the distributed deployments).
#[async_trait]
pub trait Tenants: Send + Sync + 'static {
    /// Every registered application with its credentials.
    async fn registry(&self) -> Result<Vec<AppRecord>>;
    /// A client acting as the application these credentials belong to.
    async fn connect(&self, key: &str, secret: &str) -> Result<Client>;
}

/// Unknown access keys reload the registry at most this often, so that
/// requests with made-up keys cannot turn into a registry scan each.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// The registry as last read, and one client per application.
pub struct Directory {
    tenants: Arc<dyn Tenants>,
    objects: Arc<ObjectBuckets>,
    state: Mutex<State>,
    /// One reload or connect at a time: a burst of requests from a new
    /// tenant makes one client, not one each.
    reload: tokio::sync::Mutex<()>,
    /// Buckets' CORS rules, for cross-origin requests.
    cors: crate::cors::Cache,
}

#[derive(Default)]
struct State {
    /// Access key -> application, its name and its secret.
    keys: HashMap<String, Known>,
    loaded: Option<Instant>,
    clients: HashMap<AppId, Client>,
}

#[derive(Clone)]
struct Known {
    app: AppId,
    name: String,
    secret: String,
}

/// The application a request runs as.
pub struct Tenant {
    pub app: AppId,
    /// Its name in the registry.
    pub name: String,
    pub client: Client,
    /// Buckets kept outside the namespace ([`crate::object_buckets`]).
    pub objects: Arc<ObjectBuckets>,
    directory: Arc<Directory>,
}

impl Tenant {
    /// `e` as an S3 error; a connection LABIOS dropped is forgotten so the
    /// next request connects anew (after a restart of `labios serve`).
    pub fn fail(&self, e: Error, missing: S3ErrorCode) -> S3Error {
        if matches!(e, Error::Unavailable(_)) {
            self.directory
                .state
                .lock()
                .unwrap()
                .clients
                .remove(&self.app);
        }
        errors::s3(e, missing)
    }

    /// The extended attributes of entry `id`; a failure as `missing` says
    /// for a missing entry.
    pub async fn xattrs(&self, id: FileId, missing: S3ErrorCode) -> S3Result<Vec<(String, Bytes)>> {
        self.client
            .catalog()
            .inventory()
            .xattrs(id)
            .await
            .map_err(|e| self.fail(e, missing))
    }

    /// The gateway's cache of buckets' CORS rules.
    pub fn cors(&self) -> &crate::cors::Cache {
        &self.directory.cors
    }
}

impl Directory {
    pub fn new(tenants: Arc<dyn Tenants>, objects: Arc<ObjectBuckets>) -> Arc<Self> {
        Arc::new(Directory {
            tenants,
            objects,
            state: Mutex::new(State::default()),
            reload: tokio::sync::Mutex::new(()),
            cors: crate::cors::Cache::default(),
        })
    }

    fn known(&self, key: &str) -> Option<Known> {
        self.state.lock().unwrap().keys.get(key).cloned()
    }

    async fn credentials(&self, key: &str) -> S3Result<Known> {
        if let Some(found) = self.known(key) {
            return Ok(found);
        }
        let _one = self.reload.lock().await;
        if let Some(found) = self.known(key) {
            return Ok(found);
        }
        self.reload().await?;
        self.known(key).ok_or_else(|| {
            s3_error!(
                InvalidAccessKeyId,
                "no LABIOS application has access key {key:?} (see `labios app create`)"
            )
        })
    }

    /// Reads the registry again, at most once per [`RELOAD_EVERY`]: an
    /// application created a moment ago is found by waiting for the next
    /// reload rather than refused. The caller holds `reload`.
    async fn reload(&self) -> S3Result<()> {
        let since = self.state.lock().unwrap().loaded.map(|t| t.elapsed());
        if let Some(since) = since.filter(|s| *s < RELOAD_EVERY) {
            tokio::time::sleep(RELOAD_EVERY - since).await;
        }
        let apps = self
            .tenants
            .registry()
            .await
            .map_err(|e| errors::s3(e, S3ErrorCode::InvalidAccessKeyId))?;
        {
            let mut state = self.state.lock().unwrap();
            state.keys = apps
                .into_iter()
                .map(|a| {
                    let known = Known {
                        app: a.id,
                        name: a.name,
                        secret: a.secret,
                    };
                    (a.key, known)
                })
                .collect();
            state.loaded = Some(Instant::now());
        }
        Ok(())
    }

    /// The tenant of an authenticated request; anonymous requests never get
    /// here (s3s refuses them with AccessDenied).
    pub async fn tenant(self: &Arc<Self>, creds: Option<&Credentials>) -> S3Result<Tenant> {
        let creds = creds.ok_or_else(|| s3_error!(AccessDenied, "a signed request is required"))?;
        let known = self.credentials(&creds.access_key).await?;
        self.tenant_as(&creds.access_key, known).await
    }

    /// The registered application that `pick` chooses, the registry read
    /// first if it never was.
    async fn registered(
        self: &Arc<Self>,
        pick: impl Fn(&Known) -> bool,
    ) -> S3Result<Option<Tenant>> {
        if self.state.lock().unwrap().loaded.is_none() {
            let _one = self.reload.lock().await;
            if self.state.lock().unwrap().loaded.is_none() {
                self.reload().await?;
            }
        }
        let found = self
            .state
            .lock()
            .unwrap()
            .keys
            .iter()
            .find(|(_, known)| pick(known))
            .map(|(k, known)| (k.clone(), known.clone()));
        match found {
            Some((key, known)) => Ok(Some(self.tenant_as(&key, known).await?)),
            None => Ok(None),
        }
    }

    /// The application that owns `bucket`, for what the gateway answers
    /// without a signed request: a browser's CORS preflight names only the
    /// bucket. Any registered application may look up who owns it.
    pub async fn owner_of(self: &Arc<Self>, bucket: &str) -> S3Result<Option<Tenant>> {
        if let Some(b) = self.objects.get(bucket) {
            let owner = b.owner.clone();
            return self.registered(|known| known.name == owner).await;
        }
        let Some(any) = self.registered(|_| true).await? else {
            return Ok(None);
        };
        let path = crate::names::bucket_path(bucket);
        match crate::buckets::lookup(&any, &path).await? {
            Some(dir) => self.registered(|known| known.app == dir.owner).await,
            None => Ok(None),
        }
    }

    /// The CORS rules of `bucket`, read as its owner (none for a bucket
    /// that does not exist or cannot be read now: the browser is then
    /// refused, never let through).
    pub async fn cors_rules(self: &Arc<Self>, bucket: &str) -> crate::cors::Rules {
        if let Some(rules) = self.cors.fresh(bucket) {
            return rules;
        }
        let read = async {
            match self.owner_of(bucket).await? {
                Some(owner) => crate::cors::rules_of(&owner, bucket).await,
                None => Ok(Vec::new()),
            }
        };
        let rules = Arc::new(read.await.unwrap_or_else(|e| {
            tracing::warn!("labios s3: CORS rules of bucket {bucket}: {e}");
            Vec::new()
        }));
        self.cors.keep(bucket, rules.clone());
        rules
    }

    /// The tenant of access key `key`, its client connected once and kept.
    async fn tenant_as(self: &Arc<Self>, key: &str, known: Known) -> S3Result<Tenant> {
        let Known { app, name, secret } = known;
        let cached = self.state.lock().unwrap().clients.get(&app).cloned();
        let client = match cached {
            Some(c) => c,
            None => {
                let _one = self.reload.lock().await;
                let cached = self.state.lock().unwrap().clients.get(&app).cloned();
                match cached {
                    Some(c) => c,
                    None => {
                        let c = self
                            .tenants
                            .connect(key, &secret)
                            .await
                            .map_err(|e| errors::s3(e, S3ErrorCode::AccessDenied))?;
                        self.state.lock().unwrap().clients.insert(app, c.clone());
                        c
                    }
                }
            }
        };
        Ok(Tenant {
            app,
            name,
            client,
            objects: self.objects.clone(),
            directory: self.clone(),
        })
    }
}

/// SigV4 (and SigV2) verification against the registry's secrets.
pub struct Auth(pub Arc<Directory>);

#[async_trait]
impl S3Auth for Auth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        Ok(SecretKey::from(
            self.0.credentials(access_key).await?.secret,
        ))
    }
}

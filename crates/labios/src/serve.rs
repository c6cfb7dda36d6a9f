//! `labios serve`: the local endpoint through which programs on this
//! machine (or over TCP) reach LABIOS, checked as their users (README
//! "Permissions"). In the embedded deployment it runs the runtime itself;
//! in the distributed one it is a node's gateway to the cluster: it reaches
//! NATS and Redis with the service credentials of its configuration, which
//! the users whose programs connect to it never hold.

use crate::config::{Config, Deployment};
use crate::runtime::Runtime;
use anyhow::Context;
use labios_connect::distributed_stores;
use labios_connect::service_secret_file;
use labios_core::administrator::{self, Administrator, DEFAULT_APP, SERVICE_KEY};
use labios_label::Error;
use labios_store::remote::{self, Endpoint, Listener};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::watch;

/// A fresh service secret for this run of the server, written to
/// [`service_secret_file`] with mode 0600.
fn write_service_secret(data_dir: &Path) -> anyhow::Result<Arc<str>> {
    use std::os::unix::fs::OpenOptionsExt;
    let secret = administrator::new_secret()?;
    let path = service_secret_file(data_dir);
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    file.write_all(secret.as_bytes())?;
    Ok(Arc::from(secret))
}

pub async fn serve(config: Config) -> anyhow::Result<()> {
    let mut signals = crate::processes::StopSignal::install()?;
    let served = Served::start(config).await?;
    match &served.runtime {
        Some(runtime) => println!(
            "labios serve: listening on {} (data in {}, {} workers)",
            served.endpoint,
            runtime.config.data_dir.display(),
            runtime.config.workers.len()
        ),
        None => println!(
            "labios serve: listening on {} (gateway to the distributed deployment)",
            served.endpoint
        ),
    }
    signals.recv().await;
    signals.or_again("labios serve", served.shutdown()).await?;
    eprintln!("labios serve: stopped cleanly");
    Ok(())
}

/// LABIOS answering on an endpoint (`labios serve`, and `labios run` when
/// nothing serves the endpoint of the embedded deployment yet).
pub struct Served {
    pub endpoint: Endpoint,
    /// The embedded runtime; none for a gateway to the distributed
    /// deployment, whose dispatchers and workers run elsewhere.
    pub runtime: Option<Runtime>,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<labios_label::Result<()>>,
}

impl Served {
    pub async fn start(config: Config) -> anyhow::Result<Served> {
        let endpoint = Endpoint::parse(&config.endpoint())?;
        let (runtime, stores, admin) = match config.deployment {
            Deployment::Embedded => {
                let runtime = Runtime::start(config.clone()).await?;
                let (stores, admin) = (runtime.stores.clone(), runtime.admin.clone());
                (Some(runtime), stores, admin)
            }
            Deployment::Distributed => {
                config.validate()?;
                std::fs::create_dir_all(&config.data_dir).with_context(|| {
                    format!("cannot create data directory {}", config.data_dir.display())
                })?;
                let stores = distributed_stores(&config.connection()).await?;
                let admin = Arc::new(Administrator::new(stores.inventory.clone()));
                (None, stores, admin)
            }
        };
        let listener = Listener::bind(&endpoint).await?;
        if let (true, Endpoint::Unix(path)) = (config.all_local_users, &endpoint) {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
                .with_context(|| format!("opening {} to every local user", path.display()))?;
        }
        let service = write_service_secret(&config.data_dir)?;
        let (stop, stopped) = watch::channel(false);
        let auth = session_auth(admin, Some(service));
        let server = tokio::spawn(remote::serve(listener, stores, auth, stopped));
        Ok(Served {
            endpoint,
            runtime,
            stop,
            server,
        })
    }

    /// Stops accepting clients, then stops the runtime cleanly.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        match self.runtime {
            Some(runtime) => runtime.shutdown().await,
            None => Ok(()),
        }
    }
}

/// How `labios serve` admits a session: its credentials name its
/// application (none at all: the default application, as the socket is
/// local), the session is confined to that application's queue, warehouse
/// keys, files and label statuses, and it is handed the application's secret
/// so that it can sign its labels (README "Tenants"). The service
/// credential, when there is one, opens an unconfined session.
pub fn session_auth(admin: Arc<Administrator>, service: Option<Arc<str>>) -> remote::AuthFn {
    Arc::new(move |key: Option<String>, secret: Option<String>| {
        let admin = admin.clone();
        let service = service.clone();
        Box::pin(async move {
            if key.as_deref() == Some(SERVICE_KEY) {
                let presented = secret.unwrap_or_default();
                return match service {
                    Some(s)
                        if administrator::constant_time_eq(s.as_bytes(), presented.as_bytes()) =>
                    {
                        Ok(remote::Grant::service(DEFAULT_APP))
                    }
                    _ => Err(Error::PermissionDenied(
                        "invalid service credentials".into(),
                    )),
                };
            }
            let app = admin
                .authenticate(key.as_deref(), secret.as_deref())
                .await?;
            Ok(remote::Grant::tenant(app, admin.app(app).await?.secret))
        })
    })
}

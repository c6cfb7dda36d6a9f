//! `labios serve`: the embedded runtime plus the local endpoint through which
//! programs on this machine (or over TCP) reach it.

use crate::config::Config;
use crate::runtime::Runtime;
use labios_core::administrator::Administrator;
use labios_store::remote::{self, Endpoint, Listener};
use std::sync::Arc;
use tokio::sync::watch;

pub async fn serve(config: Config) -> anyhow::Result<()> {
    let served = Served::start(config).await?;
    println!(
        "labios serve: listening on {} (data in {}, {} workers)",
        served.endpoint,
        served.runtime.config.data_dir.display(),
        served.runtime.config.workers.len()
    );
    crate::processes::stop_signal().await?;
    eprintln!("labios serve: stopping");
    served.shutdown().await?;
    eprintln!("labios serve: stopped cleanly");
    Ok(())
}

/// An embedded runtime answering on its endpoint (`labios serve`, and
/// `labios run` when nothing serves the endpoint yet).
pub struct Served {
    pub endpoint: Endpoint,
    pub runtime: Runtime,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<labios_label::Result<()>>,
}

impl Served {
    pub async fn start(config: Config) -> anyhow::Result<Served> {
        let endpoint = Endpoint::parse(&config.endpoint())?;
        let runtime = Runtime::start(config).await?;
        let listener = Listener::bind(&endpoint).await?;
        let (stop, stopped) = watch::channel(false);
        let auth = session_auth(runtime.admin.clone());
        let server = tokio::spawn(remote::serve(
            listener,
            runtime.stores.clone(),
            auth,
            stopped,
        ));
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
        self.runtime.shutdown().await
    }
}

/// How `labios serve` admits a session: its credentials name its
/// application (none at all: the default application, as the socket is
/// local), the session is confined to that application's queue, warehouse
/// keys, files and label statuses, and it is handed the application's secret
/// so that it can sign its labels (README "Tenants").
pub fn session_auth(admin: Arc<Administrator>) -> remote::AuthFn {
    Arc::new(move |key: Option<String>, secret: Option<String>| {
        let admin = admin.clone();
        Box::pin(async move {
            let app = admin
                .authenticate(key.as_deref(), secret.as_deref())
                .await?;
            Ok(remote::Grant::tenant(app, admin.app(app).await?.secret))
        })
    })
}

//! `labios serve`: the embedded runtime plus the local endpoint through which
//! programs on this machine (or over TCP) reach it.

use crate::config::Config;
use crate::runtime::Runtime;
use labios_core::administrator::Administrator;
use labios_store::remote::{self, Endpoint, Listener};
use std::sync::Arc;
use tokio::sync::watch;

pub async fn serve(config: Config) -> anyhow::Result<()> {
    let endpoint = Endpoint::parse(&config.endpoint())?;
    let data_dir = config.data_dir.clone();
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
    println!(
        "labios serve: listening on {endpoint} (data in {}, {} workers)",
        data_dir.display(),
        runtime.config.workers.len()
    );
    crate::processes::stop_signal().await?;
    eprintln!("labios serve: stopping");
    let _ = stop.send(true);
    let _ = server.await;
    runtime.shutdown().await?;
    eprintln!("labios serve: stopped cleanly");
    Ok(())
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

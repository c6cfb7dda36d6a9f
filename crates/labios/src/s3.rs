//! `labios s3 --listen HOST:PORT`: the LABIOS namespace over the S3 REST
//! API (crates/gateway), for the applications of this deployment's
//! registry. In the embedded deployment it reaches `labios serve` with the
//! service credential the server keeps in its data directory (or, when no
//! server answers, runs the embedded runtime itself, as `labios run` does);
//! in the distributed deployment it reaches NATS and Redis as the other
//! LABIOS processes do.

use crate::config::{Config, Deployment};
use crate::run::reachable;
use crate::serve::Served;
use anyhow::Context;
use async_trait::async_trait;
use labios_client::Client;
use labios_connect::connect_client;
use labios_gateway::{Gateway, ObjectBuckets, Tenants};
use labios_store::remote::Endpoint;
use labios_store::{AppRecord, Inventory};
use std::sync::Arc;

/// The registry and client connections of one deployment.
struct Deployed {
    config: Config,
    registry: Arc<dyn Inventory>,
}

#[async_trait]
impl Tenants for Deployed {
    async fn registry(&self) -> labios_label::Result<Vec<AppRecord>> {
        self.registry.apps().await
    }

    async fn connect(&self, key: &str, secret: &str) -> labios_label::Result<Client> {
        connect_client(
            &self.config.connection(),
            Some(key.to_string()),
            Some(secret.to_string()),
        )
        .await
        .map_err(|e| match e.downcast::<labios_label::Error>() {
            Ok(e) => e,
            Err(e) => labios_label::Error::Unavailable(format!("{e:#}")),
        })
    }
}

pub async fn s3(mut config: Config, listen: &str) -> anyhow::Result<()> {
    let mut signals = crate::processes::StopSignal::install()?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("labios s3: cannot listen on {listen}"))?;
    let address = listener.local_addr()?;
    // An object arrives whole: nothing is gained by holding its pieces in
    // a small-write cache, and a PUT must be stored when it returns.
    config.client.min_label_size = 0;
    let mut served = None;
    if config.deployment == Deployment::Embedded {
        let endpoint = Endpoint::parse(&config.endpoint())?;
        if !reachable(&endpoint).await {
            served = Some(Served::start(config.clone()).await?);
        }
    }
    let registry = labios_connect::service_inventory(&config.connection())
        .await
        .context("labios s3")?;
    let objects = ObjectBuckets::open(&config.s3.buckets)?;
    let apps = registry.apps().await?;
    for (name, b) in &config.s3.buckets {
        if !apps.iter().any(|a| a.name == b.owner) {
            eprintln!(
                "labios s3: warning: bucket {name} belongs to {:?}, which is not a registered application (yet)",
                b.owner
            );
        }
    }
    let tenants = Arc::new(Deployed { config, registry });
    println!(
        "labios s3: serving the LABIOS namespace over S3 at http://{address} (credentials: `labios app create NAME`)"
    );
    labios_gateway::serve(listener, Gateway::service(tenants, objects), signals.recv()).await?;
    eprintln!("labios s3: stopped");
    if let Some(s) = served {
        signals.or_again("labios s3", s.shutdown()).await?;
    }
    Ok(())
}

//! The model checker's target for LABIOS reached through the client API
//! (`labios_client::Client`). The calls are the same whatever deployment
//! is behind the clients (embedded, a cluster that crashes, IRIS mounts),
//! so they are written once here; a deployment says only what differs
//! ([`Deployment`]).

use super::model::{Abilities, Target, CLIENTS, OTHER_APP};
use async_trait::async_trait;
use bytes::Bytes;
use labios_client::Client;
use labios_label::Error;
use tokio::sync::RwLock;

/// What differs between deployments reached through the client API.
#[async_trait]
pub trait Deployment: Send + Sync {
    fn abilities(&self) -> Abilities;
    /// As [`Target::path`].
    fn path(&self, case: u64, b: bool, file: usize) -> String;
    /// A new client of application A (`b` false) or B.
    async fn client(&self, b: bool) -> Client;
    /// Stops and starts the deployment (or crashes part of it) and waits
    /// until it is usable; the clients are connected anew afterwards.
    async fn restart(&self);
    /// As [`Target::settled`].
    async fn settled(&self) -> Result<(), String>;
}

/// The client-API target over `deployment`: clients 0 and 1 of
/// application A, client 2 of application B.
pub struct ClientApi<D> {
    pub deployment: D,
    clients: RwLock<Vec<Client>>,
}

impl<D: Deployment> ClientApi<D> {
    pub async fn new(deployment: D) -> ClientApi<D> {
        let target = ClientApi {
            deployment,
            clients: RwLock::new(Vec::new()),
        };
        target.connect().await;
        target
    }

    async fn connect(&self) {
        let mut clients = Vec::with_capacity(CLIENTS);
        for c in 0..CLIENTS {
            clients.push(self.deployment.client(c == OTHER_APP).await);
        }
        *self.clients.write().await = clients;
    }

    async fn client(&self, c: usize) -> Client {
        self.clients.read().await[c].clone()
    }
}

#[async_trait]
impl<D: Deployment> Target for ClientApi<D> {
    fn abilities(&self) -> Abilities {
        self.deployment.abilities()
    }

    fn path(&self, case: u64, b: bool, file: usize) -> String {
        self.deployment.path(case, b, file)
    }

    async fn write(
        &self,
        client: usize,
        path: &str,
        offset: u64,
        data: Bytes,
        asynchronous: bool,
    ) -> Result<(), Error> {
        let c = self.client(client).await;
        if asynchronous {
            c.write_at_async(path, offset, data).await.map(|_| ())
        } else {
            c.write_at_sync(path, offset, data).await
        }
    }

    async fn append(
        &self,
        client: usize,
        path: &str,
        data: Bytes,
        asynchronous: bool,
    ) -> Result<(), Error> {
        let c = self.client(client).await;
        if asynchronous {
            c.append_async(path, data).await.map(|_| ())
        } else {
            c.append_sync(path, data).await.map(|_| ())
        }
    }

    async fn wait_all(&self, client: usize) -> Result<(), Error> {
        self.client(client).await.wait_all().await
    }

    async fn read(&self, client: usize, path: &str, offset: u64, len: u64) -> Result<Bytes, Error> {
        self.client(client).await.read_at(path, offset, len).await
    }

    async fn stat(&self, client: usize, path: &str) -> Result<u64, Error> {
        self.client(client).await.stat(path).await.map(|m| m.size)
    }

    async fn truncate(&self, client: usize, path: &str, size: u64) -> Result<(), Error> {
        self.client(client).await.truncate(path, size).await
    }

    async fn rename(&self, client: usize, from: &str, to: &str) -> Result<(), Error> {
        self.client(client).await.rename(from, to).await
    }

    async fn remove(&self, client: usize, path: &str) -> Result<(), Error> {
        self.client(client).await.remove(path).await
    }

    async fn flush(&self, client: usize, path: &str) -> Result<(), Error> {
        self.client(client).await.flush(path).await
    }

    async fn set_xattr(
        &self,
        client: usize,
        path: &str,
        name: &str,
        value: Option<Bytes>,
    ) -> Result<(), Error> {
        self.client(client).await.set_xattr(path, name, value).await
    }

    async fn xattrs(&self, client: usize, path: &str) -> Result<Vec<(String, Bytes)>, Error> {
        self.client(client).await.xattrs(path).await
    }

    async fn allocate(
        &self,
        client: usize,
        path: &str,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Result<(), Error> {
        self.client(client)
            .await
            .fallocate(path, mode, offset, len)
            .await
    }

    async fn copy(
        &self,
        client: usize,
        (from, at): (&str, u64),
        (to, to_at): (&str, u64),
        len: u64,
    ) -> Result<u64, Error> {
        let c = self.client(client).await;
        let mut done = 0;
        loop {
            let n = c
                .copy_range(from, at + done, to, to_at + done, len - done)
                .await?;
            done += n;
            if n == 0 || done == len {
                return Ok(done);
            }
        }
    }

    async fn restart(&self) {
        // Old clients go before the deployment stops (an embedded
        // runtime's clients hold parts of it).
        self.clients.write().await.clear();
        self.deployment.restart().await;
        self.connect().await;
    }

    async fn settled(&self) -> Result<(), String> {
        self.deployment.settled().await
    }
}

//! Content manager (article 3.3.1b): the client's view of the warehouse.
//! Write data enters it before its label is published; read results leave it
//! when the label completes; ephemeral rooms hand data from one application
//! to another without touching worker storage.

use bytes::Bytes;
use labios_label::{AppId, Error, LabelId, Result};
use labios_store::{PutAnswer, Warehouse};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct ContentManager {
    warehouse: Arc<dyn Warehouse>,
    app: AppId,
}

/// Warehouse key of a write label's data. Every key of an application's
/// labels starts with `a<app>/`, which is what `labios serve` and the workers
/// check (README "Tenants").
pub fn write_key(app: AppId, id: LabelId) -> String {
    format!("a{app}/w/{id}")
}

/// Warehouse key where a read label leaves its result.
pub fn read_key(app: AppId, id: LabelId) -> String {
    format!("a{app}/r/{id}")
}

fn room_key(app: AppId, name: &str) -> String {
    format!("room/{app}/{name}")
}

impl ContentManager {
    pub fn new(warehouse: Arc<dyn Warehouse>, app: AppId) -> Self {
        ContentManager { warehouse, app }
    }

    pub async fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.warehouse.put(key, data).await
    }

    /// A write's data, its label to be pushed next without waiting for
    /// the put ([`Warehouse::put_ordered`]).
    pub async fn put_ordered(&self, key: &str, data: Bytes) -> Result<PutAnswer> {
        self.warehouse.put_ordered(key, data).await
    }

    pub async fn take(&self, key: &str) -> Result<Option<Bytes>> {
        self.warehouse.take(key).await
    }

    pub async fn delete(&self, key: &str) -> Result<bool> {
        self.warehouse.delete(key).await
    }

    /// Leaves `data` in application `to`'s room under `name`.
    pub async fn share(&self, to: AppId, name: &str, data: Bytes) -> Result<()> {
        check_room_name(name)?;
        self.warehouse.put(&room_key(to, name), data).await
    }

    /// Takes what another application left in this application's room,
    /// waiting up to `timeout` for it to arrive.
    pub async fn receive(&self, name: &str, timeout: Duration) -> Result<Bytes> {
        check_room_name(name)?;
        let key = room_key(self.app, name);
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(200);
        loop {
            if let Some(data) = self.warehouse.take(&key).await? {
                return Ok(data);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(format!("nothing arrived in room {name:?}")));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}

fn check_room_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 255 || name.contains('/') || name.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "room name {name:?} must be 1-255 bytes without '/' or NUL"
        )));
    }
    Ok(())
}

//! Labels whose source or destination is external storage (article
//! 3.3.3a): the worker moves bytes between the warehouse and the external
//! system through the mount's mapper. No extent is recorded: the external
//! system stays the only authority on what it holds.

use super::{bad_pointer, Done, Executor, Failure, MAX_READ};
use labios_label::{Label, Pointer};

impl Executor {
    pub(super) async fn write_external(&self, label: &Label) -> Result<Done, Failure> {
        let Pointer::Warehouse { key, len } = &label.source else {
            return Err(bad_pointer(label, "source", "a warehouse entry"));
        };
        let Pointer::Uri { uri, offset, .. } = &label.destination else {
            return Err(bad_pointer(label, "destination", "external storage"));
        };
        let target = self.mounts.resolve(uri).map_err(|e| e.to_string())?;
        let data = self.staged(label, key, *len).await?;
        target
            .mapper()
            .write(&target.path, *offset, data)
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        Ok(Done::bytes(*len))
    }

    pub(super) async fn flush_external(&self, label: &Label) -> Result<Done, Failure> {
        let Pointer::Uri { uri, .. } = &label.source else {
            return Err(bad_pointer(label, "source", "external storage"));
        };
        let target = self.mounts.resolve(uri).map_err(|e| e.to_string())?;
        target
            .mapper()
            .flush(&target.path)
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        Ok(Done::bytes(0))
    }

    pub(super) async fn read_external(&self, label: &Label) -> Result<Done, Failure> {
        let Pointer::Uri { uri, offset, len } = &label.source else {
            return Err(bad_pointer(label, "source", "external storage"));
        };
        let Pointer::Warehouse { key, .. } = &label.destination else {
            return Err(bad_pointer(label, "destination", "a warehouse entry"));
        };
        if *len > MAX_READ {
            return Err(format!(
                "read of {len} bytes is larger than the {MAX_READ} bytes one label may read"
            ));
        }
        let target = self.mounts.resolve(uri).map_err(|e| e.to_string())?;
        let data = target
            .mapper()
            .read(&target.path, *offset, *len)
            .await
            .map_err(|e| format!("{uri}: {e}"))?;
        let n = data.len() as u64;
        self.stores
            .warehouse
            .put_result(key, data)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Done::bytes(n))
    }
}

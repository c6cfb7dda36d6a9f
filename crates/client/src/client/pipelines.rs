//! Software-defined storage from the client's side (article 3.5.3): labels
//! that carry a pipeline of functions for the workers to run, and the
//! application's private program repository (3.6.2d).

use super::{Client, Handle};
use bytes::Bytes;
use labios_label::{
    part_key, Error, FileId, LabelId, LabelKind, Operation, Pointer, Result, Segment, WorkerId,
};
use std::collections::HashMap;

use crate::content_manager::{read_key, write_key};
use crate::label_manager::first_failure;

/// Largest module the repository takes.
const MAX_MODULE: usize = 16 << 20;

impl Client {
    /// Computational storage: `data` goes to the worker as it is and the
    /// worker writes what `ops` make of it (sorted, compressed, encrypted...)
    /// at `offset`. Returns once the data is staged in the warehouse and its
    /// label published; wait on the handle for the final write, or exit.
    pub async fn write_through(
        &self,
        path: &str,
        offset: u64,
        data: Bytes,
        ops: Vec<Operation>,
    ) -> Result<Handle> {
        self.check_pipeline(&ops).await?;
        if ops.is_empty() {
            return self.write_at_async(path, offset, data).await;
        }
        let meta = self.file_for_write(path.into(), 0o644).await?;
        // Earlier small writes of the file land first.
        self.flush_small(meta.id).await?;
        let mut label = self.inner.labels.new_label(LabelKind::Write);
        let key = write_key(self.inner.app, label.id);
        label.source = Pointer::Warehouse {
            key: key.clone(),
            len: data.len() as u64,
        };
        label.destination = Pointer::File {
            path: meta.path.clone(),
            file: meta.id,
            offset,
            len: data.len() as u64,
        };
        label.operations = ops;
        let id = label.id;
        self.stage_and_publish(meta.id, vec![(key, data)], vec![label])
            .await?;
        Ok(Handle {
            labels: vec![id],
            cached: None,
        })
    }

    /// In-situ analytics: runs `ops` over the whole file where its bytes
    /// are and returns only their result (Figure 10: the median of a file).
    ///
    /// A file held by one worker is processed there. A file spread over
    /// several is first gathered, worker to worker through the warehouse,
    /// for one worker to run the pipeline on: the data never reaches the
    /// client either way.
    pub async fn query(&self, path: &str, ops: Vec<Operation>) -> Result<Bytes> {
        self.check_pipeline(&ops).await?;
        if ops.is_empty() {
            return Err(Error::InvalidArgument(
                "a query needs at least one function".into(),
            ));
        }
        let meta = self.file_to_read(path.into()).await?;
        let extents = self.inner.catalog.extents(meta.id, 0, meta.size).await?;
        let capable: HashMap<WorkerId, bool> = self
            .inner
            .catalog
            .inventory()
            .workers()
            .await?
            .into_iter()
            .map(|w| (w.spec.id, w.spec.functions))
            .collect();
        let holders: Vec<WorkerId> = {
            let mut h: Vec<WorkerId> = extents.iter().map(|e| e.worker).collect();
            h.sort_unstable();
            h.dedup();
            h
        };
        let local = holders.len() <= 1
            && holders
                .first()
                .is_none_or(|w| capable.get(w).copied().unwrap_or(false));
        let mut label = self.inner.labels.new_label(LabelKind::Read);
        let result = read_key(self.inner.app, label.id);
        label.source = Pointer::File {
            path: meta.path.clone(),
            file: meta.id,
            offset: 0,
            len: meta.size,
        };
        label.destination = Pointer::Warehouse {
            key: result.clone(),
            len: 0,
        };
        label.operations = ops;
        if !local {
            label.index = self.gather(&meta.path, meta.id, &extents, &result).await?;
        }
        let id = label.id;
        self.inner.labels.publish(vec![label]).await?;
        let statuses = self.inner.labels.wait_taking(&[id]).await?;
        first_failure(&statuses)?;
        let key = statuses[0].result_key.clone().unwrap_or(result);
        self.inner
            .content
            .take(&key)
            .await?
            .ok_or_else(|| Error::Storage(format!("result of query label {id} is missing")))
    }

    /// Refuses a pipeline with a bad function or argument, or naming a
    /// function this application has not registered, before any label.
    async fn check_pipeline(&self, ops: &[Operation]) -> Result<()> {
        labios_functions::validate(ops, true)?;
        let inventory = self.inner.catalog.inventory();
        for op in ops {
            if !labios_functions::is_builtin(&op.function)
                && inventory
                    .function(self.inner.app, &op.function)
                    .await?
                    .is_none()
            {
                return Err(Error::InvalidArgument(format!(
                    "unknown function {} (not a built-in and not registered by application {})",
                    op.function, self.inner.app
                )));
            }
        }
        Ok(())
    }

    /// Reads every run of the file on the worker holding it into the
    /// warehouse as part `i` of the query result `result`; returns the
    /// segments (file range of each part) the query label assembles.
    async fn gather(
        &self,
        path: &str,
        file: FileId,
        extents: &[labios_store::Extent],
        result: &str,
    ) -> Result<Vec<Segment>> {
        let mut runs: Vec<(WorkerId, u64, u64)> = Vec::new();
        for e in extents {
            match runs.last_mut() {
                Some((w, _, end)) if *w == e.worker && *end == e.offset => *end += e.len,
                _ => runs.push((e.worker, e.offset, e.offset + e.len)),
            }
        }
        let mut labels = Vec::new();
        let mut segments = Vec::new();
        for (_, start, end) in runs {
            for (mut label, at, n) in self
                .inner
                .labels
                .read_labels(path, file, start, end - start)
            {
                label.destination = Pointer::Warehouse {
                    key: part_key(result, segments.len()),
                    len: n,
                };
                segments.push(Segment {
                    file_offset: at,
                    buf_offset: 0,
                    len: n,
                });
                labels.push(label);
            }
        }
        let ids: Vec<LabelId> = labels.iter().map(|l| l.id).collect();
        self.inner.labels.publish(labels).await?;
        if let Err(e) = first_failure(&self.inner.labels.wait(&ids).await?) {
            for i in 0..segments.len() {
                let _ = self.inner.content.delete(&part_key(result, i)).await;
            }
            return Err(e);
        }
        Ok(segments)
    }

    /// Registers a WebAssembly module (binary or WAT text) as this
    /// application's function `name`, usable in pipelines of its labels
    /// only; a module of that name is replaced.
    pub async fn register_function(&self, name: &str, module: Bytes) -> Result<()> {
        check_function_name(name)?;
        if module.len() > MAX_MODULE {
            return Err(Error::InvalidArgument(format!(
                "module {name} is {} bytes; the limit is {MAX_MODULE}",
                module.len()
            )));
        }
        // Checked now, so that a bad module is refused at registration and
        // not when a worker first runs it; compiling is the worker's.
        let (n, m) = (name.to_string(), module.clone());
        tokio::task::spawn_blocking(move || labios_functions::check_module(&n, &m).map(drop))
            .await
            .map_err(|e| Error::Storage(format!("checking module {name}: {e}")))??;
        self.inner
            .catalog
            .inventory()
            .put_function(self.inner.app, name, Some(module))
            .await
    }

    pub async fn remove_function(&self, name: &str) -> Result<()> {
        let inventory = self.inner.catalog.inventory();
        if inventory.function(self.inner.app, name).await?.is_none() {
            return Err(Error::NotFound(format!("function {name}")));
        }
        inventory.put_function(self.inner.app, name, None).await
    }

    /// This application's registered functions.
    pub async fn functions(&self) -> Result<Vec<String>> {
        self.inner
            .catalog
            .inventory()
            .functions(self.inner.app)
            .await
    }
}

/// Names are plain identifiers and never shadow a built-in, which would
/// make a pipeline mean two things.
fn check_function_name(name: &str) -> Result<()> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !plain {
        return Err(Error::InvalidArgument(format!(
            "function name {name:?}: use 1-64 letters, digits, - or _"
        )));
    }
    if labios_functions::is_builtin(name) {
        return Err(Error::InvalidArgument(format!(
            "{name} is a built-in function; choose another name"
        )));
    }
    Ok(())
}

//! Labels that carry functions (software-defined storage, article 3.5.3):
//! the worker runs the pipeline where the data is.
//!
//! * A write with operations (computational storage): the application
//!   returned once its data was staged in the warehouse; here the worker
//!   transforms it and writes the result at the label's offset.
//! * A read with operations (in-situ analytics): the worker runs the
//!   pipeline on the bytes and leaves only its result in the warehouse.
//!   Its input is its own device's range, or, for a file spread over
//!   several workers, the parts earlier reads gathered into the warehouse.

use super::{answered_in, bad_pointer, file_of, Done, Executor, Failure, Range, Staged};
use bytes::Bytes;
use labios_functions::Context;
use labios_label::{part_key, Label, Pointer};
use std::collections::HashMap;

impl Executor {
    /// Computational storage: the pipeline's output is what the label
    /// writes, through the same sequence as any write (the newest label
    /// wins, whatever order the labels arrive in).
    pub(super) async fn write_through(&self, label: &Label) -> Result<Done, Failure> {
        let Pointer::Warehouse { key, len } = &label.source else {
            return Err(bad_pointer(label, "source", "a warehouse entry"));
        };
        let (file, offset, _) = file_of(label, &label.destination, "destination")?;
        // A copy: staged bytes may lie in a client's shared region, which
        // the client can still write, and functions parse their input (a
        // byte changed after a UTF-8 check would break the check's word).
        let data = Bytes::copy_from_slice(&self.staged(label, key, *len).await?);
        let out = self.apply(label, data).await?;
        let ranges = [Range {
            file_offset: offset,
            buf_offset: 0,
            len: out.len() as u64,
        }];
        let guard = self.not_yet_overwritten(label, file, &ranges).await?;
        let staged = Staged {
            file,
            ranges: ranges.to_vec(),
            data: out,
            guard,
        };
        let size = self.store(label, staged).await?;
        Ok(Done::bytes(size))
    }

    pub(super) async fn query(&self, label: &Label) -> Result<Done, Failure> {
        let (file, offset, len) = file_of(label, &label.source, "source")?;
        let key = answered_in(label, len, "a pipeline over")?;
        let input = if label.index.is_empty() {
            self.read_local(file, offset, len).await?
        } else {
            self.gathered(label, key, offset, len).await?
        };
        let out = self.apply(label, Bytes::from(input)).await?;
        self.answer(key, out, len).await
    }

    /// The input of a gathered query: part `i` of the result key holds the
    /// bytes of index segment `i`; the rest of the range reads as zeros.
    async fn gathered(
        &self,
        label: &Label,
        key: &str,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, Failure> {
        let mut buf = vec![0u8; len as usize];
        for (i, seg) in label.index.iter().enumerate() {
            let part = part_key(key, i);
            let data = self
                .stores
                .warehouse
                .take(&part)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("part {part} of label {} is missing", label.id))?;
            let start = seg
                .file_offset
                .checked_sub(offset)
                .filter(|s| s + seg.len <= len && data.len() as u64 == seg.len)
                .ok_or_else(|| {
                    format!(
                        "part {part} ({} bytes for {seg:?}) does not fit label {}",
                        data.len(),
                        label.id
                    )
                })?;
            buf[start as usize..][..data.len()].copy_from_slice(&data);
        }
        Ok(buf)
    }

    /// Runs the label's pipeline on a blocking thread with its owner's key
    /// and functions: another application's functions are never found.
    async fn apply(&self, label: &Label, input: Bytes) -> Result<Bytes, Failure> {
        let Some(sandbox) = self.sandbox.clone() else {
            return Err(format!(
                "worker {} does not run functions (functions = false)",
                self.id
            ));
        };
        let owner = label.owner;
        let mut modules = HashMap::new();
        for op in label
            .operations
            .iter()
            .filter(|op| !labios_functions::is_builtin(&op.function))
        {
            if let Some(m) = self
                .stores
                .inventory
                .function(owner, &op.function)
                .await
                .map_err(|e| e.to_string())?
            {
                modules.insert(op.function.clone(), m);
            }
        }
        let needs_key = label
            .operations
            .iter()
            .any(|op| matches!(op.function.as_str(), "encrypt" | "decrypt"));
        let key = if needs_key {
            let app = self
                .stores
                .inventory
                .app(owner)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("application {owner} is not registered"))?;
            Some(labios_functions::app_key(&app.secret))
        } else {
            None
        };
        let ops = label.operations.clone();
        let run = self.compute.run(move || {
            let ctx = Context {
                app: owner,
                key,
                modules: &modules,
                sandbox: Some(&sandbox),
            };
            labios_functions::apply(&ops, input, &ctx)
        });
        match run.await {
            Ok(out) => out.map_err(|e| e.to_string()),
            Err(e) => Err(format!("pipeline task failed: {e}")),
        }
    }
}

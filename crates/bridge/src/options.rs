//! The tunables of the files-over-objects mappings, from a mount's
//! declaration (`bucket_size`, `metadata`) or set directly by a program.

use crate::balanced::{Buckets, DEFAULT_BUCKET};
use crate::external::MountConfig;
use crate::mapping::{mapper, FileMapper, Mapping};
use crate::read_optimized::{Granularities, DEFAULT_LEVELS};
use crate::virtual_file::{MetadataMode, Relaxed, VirtualFiles};
use crate::write_optimized::WriteLog;
use labios_label::{Error, Result};
use opendal::Operator;
use std::sync::Arc;

/// The balanced mapping.
pub type Balanced = VirtualFiles<Buckets>;
/// The read-optimized mapping.
pub type ReadOptimized = VirtualFiles<Granularities>;
/// The write-optimized mapping.
pub type WriteOptimized = VirtualFiles<WriteLog>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapperOptions {
    /// Balanced bucket size, and the smallest read-optimized one.
    pub bucket_size: u64,
    /// Read-optimized granularities: `bucket_size * 2^k`, k < levels.
    pub levels: u32,
    pub metadata: MetadataMode,
    pub relaxed: Relaxed,
}

impl Default for MapperOptions {
    fn default() -> Self {
        MapperOptions {
            bucket_size: DEFAULT_BUCKET,
            levels: DEFAULT_LEVELS,
            metadata: MetadataMode::default(),
            relaxed: Relaxed::default(),
        }
    }
}

impl MapperOptions {
    /// The options a mount declares; options its mapping has no use for
    /// are refused rather than silently ignored.
    pub fn from_mount(config: &MountConfig) -> Result<MapperOptions> {
        let mut o = MapperOptions {
            metadata: config.metadata,
            relaxed: Relaxed {
                delay: config.hold(),
                ..Relaxed::default()
            },
            ..Default::default()
        };
        config.check_hold().map_err(Error::InvalidArgument)?;
        if let Some(b) = config.bucket_size {
            if !matches!(config.mapping, Mapping::Balanced | Mapping::ReadOptimized) {
                return Err(Error::InvalidArgument(format!(
                    "bucket_size applies to the balanced and read-optimized mappings, not {:?}",
                    config.mapping
                )));
            }
            o.bucket_size = b;
        }
        if config.mapping == Mapping::Direct && config.metadata != MetadataMode::Strict {
            return Err(Error::InvalidArgument(
                "metadata = \"relaxed\" needs a mapping other than direct, which keeps no metadata of its own".into(),
            ));
        }
        Ok(o)
    }

    pub fn balanced(&self, op: Operator) -> Result<Balanced> {
        VirtualFiles::new(
            op,
            Buckets::new(self.bucket_size)?,
            self.metadata,
            self.relaxed,
        )
    }

    pub fn read_optimized(&self, op: Operator) -> Result<ReadOptimized> {
        let layout = Granularities::new(self.bucket_size, self.levels)?;
        VirtualFiles::new(op, layout, self.metadata, self.relaxed)
    }

    pub fn write_optimized(&self, op: Operator) -> Result<WriteOptimized> {
        VirtualFiles::new(op, WriteLog::default(), self.metadata, self.relaxed)
    }

    /// The mapper of `mapping` over `op` with these options.
    pub fn mapper(&self, mapping: Mapping, op: Operator) -> Result<Arc<dyn FileMapper>> {
        Ok(match mapping {
            Mapping::Direct => mapper(Mapping::Direct, op),
            Mapping::Balanced => Arc::new(self.balanced(op)?),
            Mapping::ReadOptimized => Arc::new(self.read_optimized(op)?),
            Mapping::WriteOptimized => Arc::new(self.write_optimized(op)?),
        })
    }
}

/// The mapper a mount declares, with its options; a bad option is an
/// error (for `Mounts::new` to name the mount).
pub fn mapper_for(config: &MountConfig, op: Operator) -> Result<Arc<dyn FileMapper>> {
    MapperOptions::from_mount(config)?.mapper(config.mapping, op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_options_are_clear_errors() {
        let op = Operator::new(opendal::services::Memory::default())
            .unwrap()
            .finish();
        let mut c = MountConfig {
            uri: "memory://".into(),
            mapping: Mapping::Balanced,
            bucket_size: Some(0),
            ..Default::default()
        };
        let err = mapper_for(&c, op.clone()).unwrap_err().to_string();
        assert!(err.contains("bucket size 0"), "{err}");
        c.mapping = Mapping::WriteOptimized;
        c.bucket_size = Some(4096);
        let err = mapper_for(&c, op.clone()).unwrap_err().to_string();
        assert!(err.contains("bucket_size applies to"), "{err}");
        c.mapping = Mapping::Direct;
        c.bucket_size = None;
        c.metadata = MetadataMode::Relaxed;
        assert!(mapper_for(&c, op.clone()).is_err());
        c.mapping = Mapping::ReadOptimized;
        c.bucket_size = Some(4096);
        assert!(mapper_for(&c, op).is_ok());
    }
}

//! LABIOS times (nanoseconds since the epoch) as S3 timestamps.

use s3s::dto::Timestamp;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub fn timestamp(nanos: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_nanos(nanos))
}

/// HTTP dates have whole seconds: conditions compare at that resolution.
pub fn timestamp_secs(nanos: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_secs(nanos / 1_000_000_000))
}

/// Now, for uploads that have no file yet.
pub fn now() -> Timestamp {
    Timestamp::from(SystemTime::now())
}

//! Label authentication: a client signs every label it publishes with its
//! application's secret, and the dispatcher and the worker verify the
//! signature against the application registry before acting on it. A label
//! claiming an owner whose secret its publisher does not know is refused.
//!
//! The signature is HMAC-SHA256, keyed by the application secret, over the
//! label's canonical encoding ([`crate::encode`]) with `auth` emptied. It is
//! not a freshness proof: a captured label can be replayed by whoever can
//! reach the queues, which is why queues are infrastructure reached with
//! service credentials (README "Tenants").

use crate::{AppId, Error, Label, Result};
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Length of a label signature.
pub const SIGNATURE_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

fn mac(label: &Label, secret: &[u8]) -> HmacSha256 {
    let mut unsigned = label.clone();
    unsigned.auth = Vec::new();
    let mut mac = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(&crate::encode(&unsigned));
    mac
}

/// The signature of `label` under `secret`.
pub fn signature(label: &Label, secret: &[u8]) -> Vec<u8> {
    mac(label, secret).finalize().into_bytes().to_vec()
}

/// Signs `label` in place with its owner's secret.
pub fn sign(label: &mut Label, secret: &[u8]) {
    label.auth = signature(label, secret);
}

/// Checks `label.auth` against `secret` (constant time).
pub fn verify(label: &Label, secret: &[u8]) -> Result<()> {
    if label.auth.len() == SIGNATURE_LEN && mac(label, secret).verify_slice(&label.auth).is_ok() {
        Ok(())
    } else {
        Err(denied(label.owner))
    }
}

/// The error every forged, unsigned or unverifiable label gets.
pub fn denied(owner: AppId) -> Error {
    Error::PermissionDenied(format!(
        "label signature does not match application {owner}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LabelIdGen, LabelKind, Pointer};

    #[test]
    fn signed_labels_verify_and_tampering_is_caught() {
        let ids = LabelIdGen::new(1);
        let mut l = Label::new(ids.next(), LabelKind::Read, 7);
        l.source = Pointer::File {
            path: "/a".into(),
            file: 3,
            offset: 0,
            len: 10,
        };
        assert!(verify(&l, b"s3cret").is_err(), "unsigned");
        sign(&mut l, b"s3cret");
        verify(&l, b"s3cret").unwrap();
        assert!(verify(&l, b"other").is_err());
        let mut moved = l.clone();
        moved.owner = 8;
        let e = verify(&moved, b"s3cret").unwrap_err();
        assert_eq!(
            e.to_string(),
            "permission denied: label signature does not match application 8"
        );
        let mut longer = l.clone();
        longer.source = Pointer::File {
            path: "/a".into(),
            file: 3,
            offset: 0,
            len: 11,
        };
        assert!(verify(&longer, b"s3cret").is_err());
    }
}

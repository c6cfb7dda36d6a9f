//! Encryption with per-application keys, and checksums.

use aes_gcm::aead::{AeadCore, AeadInPlace, KeyInit, OsRng};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use hkdf::Hkdf;
use labios_label::{AppId, Error, Result};
use sha2::{Digest, Sha256};

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// Changing it changes every application's key, so it carries a version.
const KEY_INFO: &[u8] = b"labios-functions aes-256-gcm key v1";

/// The AES-256 key of an application, derived from its secret with
/// HKDF-SHA256: workers need no key store, and a key never leaves the
/// process that derives it.
pub fn app_key(secret: &str) -> [u8; 32] {
    let mut key = [0u8; 32];
    Hkdf::<Sha256>::new(None, secret.as_bytes())
        .expand(KEY_INFO, &mut key)
        .expect("32 bytes is a valid HKDF-SHA256 output length");
    key
}

fn cipher(function: &str, app: AppId, key: Option<&[u8; 32]>) -> Result<Aes256Gcm> {
    let key = key.ok_or_else(|| {
        Error::PermissionDenied(format!(
            "function {function} needs the key of application {app}, and none was given"
        ))
    })?;
    Ok(Aes256Gcm::new(key.into()))
}

/// Output: a fresh random 96-bit nonce, the ciphertext, the 128-bit tag.
pub(crate) fn encrypt(app: AppId, key: Option<&[u8; 32]>, input: &[u8]) -> Result<Vec<u8>> {
    let cipher = cipher("encrypt", app, key)?;
    let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
    let mut out = Vec::with_capacity(NONCE_LEN + input.len() + TAG_LEN);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(input);
    let tag = cipher
        .encrypt_in_place_detached(&nonce, b"", &mut out[NONCE_LEN..])
        .map_err(|_| {
            Error::InvalidArgument(format!(
                "function encrypt: {} bytes are more than AES-GCM can encrypt at once",
                input.len()
            ))
        })?;
    out.extend_from_slice(&tag);
    Ok(out)
}

pub(crate) fn decrypt(app: AppId, key: Option<&[u8; 32]>, input: &[u8]) -> Result<Vec<u8>> {
    let cipher = cipher("decrypt", app, key)?;
    if input.len() < NONCE_LEN + TAG_LEN {
        return Err(Error::Malformed(format!(
            "function decrypt: {} bytes are too short for encrypted data (nonce and tag alone take {})",
            input.len(),
            NONCE_LEN + TAG_LEN
        )));
    }
    let (nonce, rest) = input.split_at(NONCE_LEN);
    let (ciphertext, tag) = rest.split_at(rest.len() - TAG_LEN);
    let mut out = ciphertext.to_vec();
    cipher
        .decrypt_in_place_detached(
            Nonce::from_slice(nonce),
            b"",
            &mut out,
            Tag::from_slice(tag),
        )
        .map_err(|_| {
            Error::Malformed(format!(
                "function decrypt: authentication failed: the data was modified or was not encrypted with the key of application {app}"
            ))
        })?;
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Checksum {
    Crc32c,
    Xxh3,
    Sha256,
}

/// Lowercase hex text, without a newline, so that it compares directly with
/// digests computed elsewhere.
pub(crate) fn checksum(kind: Checksum, input: &[u8]) -> Vec<u8> {
    let digest = match kind {
        Checksum::Crc32c => crc32c::crc32c(input).to_be_bytes().to_vec(),
        Checksum::Xxh3 => xxhash_rust::xxh3::xxh3_64(input).to_be_bytes().to_vec(),
        Checksum::Sha256 => Sha256::digest(input).to_vec(),
    };
    digest
        .iter()
        .flat_map(|b| [HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]])
        .collect()
}

const HEX: &[u8; 16] = b"0123456789abcdef";

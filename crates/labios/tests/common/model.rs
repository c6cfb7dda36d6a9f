//! The model checker (issue 11): random sequences of operations run against
//! LABIOS and against a plain in-memory model of files, and every read,
//! size, attribute list and error must agree, byte for byte.
//!
//! A case is a list of steps; a step is one or more operations of different
//! clients on different files, run at once (real concurrency, whose result
//! does not depend on order). Clients belong to two applications: the
//! second works in its own directory and sometimes reaches for the first
//! one's files, which must be refused without effect. A program that shares
//! files synchronizes: before a client touches a file, the others wait for
//! their asynchronous writes to it. A client's own reads see its own
//! writes at once (the client API promises read-after-write).
//!
//! Everything derives from a seed: `LABIOS_MODEL_SEED` replays a run,
//! `LABIOS_MODEL_CASES` runs more cases. A failing case is shrunk (steps
//! removed while it still fails), printed, and written to a file that
//! `LABIOS_MODEL_REPLAY=FILE` runs again alone. `LABIOS_MODEL_ONLY=NAME`
//! runs one mapping of a test that checks several.

use async_trait::async_trait;
use bytes::Bytes;
use labios_label::Error;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Clients of the case: 0 and 1 of application A, 2 of application B.
pub const CLIENTS: usize = 3;
/// The client of application B.
pub const OTHER_APP: usize = 2;
/// Files each application works on.
const FILES: usize = 4;
/// Largest file the generator makes.
const MAX_FILE: u64 = 6 << 20;
const LABEL: u64 = 1 << 20;
const SMALL: u64 = 64 << 10;
/// Longest one call of the checker may take: then it is a hang, which
/// fails the case (shrunk and replayable like any disagreement) instead
/// of stalling the run. The client's own wait lasts 10 min; no operation
/// of a case needs a minute, even on a busy machine.
const OP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
const HANG: &str = "no answer within the checker's deadline (a hang)";

/// One operation. Files are numbered; `app_b` files live in application
/// B's directory, the others in A's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Write {
        client: usize,
        file: usize,
        offset: u64,
        len: u64,
        asynchronous: bool,
        seed: u64,
    },
    /// `len` bytes at the end of the file (O_APPEND), the file created if
    /// missing.
    Append {
        client: usize,
        file: usize,
        len: u64,
        asynchronous: bool,
        seed: u64,
    },
    Read {
        client: usize,
        file: usize,
        offset: u64,
        len: u64,
    },
    Stat {
        client: usize,
        file: usize,
    },
    Truncate {
        client: usize,
        file: usize,
        size: u64,
    },
    Rename {
        client: usize,
        from: usize,
        to: usize,
    },
    Remove {
        client: usize,
        file: usize,
    },
    Flush {
        client: usize,
        file: usize,
    },
    SetXattr {
        client: usize,
        file: usize,
        name: u8,
        value: Option<u8>,
    },
    Xattrs {
        client: usize,
        file: usize,
    },
    WaitAll {
        client: usize,
    },
    /// fallocate(2) with Linux's mode bits ([`Allocation`]).
    Allocate {
        client: usize,
        file: usize,
        how: Allocation,
        offset: u64,
        len: u64,
    },
    /// copy_file_range(2) from one file of the client's application to
    /// another; answers how many bytes it copied.
    Copy {
        client: usize,
        from: usize,
        to: usize,
        from_offset: u64,
        to_offset: u64,
        len: u64,
    },
    /// Application B's client reaches for one of A's files.
    Intrude {
        file: usize,
        how: Intrusion,
    },
    /// Every client waits, the deployment stops cleanly and starts again.
    Restart,
}

/// The fallocate(2) modes LABIOS implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Allocation {
    /// Mode 0: the file grows to cover the range.
    Extend,
    /// `FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`.
    Punch,
    /// `FALLOC_FL_ZERO_RANGE`, with or without `FALLOC_FL_KEEP_SIZE`.
    Zero { keep_size: bool },
}

impl Allocation {
    pub fn mode(self) -> i32 {
        match self {
            Allocation::Extend => 0,
            Allocation::Punch => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            Allocation::Zero { keep_size: false } => libc::FALLOC_FL_ZERO_RANGE,
            Allocation::Zero { keep_size: true } => {
                libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Intrusion {
    Read,
    Write,
    Remove,
    Rename,
}

/// What a target can do; the generator makes only these operations.
#[derive(Debug, Clone, Copy)]
pub struct Abilities {
    pub asynchronous: bool,
    /// Appends at the end of the file, decided by LABIOS.
    pub append: bool,
    pub truncate: bool,
    pub rename: bool,
    pub xattrs: bool,
    pub tenants: bool,
    pub restart: bool,
    /// fallocate(2) and copy_file_range(2).
    pub allocate: bool,
    /// Faults are injected: an operation may fail, with its outcome then
    /// read back and checked to be all or nothing (bytes of a failed write
    /// each old or new).
    pub faults: bool,
}

impl Abilities {
    /// Every operation, restarts included, and no injected faults.
    pub const EVERY_OPERATION: Abilities = Abilities {
        asynchronous: true,
        append: true,
        truncate: true,
        rename: true,
        xattrs: true,
        tenants: true,
        restart: true,
        allocate: true,
        faults: false,
    };
}

/// A system under test: LABIOS reached some way.
#[async_trait]
pub trait Target: Send + Sync {
    fn abilities(&self) -> Abilities;
    /// The path of file `file` of application A (`b` false) or B in case
    /// `case`.
    fn path(&self, case: u64, b: bool, file: usize) -> String;
    async fn write(
        &self,
        client: usize,
        path: &str,
        offset: u64,
        data: Bytes,
        asynchronous: bool,
    ) -> Result<(), Error>;
    /// Appends `data` at the end of the file (never called unless the
    /// target's abilities say `append`).
    async fn append(
        &self,
        client: usize,
        path: &str,
        data: Bytes,
        asynchronous: bool,
    ) -> Result<(), Error>;
    async fn wait_all(&self, client: usize) -> Result<(), Error>;
    async fn read(&self, client: usize, path: &str, offset: u64, len: u64) -> Result<Bytes, Error>;
    /// The size of the file.
    async fn stat(&self, client: usize, path: &str) -> Result<u64, Error>;
    async fn truncate(&self, client: usize, path: &str, size: u64) -> Result<(), Error>;
    async fn rename(&self, client: usize, from: &str, to: &str) -> Result<(), Error>;
    async fn remove(&self, client: usize, path: &str) -> Result<(), Error>;
    async fn flush(&self, client: usize, path: &str) -> Result<(), Error>;
    async fn set_xattr(
        &self,
        client: usize,
        path: &str,
        name: &str,
        value: Option<Bytes>,
    ) -> Result<(), Error>;
    async fn xattrs(&self, client: usize, path: &str) -> Result<Vec<(String, Bytes)>, Error>;
    /// fallocate(2) with Linux's `mode` bits (never called unless the
    /// target's abilities say `allocate`).
    async fn allocate(
        &self,
        client: usize,
        path: &str,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> Result<(), Error>;
    /// Copies up to `len` bytes, as many calls of copy_file_range(2) as it
    /// takes, and returns how many it copied (fewer only at the source's
    /// end).
    async fn copy(
        &self,
        client: usize,
        from: (&str, u64),
        to: (&str, u64),
        len: u64,
    ) -> Result<u64, Error>;
    async fn restart(&self);
    /// Called once a case has removed its files: checks what must hold of
    /// the whole system then (space given back); an error says what not.
    async fn settled(&self) -> Result<(), String>;
}

/// [`Target::settled`] for a target whose workers' devices hold `held()`
/// bytes: once every file of a case is removed they may keep at most a
/// little. Space other workers hold is given back by deletes the writing
/// worker sends them after its label returns, so this waits for that, up
/// to a deadline.
pub async fn space_given_back<F, H>(held: F) -> Result<(), String>
where
    F: FnMut() -> H,
    H: std::future::Future<Output = u64>,
{
    falls_to("workers still hold", 64 << 10, held).await
}

/// [`Target::settled`] for the warehouse: once every call of a case has
/// returned, nothing staged or read is left in it (an entry left behind
/// holds its room for good, and a full warehouse stops every write).
pub async fn warehouse_emptied<F, H>(held: F) -> Result<(), String>
where
    F: FnMut() -> H,
    H: std::future::Future<Output = u64>,
{
    falls_to("the warehouse still holds", 0, held).await
}

/// Waits until `held()` is at most `bound` bytes, up to a deadline.
async fn falls_to<F, H>(what: &str, bound: u64, mut held: F) -> Result<(), String>
where
    F: FnMut() -> H,
    H: std::future::Future<Output = u64>,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let held = held().await;
        if held <= bound {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!(
                "{what} {held} bytes once every file is removed (bound {bound})"
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct File {
    data: Vec<u8>,
    xattrs: BTreeMap<String, Vec<u8>>,
}

/// The model: what a plain file system would hold.
#[derive(Debug, Default, Clone)]
struct Model {
    /// By (application B?, file number).
    files: BTreeMap<(bool, usize), File>,
}

/// What an operation must return.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Ok,
    Bytes(Vec<u8>),
    Size(u64),
    Xattrs(Vec<(String, Vec<u8>)>),
    NotFound,
    Denied,
}

fn is_b(client: usize) -> bool {
    client == OTHER_APP
}

/// The bytes of a write: random for odd seeds, and for even ones runs a
/// codec shrinks (so that stacks with `zstd` or `lz4` store them packed),
/// still different for every seed.
fn payload(seed: u64, len: u64) -> Bytes {
    let mut v = vec![0u8; len as usize];
    let mut rng = fastrand::Rng::with_seed(seed);
    if seed % 2 == 1 {
        rng.fill(&mut v);
    } else {
        for run in v.chunks_mut(64) {
            run.fill(rng.u8(..4));
        }
    }
    Bytes::from(v)
}

fn xattr_name(n: u8) -> String {
    format!("user.k{n}")
}

impl Model {
    fn size(&self, key: (bool, usize)) -> Option<u64> {
        self.files.get(&key).map(|f| f.data.len() as u64)
    }

    /// Applies `op`, returning what LABIOS must answer.
    fn apply(&mut self, op: &Op) -> Expect {
        match *op {
            Op::Write {
                client,
                file,
                offset,
                len,
                seed,
                ..
            } => {
                let f = self.files.entry((is_b(client), file)).or_default();
                if len > 0 {
                    let end = (offset + len) as usize;
                    if f.data.len() < end {
                        f.data.resize(end, 0);
                    }
                    f.data[offset as usize..end].copy_from_slice(&payload(seed, len));
                }
                Expect::Ok
            }
            Op::Append {
                client,
                file,
                len,
                seed,
                ..
            } => {
                let f = self.files.entry((is_b(client), file)).or_default();
                f.data.extend_from_slice(&payload(seed, len));
                Expect::Ok
            }
            Op::Read {
                client,
                file,
                offset,
                len,
            } => match self.files.get(&(is_b(client), file)) {
                None => Expect::NotFound,
                Some(f) => {
                    let size = f.data.len() as u64;
                    let from = offset.min(size) as usize;
                    let to = offset.saturating_add(len).min(size) as usize;
                    Expect::Bytes(f.data[from..to].to_vec())
                }
            },
            Op::Stat { client, file } => match self.size((is_b(client), file)) {
                None => Expect::NotFound,
                Some(s) => Expect::Size(s),
            },
            Op::Truncate { client, file, size } => {
                // The client API's truncate creates a missing file, as
                // open(O_CREAT) then ftruncate would.
                let f = self.files.entry((is_b(client), file)).or_default();
                f.data.resize(size as usize, 0);
                Expect::Ok
            }
            Op::Rename { client, from, to } => {
                let b = is_b(client);
                match self.files.remove(&(b, from)) {
                    None => Expect::NotFound,
                    Some(f) => {
                        self.files.insert((b, to), f);
                        Expect::Ok
                    }
                }
            }
            Op::Remove { client, file } => match self.files.remove(&(is_b(client), file)) {
                None => Expect::NotFound,
                Some(_) => Expect::Ok,
            },
            Op::Flush { client, file } => match self.files.get(&(is_b(client), file)) {
                None => Expect::NotFound,
                Some(_) => Expect::Ok,
            },
            Op::SetXattr {
                client,
                file,
                name,
                value,
            } => match self.files.get_mut(&(is_b(client), file)) {
                None => Expect::NotFound,
                Some(f) => {
                    match value {
                        Some(v) => {
                            f.xattrs
                                .insert(xattr_name(name), vec![v; 1 + v as usize % 7]);
                        }
                        None => {
                            f.xattrs.remove(&xattr_name(name));
                        }
                    }
                    Expect::Ok
                }
            },
            Op::Xattrs { client, file } => match self.files.get(&(is_b(client), file)) {
                None => Expect::NotFound,
                Some(f) => Expect::Xattrs(
                    f.xattrs
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
            },
            Op::Intrude { file, .. } => match self.files.get(&(false, file)) {
                None => Expect::NotFound,
                Some(_) => Expect::Denied,
            },
            Op::Allocate {
                client,
                file,
                how,
                offset,
                len,
            } => match self.files.get_mut(&(is_b(client), file)) {
                None => Expect::NotFound,
                Some(f) => {
                    let size = f.data.len() as u64;
                    let end = offset + len;
                    let zeros = match how {
                        Allocation::Extend => {
                            f.data.resize(size.max(end) as usize, 0);
                            None
                        }
                        Allocation::Punch | Allocation::Zero { keep_size: true } => {
                            Some((offset.min(size), end.min(size)))
                        }
                        Allocation::Zero { keep_size: false } => {
                            f.data.resize(size.max(end) as usize, 0);
                            Some((offset, end))
                        }
                    };
                    if let Some((a, b)) = zeros {
                        f.data[a as usize..b as usize].fill(0);
                    }
                    Expect::Ok
                }
            },
            Op::Copy {
                client,
                from,
                to,
                from_offset,
                to_offset,
                len,
            } => {
                let b = is_b(client);
                let (Some(src), true) = (
                    self.files.get(&(b, from)),
                    self.files.contains_key(&(b, to)),
                ) else {
                    return Expect::NotFound;
                };
                let size = src.data.len() as u64;
                let n = len.min(size.saturating_sub(from_offset));
                let bytes = src.data[from_offset.min(size) as usize..][..n as usize].to_vec();
                let dst = self.files.get_mut(&(b, to)).expect("checked above");
                if n > 0 {
                    let end = (to_offset + n) as usize;
                    if dst.data.len() < end {
                        dst.data.resize(end, 0);
                    }
                    dst.data[to_offset as usize..end].copy_from_slice(&bytes);
                }
                Expect::Size(n)
            }
            Op::WaitAll { .. } | Op::Restart => Expect::Ok,
        }
    }
}

/// The files an operation touches, as (application B?, number).
fn touches(op: &Op) -> Vec<(bool, usize)> {
    match *op {
        Op::Write { client, file, .. }
        | Op::Append { client, file, .. }
        | Op::Read { client, file, .. }
        | Op::Stat { client, file }
        | Op::Truncate { client, file, .. }
        | Op::Remove { client, file }
        | Op::Flush { client, file }
        | Op::SetXattr { client, file, .. }
        | Op::Xattrs { client, file }
        | Op::Allocate { client, file, .. } => vec![(is_b(client), file)],
        Op::Rename { client, from, to }
        | Op::Copy {
            client, from, to, ..
        } => {
            vec![(is_b(client), from), (is_b(client), to)]
        }
        Op::Intrude { file, how } => {
            let mut t = vec![(false, file)];
            if how == Intrusion::Rename {
                t.push((true, file));
            }
            t
        }
        Op::WaitAll { .. } | Op::Restart => Vec::new(),
    }
}

fn client_of(op: &Op) -> Option<usize> {
    match *op {
        Op::Write { client, .. }
        | Op::Append { client, .. }
        | Op::Read { client, .. }
        | Op::Stat { client, .. }
        | Op::Truncate { client, .. }
        | Op::Rename { client, .. }
        | Op::Remove { client, .. }
        | Op::Flush { client, .. }
        | Op::SetXattr { client, .. }
        | Op::Xattrs { client, .. }
        | Op::Allocate { client, .. }
        | Op::Copy { client, .. }
        | Op::WaitAll { client } => Some(client),
        Op::Intrude { .. } => Some(OTHER_APP),
        Op::Restart => None,
    }
}

/// Sizes and offsets around the label boundaries, the small-write cache's
/// threshold and the edges of the file.
fn pick_len(rng: &mut fastrand::Rng) -> u64 {
    match rng.u32(0..20) {
        0 => 0,
        1 => 1,
        2 => SMALL - 1,
        3 => SMALL,
        4 => SMALL + 1,
        5 => LABEL - 1,
        6 => LABEL,
        7 => LABEL + 1,
        8 => 2 * LABEL + rng.u64(0..LABEL),
        9..=13 => rng.u64(1..4096),
        _ => rng.u64(1..300_000),
    }
}

fn pick_offset(rng: &mut fastrand::Rng, size: u64) -> u64 {
    match rng.u32(0..10) {
        0 => 0,
        1 | 2 => size,
        3 => size + rng.u64(1..200_000),
        4 => (rng.u64(0..8) * SMALL).saturating_sub(rng.u64(0..2)),
        5 => (rng.u64(0..6) * LABEL + rng.u64(0..3)).saturating_sub(1),
        _ => rng.u64(0..size.max(1)),
    }
}

/// Generates case `case` of the run seeded `seed`.
pub fn generate(seed: u64, case: u64, abilities: Abilities, steps: usize) -> Vec<Vec<Op>> {
    generate_with(seed, case, abilities, steps, DEFAULT_RESTART_ONE_IN)
}

/// How rarely [`generate`] makes a Restart step: one step in this many.
pub const DEFAULT_RESTART_ONE_IN: u32 = 150;

/// [`generate`], with a Restart step one step in `restart_one_in` (when
/// the target can restart). With [`DEFAULT_RESTART_ONE_IN`] it makes
/// exactly the cases `generate` makes.
pub fn generate_with(
    seed: u64,
    case: u64,
    abilities: Abilities,
    steps: usize,
    restart_one_in: u32,
) -> Vec<Vec<Op>> {
    let mut rng = fastrand::Rng::with_seed(seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut model = Model::default();
    let mut out = Vec::with_capacity(steps);
    let clients = if abilities.tenants {
        CLIENTS
    } else {
        OTHER_APP
    };
    while out.len() < steps {
        if abilities.restart && rng.u32(0..restart_one_in.max(1)) == 0 {
            out.push(vec![Op::Restart]);
            continue;
        }
        let width = 1 + rng.usize(0..clients);
        let mut step = Vec::new();
        let mut busy_files = BTreeSet::new();
        let mut busy_clients = BTreeSet::new();
        for _ in 0..width {
            let client = rng.usize(0..clients);
            if !busy_clients.insert(client) {
                continue;
            }
            let op = pick_op(&mut rng, &model, client, abilities);
            if touches(&op).iter().any(|f| !busy_files.insert(*f)) {
                continue;
            }
            model.apply(&op);
            step.push(op);
        }
        if !step.is_empty() {
            out.push(step);
        }
    }
    out
}

fn pick_op(rng: &mut fastrand::Rng, model: &Model, client: usize, a: Abilities) -> Op {
    let b = is_b(client);
    let file = rng.usize(0..FILES);
    let size = model.size((b, file)).unwrap_or(0);
    loop {
        return match rng.u32(0..110) {
            34..=39 if a.append => Op::Append {
                client,
                file,
                len: pick_len(rng).min(MAX_FILE.saturating_sub(size)),
                asynchronous: a.asynchronous && rng.bool(),
                seed: rng.u64(..),
            },
            0..=39 => {
                let offset = pick_offset(rng, size).min(MAX_FILE);
                let len = pick_len(rng).min(MAX_FILE - offset);
                Op::Write {
                    client,
                    file,
                    offset,
                    len,
                    asynchronous: a.asynchronous && rng.bool(),
                    seed: rng.u64(..),
                }
            }
            40..=57 => Op::Read {
                client,
                file,
                offset: pick_offset(rng, size),
                len: pick_len(rng).max(1),
            },
            58..=62 => Op::Stat { client, file },
            63..=67 if a.truncate => Op::Truncate {
                client,
                file,
                size: match rng.u32(0..3) {
                    0 => 0,
                    1 => rng.u64(0..size.max(1)),
                    _ => (size + rng.u64(0..200_000)).min(MAX_FILE),
                },
            },
            68..=71 if a.rename => Op::Rename {
                client,
                from: file,
                to: rng.usize(0..FILES),
            },
            72..=76 => Op::Remove { client, file },
            77..=80 => Op::Flush { client, file },
            81..=85 if a.xattrs => Op::SetXattr {
                client,
                file,
                name: rng.u8(0..3),
                value: rng.bool().then(|| rng.u8(..)),
            },
            86..=88 if a.xattrs => Op::Xattrs { client, file },
            89..=93 if a.asynchronous => Op::WaitAll { client },
            94..=99 if a.tenants && b => Op::Intrude {
                file,
                how: match rng.u32(0..4) {
                    0 => Intrusion::Read,
                    1 => Intrusion::Write,
                    2 => Intrusion::Remove,
                    _ => Intrusion::Rename,
                },
            },
            100..=104 if a.allocate => {
                let offset = pick_offset(rng, size).min(MAX_FILE - 1);
                Op::Allocate {
                    client,
                    file,
                    how: match rng.u32(0..4) {
                        0 => Allocation::Extend,
                        1 => Allocation::Punch,
                        n => Allocation::Zero { keep_size: n == 2 },
                    },
                    offset,
                    len: pick_len(rng).clamp(1, MAX_FILE - offset),
                }
            }
            105..=109 if a.allocate => {
                let to = rng.usize(0..FILES);
                let to_size = model.size((b, to)).unwrap_or(0);
                let from_offset = pick_offset(rng, size);
                let to_offset = pick_offset(rng, to_size).min(MAX_FILE);
                let len = pick_len(rng).min(MAX_FILE - to_offset);
                // Overlapping ranges of one file are refused (EINVAL).
                let overlap =
                    to == file && from_offset < to_offset + len && to_offset < from_offset + len;
                if overlap {
                    continue;
                }
                Op::Copy {
                    client,
                    from: file,
                    to,
                    from_offset,
                    to_offset,
                    len,
                }
            }
            _ => continue,
        };
    }
}

fn kind_of(e: &Error) -> Option<Expect> {
    match e {
        Error::NotFound(_) => Some(Expect::NotFound),
        Error::PermissionDenied(_) => Some(Expect::Denied),
        _ => None,
    }
}

fn short(b: &[u8]) -> String {
    let head: Vec<u8> = b.iter().take(16).copied().collect();
    format!("{} bytes, starting {head:?}", b.len())
}

/// The first difference between two byte strings, for the failure message.
fn first_difference(got: &[u8], want: &[u8]) -> String {
    match got.iter().zip(want).position(|(a, b)| a != b) {
        Some(i) => format!(
            "first difference at byte {i}: got {} want {}",
            got[i], want[i]
        ),
        None => format!("lengths differ: got {} want {}", got.len(), want.len()),
    }
}

/// How one operation went.
enum Checked {
    Agrees,
    /// An error the model cannot predict, while faults are injected.
    Faulted(Error),
}

/// `call`, or a Timeout error saying it hung after [`OP_DEADLINE`].
async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    tokio::time::timeout(OP_DEADLINE, call)
        .await
        .unwrap_or_else(|_| Err(Error::Timeout(format!("{what}: {HANG}"))))
}

fn is_hang(e: &Error) -> bool {
    matches!(e, Error::Timeout(why) if why.ends_with(HANG))
}

/// Runs one operation against the target and checks it against `expect`.
async fn check(target: &dyn Target, case: u64, op: &Op, expect: Expect) -> Result<Checked, String> {
    let path = |b: bool, f: usize| target.path(case, b, f);
    // An intruder's write to a missing file would create its own file at
    // that path: not an intrusion, and not in the model. Skipped.
    if let (
        Op::Intrude {
            how: Intrusion::Write,
            ..
        },
        Expect::NotFound,
    ) = (op, &expect)
    {
        return Ok(Checked::Agrees);
    }
    let call = async {
        match *op {
            Op::Write {
                client,
                file,
                offset,
                len,
                asynchronous,
                seed,
            } => target
                .write(
                    client,
                    &path(is_b(client), file),
                    offset,
                    payload(seed, len),
                    asynchronous,
                )
                .await
                .map(|_| Expect::Ok),
            Op::Append {
                client,
                file,
                len,
                asynchronous,
                seed,
            } => target
                .append(
                    client,
                    &path(is_b(client), file),
                    payload(seed, len),
                    asynchronous,
                )
                .await
                .map(|_| Expect::Ok),
            Op::Read {
                client,
                file,
                offset,
                len,
            } => target
                .read(client, &path(is_b(client), file), offset, len)
                .await
                .map(|b| Expect::Bytes(b.to_vec())),
            Op::Stat { client, file } => target
                .stat(client, &path(is_b(client), file))
                .await
                .map(Expect::Size),
            Op::Truncate { client, file, size } => target
                .truncate(client, &path(is_b(client), file), size)
                .await
                .map(|_| Expect::Ok),
            Op::Rename { client, from, to } => {
                let b = is_b(client);
                target
                    .rename(client, &path(b, from), &path(b, to))
                    .await
                    .map(|_| Expect::Ok)
            }
            Op::Remove { client, file } => target
                .remove(client, &path(is_b(client), file))
                .await
                .map(|_| Expect::Ok),
            Op::Flush { client, file } => target
                .flush(client, &path(is_b(client), file))
                .await
                .map(|_| Expect::Ok),
            Op::SetXattr {
                client,
                file,
                name,
                value,
            } => target
                .set_xattr(
                    client,
                    &path(is_b(client), file),
                    &xattr_name(name),
                    value.map(|v| Bytes::from(vec![v; 1 + v as usize % 7])),
                )
                .await
                .map(|_| Expect::Ok),
            Op::Xattrs { client, file } => target
                .xattrs(client, &path(is_b(client), file))
                .await
                .map(|x| Expect::Xattrs(x.into_iter().map(|(k, v)| (k, v.to_vec())).collect())),
            Op::WaitAll { client } => target.wait_all(client).await.map(|_| Expect::Ok),
            Op::Allocate {
                client,
                file,
                how,
                offset,
                len,
            } => target
                .allocate(client, &path(is_b(client), file), how.mode(), offset, len)
                .await
                .map(|_| Expect::Ok),
            Op::Copy {
                client,
                from,
                to,
                from_offset,
                to_offset,
                len,
            } => {
                let b = is_b(client);
                target
                    .copy(
                        client,
                        (&path(b, from), from_offset),
                        (&path(b, to), to_offset),
                        len,
                    )
                    .await
                    .map(Expect::Size)
            }
            Op::Intrude { file, how } => {
                let theirs = path(false, file);
                match how {
                    Intrusion::Read => target
                        .read(OTHER_APP, &theirs, 0, 100)
                        .await
                        .map(|_| Expect::Ok),
                    Intrusion::Write => target
                        .write(
                            OTHER_APP,
                            &theirs,
                            0,
                            Bytes::from_static(b"intruder"),
                            false,
                        )
                        .await
                        .map(|_| Expect::Ok),
                    Intrusion::Remove => {
                        target.remove(OTHER_APP, &theirs).await.map(|_| Expect::Ok)
                    }
                    Intrusion::Rename => target
                        .rename(OTHER_APP, &theirs, &path(true, file))
                        .await
                        .map(|_| Expect::Ok),
                }
            }
            Op::Restart => {
                target.restart().await;
                Ok(Expect::Ok)
            }
        }
    };
    // A restart waits for recovery under the target's own bounds.
    let got: Result<Expect, Error> = match op {
        Op::Restart => call.await,
        _ => bounded("the operation", call).await,
    };
    let got = match got {
        Ok(g) => g,
        Err(e) if is_hang(&e) => return Err(format!("{op:?}: {e}")),
        Err(e) if target.abilities().faults && kind_of(&e) != Some(expect.clone()) => {
            return Ok(Checked::Faulted(e))
        }
        Err(e) => match kind_of(&e) {
            Some(k) => k,
            None => return Err(format!("{op:?}: unexpected error {e}")),
        },
    };
    // Another owner's missing file may be refused rather than reported
    // missing (S3 answers AccessDenied so as not to reveal what exists).
    let refused_either_way =
        matches!(op, Op::Intrude { .. }) && expect == Expect::NotFound && got == Expect::Denied;
    if got == expect || refused_either_way {
        return Ok(Checked::Agrees);
    }
    Err(match (&got, &expect) {
        (Expect::Bytes(g), Expect::Bytes(w)) => format!(
            "{op:?}: read {} where the model has {}: {}",
            short(g),
            short(w),
            first_difference(g, w)
        ),
        _ => format!("{op:?}: got {got:?}, the model says {expect:?}"),
    })
}

/// `call` again while it fails with an injected fault (the engines'
/// transient errors), a bounded number of times.
async fn retried<T, F, Fut>(mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut attempt = 0;
    loop {
        match bounded("a call to check the state", call()).await {
            Err(Error::Unavailable(_)) if attempt < 50 => attempt += 1,
            Err(Error::LabelFailed { reason, .. })
                if attempt < 50 && reason.contains("injected") =>
            {
                attempt += 1
            }
            r => return r,
        }
    }
}

/// What the system holds at `path` now: its bytes (read whole) or None.
async fn observe(target: &dyn Target, client: usize, path: &str) -> Result<Option<File>, String> {
    let size = match retried(|| target.stat(client, path)).await {
        Ok(size) => size,
        Err(Error::NotFound(_)) => return Ok(None),
        Err(e) => return Err(format!("stat of {path} to check it: {e}")),
    };
    let data = retried(|| target.read(client, path, 0, u64::MAX))
        .await
        .map_err(|e| format!("read of {path} to check it: {e}"))?;
    if data.len() as u64 != size {
        return Err(format!(
            "{path}: stat says {size} bytes, a whole read gives {}",
            data.len()
        ));
    }
    let xattrs = if target.abilities().xattrs {
        retried(|| target.xattrs(client, path))
            .await
            .map_err(|e| format!("xattrs of {path} to check them: {e}"))?
            .into_iter()
            .map(|(k, v)| (k, v.to_vec()))
            .collect()
    } else {
        BTreeMap::new()
    };
    Ok(Some(File {
        data: data.to_vec(),
        xattrs,
    }))
}

/// An operation failed with an injected fault: what it touched must hold
/// either what it held before or what the operation would have made of it
/// (a write: each byte old or new), and the model goes on from what is
/// there.
async fn resolve(
    target: &dyn Target,
    case: u64,
    op: &Op,
    error: &Error,
    before: &Model,
    after: &mut Model,
) -> Result<(), String> {
    let mutates = !matches!(
        op,
        Op::Read { .. } | Op::Stat { .. } | Op::Xattrs { .. } | Op::WaitAll { .. }
    );
    if !mutates {
        return Ok(());
    }
    for key in touches(op) {
        let client = if key.0 { OTHER_APP } else { 0 };
        let path = target.path(case, key.0, key.1);
        let seen = observe(target, client, &path).await?;
        let (old, new) = (before.files.get(&key), after.files.get(&key));
        // An append's range is reserved before its bytes land: a failed
        // one may leave it as zeros, as a failed write leaves old bytes.
        let torn = match (op, &seen) {
            (
                Op::Write { .. } | Op::Append { .. } | Op::Allocate { .. } | Op::Copy { .. },
                Some(s),
            ) => {
                let empty = File::default();
                let (o, n) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
                s.xattrs == n.xattrs
                    && s.data.len() >= o.data.len().min(n.data.len())
                    && s.data.len() <= o.data.len().max(n.data.len())
                    && s.data.iter().enumerate().all(|(i, b)| {
                        o.data.get(i).copied().unwrap_or(0) == *b || n.data.get(i) == Some(b)
                    })
            }
            // A truncate creates a missing file first.
            (Op::Truncate { .. }, Some(s)) => old.is_none() && *s == File::default(),
            _ => false,
        };
        if seen.as_ref() != old && seen.as_ref() != new && !torn {
            return Err(format!(
                "{op:?} failed ({error}), and {path} then held neither the old nor the new state: {}",
                match &seen {
                    None => "missing".to_string(),
                    Some(f) => short(&f.data),
                }
            ));
        }
        match seen {
            Some(f) => after.files.insert(key, f),
            None => after.files.remove(&key),
        };
    }
    Ok(())
}

/// Runs one case; Err names the first disagreement. Whatever happens, the
/// case's files are removed afterwards, so that cases stay independent.
pub async fn run_case(target: &dyn Target, case: u64, steps: &[Vec<Op>]) -> Result<(), String> {
    let outcome = run_steps(target, case, steps).await;
    for c in 0..CLIENTS {
        if let Err(e) = bounded("a wait after the case", target.wait_all(c)).await {
            if is_hang(&e) {
                return Err(format!("client {c}: {e}"));
            }
        }
    }
    for b in [false, true] {
        for f in 0..FILES {
            let client = if b { OTHER_APP } else { 0 };
            let path = target.path(case, b, f);
            match retried(|| target.remove(client, &path)).await {
                Err(e) if outcome.is_ok() && !matches!(e, Error::NotFound(_)) => {
                    return Err(format!("removing the case's files: {e}"));
                }
                _ => {}
            }
        }
    }
    outcome?;
    target.settled().await
}

async fn run_steps(target: &dyn Target, case: u64, steps: &[Vec<Op>]) -> Result<(), String> {
    let mut model = Model::default();
    // Clients with asynchronous writes not yet waited for, by file.
    let mut pending: BTreeMap<(bool, usize), BTreeSet<usize>> = BTreeMap::new();
    for (n, step) in steps.iter().enumerate() {
        let at = |e: String| format!("step {n}: {e}");
        if step.contains(&Op::Restart) {
            for c in 0..CLIENTS {
                bounded("wait before restart", target.wait_all(c))
                    .await
                    .map_err(|e| at(format!("client {c}: {e}")))?;
            }
            pending.clear();
        }
        // Programs that share a file synchronize before touching it.
        for op in step {
            let me = client_of(op);
            for f in touches(op) {
                let waiting: Vec<usize> = pending
                    .get(&f)
                    .map(|s| s.iter().copied().filter(|c| Some(*c) != me).collect())
                    .unwrap_or_default();
                for c in waiting {
                    bounded("wait for a shared file", target.wait_all(c))
                        .await
                        .map_err(|e| at(format!("client {c}: {e}")))?;
                    for s in pending.values_mut() {
                        s.remove(&c);
                    }
                }
            }
        }
        let before = model.clone();
        let expects: Vec<Expect> = step.iter().map(|op| model.apply(op)).collect();
        for op in step {
            match *op {
                Op::Write {
                    client,
                    file,
                    asynchronous: true,
                    ..
                }
                | Op::Append {
                    client,
                    file,
                    asynchronous: true,
                    ..
                } => {
                    pending
                        .entry((is_b(client), file))
                        .or_default()
                        .insert(client);
                }
                Op::WaitAll { client } => {
                    for s in pending.values_mut() {
                        s.remove(&client);
                    }
                }
                _ => {}
            }
        }
        let results = futures::future::join_all(
            step.iter()
                .zip(expects)
                .map(|(op, expect)| check(target, case, op, expect)),
        )
        .await;
        for (op, r) in step.iter().zip(results) {
            if let Checked::Faulted(e) = r.map_err(at)? {
                resolve(target, case, op, &e, &before, &mut model)
                    .await
                    .map_err(at)?;
            }
        }
    }
    // Clean up through the API, then the system must have given back the
    // space (workers hold no more than the live data).
    for c in 0..CLIENTS {
        retried(|| target.wait_all(c))
            .await
            .map_err(|e| format!("final wait of client {c}: {e}"))?;
    }
    for (&(b, f), file) in &model.files {
        let client = if b { OTHER_APP } else { 0 };
        let path = target.path(case, b, f);
        let Some(seen) = observe(target, client, &path).await? else {
            return Err(format!("{path} is missing at the end"));
        };
        if seen.data != file.data {
            return Err(format!(
                "{path} at the end: {}",
                first_difference(&seen.data, &file.data)
            ));
        }
    }
    Ok(())
}

/// Removes steps while the case still fails, to a short sequence.
pub async fn shrink(target: &dyn Target, case: u64, steps: Vec<Vec<Op>>) -> Vec<Vec<Op>> {
    shrink_with(target, case, steps, DEFAULT_SHRINK_ATTEMPTS).await
}

/// How many shorter cases [`shrink`] tries at most.
pub const DEFAULT_SHRINK_ATTEMPTS: usize = 300;

/// [`shrink`], trying at most `max_attempts` shorter cases.
pub async fn shrink_with(
    target: &dyn Target,
    mut case: u64,
    steps: Vec<Vec<Op>>,
    max_attempts: usize,
) -> Vec<Vec<Op>> {
    let mut best = steps;
    let mut chunk = best.len().div_ceil(2).max(1);
    let mut attempts = 0;
    while chunk >= 1 && attempts < max_attempts {
        let mut i = 0;
        let mut progress = false;
        while i < best.len() && attempts < max_attempts {
            let mut trial = best.clone();
            trial.drain(i..(i + chunk).min(trial.len()));
            attempts += 1;
            case += 1 << 32;
            if !trial.is_empty() && run_case(target, case, &trial).await.is_err() {
                best = trial;
                progress = true;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 && !progress {
            break;
        }
        chunk = (chunk / 2).max(1);
    }
    best
}

/// Settings of a run, from the environment.
pub struct Run {
    pub seed: u64,
    pub cases: u64,
    pub steps: usize,
    pub replay: Option<std::path::PathBuf>,
    /// One step in this many is a Restart, for a target that can restart
    /// ([`DEFAULT_RESTART_ONE_IN`] unless a test asks for more: a target
    /// whose restarts are crashes under test wants them often).
    pub restart_one_in: u32,
    /// Shorter cases the shrinker tries at most on a failure
    /// ([`DEFAULT_SHRINK_ATTEMPTS`] unless a test whose cases are slow,
    /// such as one that crashes processes, bounds it lower).
    pub shrink_attempts: usize,
    /// `LABIOS_MODEL_ONLY=NAME`: run only the target or sub-target of that
    /// name (`direct` for `iris_mappings/direct`), so that long runs of a
    /// test with several mappings can be spread over machines or sessions.
    pub only: Option<String>,
}

impl Run {
    /// `default_cases` unless `LABIOS_MODEL_CASES` says otherwise.
    pub fn from_env(default_cases: u64) -> Run {
        let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        Run {
            seed: num("LABIOS_MODEL_SEED").unwrap_or_else(|| fastrand::u64(..)),
            cases: num("LABIOS_MODEL_CASES").unwrap_or(default_cases),
            steps: num("LABIOS_MODEL_STEPS").unwrap_or(24) as usize,
            replay: std::env::var_os("LABIOS_MODEL_REPLAY").map(Into::into),
            restart_one_in: DEFAULT_RESTART_ONE_IN,
            shrink_attempts: DEFAULT_SHRINK_ATTEMPTS,
            only: std::env::var("LABIOS_MODEL_ONLY").ok(),
        }
    }
}

/// Runs the cases of `run` against `target`; panics with the seed, the
/// shrunk sequence and the command that replays it on the first failure.
pub async fn check_target(name: &str, target: &dyn Target, run: &Run) {
    if let Some(file) = &run.replay {
        let text = std::fs::read_to_string(file).unwrap();
        let steps: Vec<Vec<Op>> = serde_json::from_str(&text).unwrap();
        if let Err(e) = run_case(target, 1 << 40, &steps).await {
            panic!("replay of {} fails: {e}", file.display());
        }
        return;
    }
    if let Some(only) = &run.only {
        if name != only && name.rsplit('/').next() != Some(only.as_str()) {
            println!("model checker, target {name}: not run (LABIOS_MODEL_ONLY={only})");
            return;
        }
    }
    let started = std::time::Instant::now();
    // Up front, so that a run that hangs can still be replayed.
    println!(
        "model checker, target {name}: {} cases, seed {} (LABIOS_MODEL_SEED={} replays them)",
        run.cases, run.seed, run.seed
    );
    let mut ops = 0;
    for case in 0..run.cases {
        if case > 0 && case % 500 == 0 {
            println!(
                "model checker, target {name}: {case} cases after {:.1} s",
                started.elapsed().as_secs_f64()
            );
        }
        let steps = generate_with(
            run.seed,
            case,
            target.abilities(),
            run.steps,
            run.restart_one_in,
        );
        ops += steps.iter().map(Vec::len).sum::<usize>();
        if let Err(first) = run_case(target, case, &steps).await {
            let shrunk = shrink_with(target, case, steps.clone(), run.shrink_attempts).await;
            let file = std::env::temp_dir().join(format!(
                "labios-model-{}-{}-{case}.json",
                name.replace('/', "-"),
                run.seed
            ));
            std::fs::write(&file, serde_json::to_string_pretty(&shrunk).unwrap()).unwrap();
            let mut listing = String::new();
            for (i, step) in shrunk.iter().enumerate() {
                let _ = writeln!(listing, "  {i}: {step:?}");
            }
            let again = run_case(target, 1 << 41, &shrunk).await.err();
            let mut original = String::new();
            for (i, step) in steps.iter().enumerate().take(60) {
                let _ = writeln!(original, "  {i}: {step:?}");
            }
            panic!(
                "model checker, target {name}: case {case} of seed {} failed: {first}\n\
                 the case:\n{original}\
                 shrunk to {} steps (which fail with: {}):\n{listing}\
                 replay the whole run: LABIOS_MODEL_SEED={} cargo test -p labios --test {bin} {test}\n\
                 replay the shrunk case: LABIOS_MODEL_REPLAY={} cargo test -p labios --test {bin} {test}",
                run.seed,
                shrunk.len(),
                again.as_deref().unwrap_or("passed when run again: a race"),
                run.seed,
                file.display(),
                test = name.split('/').next().unwrap_or(name),
                bin = env!("CARGO_CRATE_NAME"),
            );
        }
    }
    println!(
        "model checker, target {name}: {} cases, {ops} operations, seed {}, {:.1} s, no disagreement",
        run.cases,
        run.seed,
        started.elapsed().as_secs_f64()
    );
}

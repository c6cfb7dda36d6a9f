//! The shared data region of a local client (issue 14): a memfd the client
//! creates, seals against shrinking and hands to `labios serve` over the
//! Unix socket (SCM_RIGHTS, with its Hello). A warehouse put then copies
//! the caller's bytes once, into a slot of the region, and sends only the
//! slot's number: the server takes the slot's bytes as the warehouse entry
//! without a copy, and the worker writes the device from them.
//!
//! Who owns a slot is one word per slot in the region's header: the client
//! marks a free slot [`CLIENT`] before filling it, the server marks it
//! [`FREE`] again once the last reference to its bytes is gone (the label
//! ran and its warehouse entry was dropped). The server never trusts that
//! word: it keeps its own record of the slots it holds, refuses a slot
//! number out of range or already held, and checks the seals and size of
//! the memfd before mapping it. A client can therefore spoil only its own
//! bytes, as it could by writing other ones.
//!
//! Each connection has its own region, so an application never sees
//! another's bytes. A client that dies loses nothing of the server's: the
//! server's mapping lives until the last of the client's warehouse entries
//! is dropped, and the kernel frees the memfd with its last mapping.

use bytes::Bytes;
use labios_label::{Error, Result};
use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes of one slot: a label's bytes (the client splits writes into
/// labels of at most 1 MiB) fit in one.
pub const SLOT: usize = 1 << 20;
/// Slots of a region: puts in flight at once through it. A put finding
/// none free goes over the socket instead.
pub const SLOTS: usize = 32;
/// The header: a magic word, then one owner word per slot.
const HEADER: usize = 4096;
const MAGIC: u64 = u64::from_le_bytes(*b"LABIOSR1");
/// The region's length, which the server requires.
pub const LEN: usize = HEADER + SLOTS * SLOT;

/// A slot no one uses.
const FREE: u32 = 0;
/// A slot the client filled or is filling.
const CLIENT: u32 = 1;
/// A slot the server filled for the client to read.
const SERVER: u32 = 2;
/// A slot the server is filling: neither side's to take.
const FILLING: u32 = 3;

/// The server's own record of a slot (never the client's word): unused,
/// its bytes held as a put's, or being filled with an answer.
const IDLE: u8 = 0;
const HELD: u8 = 1;
const GIVING: u8 = 2;

/// A mapping of a region, shared by whoever holds it.
struct Mapping {
    ptr: NonNull<u8>,
}

// SAFETY: the mapping is plain shared memory that lives until `Drop`; every
// access goes through atomics (the owner words) or through slices of slots
// whose owner word gives the accessor the slot.
unsafe impl Send for Mapping {}
unsafe impl Sync for Mapping {}

impl Mapping {
    fn map(fd: BorrowedFd<'_>) -> Result<Mapping> {
        // SAFETY: a fresh shared mapping of `LEN` bytes of a memfd whose
        // size is at least `LEN` and cannot shrink (checked or made so
        // by the callers), so no access past its end can fault.
        let ptr = unsafe {
            mmap(
                None,
                NonZeroUsize::new(LEN).expect("a region has a length"),
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| Error::Storage(format!("mapping the shared region: {e}")))?;
        Ok(Mapping { ptr: ptr.cast() })
    }

    fn owner(&self, slot: usize) -> &AtomicU32 {
        assert!(slot < SLOTS, "slot {slot} of {SLOTS}");
        // SAFETY: the owner words lie in the header, 4-byte aligned, and
        // are only ever accessed as atomics.
        unsafe { &*self.ptr.as_ptr().add(8 + 4 * slot).cast::<AtomicU32>() }
    }

    fn magic(&self) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: the first 8 bytes of the page-aligned header.
        unsafe { &*self.ptr.as_ptr().cast::<std::sync::atomic::AtomicU64>() }
    }

    fn slot_ptr(&self, slot: usize) -> *mut u8 {
        assert!(slot < SLOTS, "slot {slot} of {SLOTS}");
        // SAFETY: within the mapping.
        unsafe { self.ptr.as_ptr().add(HEADER + slot * SLOT) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, with no references left (every
        // holder of one holds the `Mapping`).
        if let Err(e) = unsafe { munmap(self.ptr.cast(), LEN) } {
            tracing::warn!("unmapping a shared region: {e}");
        }
    }
}

/// The client's side: its region, and the slots it may fill.
pub struct ClientRegion {
    fd: OwnedFd,
    map: Mapping,
    /// Where the next search for a free slot starts, so that slots are
    /// used in turn.
    next: AtomicUsize,
}

impl ClientRegion {
    /// A new region, sealed so that its size can never change.
    pub fn create() -> Result<ClientRegion> {
        let fail = |what: &str, e: nix::Error| {
            Error::Storage(format!("creating the shared region: {what}: {e}"))
        };
        let fd = memfd_create(
            c"labios-region",
            MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
        )
        .map_err(|e| fail("memfd_create", e))?;
        nix::unistd::ftruncate(&fd, LEN as i64).map_err(|e| fail("ftruncate", e))?;
        fcntl(
            &fd,
            FcntlArg::F_ADD_SEALS(
                SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_SEAL,
            ),
        )
        .map_err(|e| fail("sealing", e))?;
        let map = Mapping::map(fd.as_fd())?;
        map.magic().store(MAGIC, Ordering::Release);
        Ok(ClientRegion {
            fd,
            map,
            next: AtomicUsize::new(0),
        })
    }

    /// The memfd to hand to the server.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Copies `data` into a free slot and gives its number, or `None` when
    /// it does not fit one or every slot is in use.
    pub fn place(&self, data: &[u8]) -> Option<u32> {
        if data.len() > SLOT {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = (0..SLOTS).map(|i| (start + i) % SLOTS).find(|&s| {
            self.map
                .owner(s)
                .compare_exchange(FREE, CLIENT, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        })?;
        // SAFETY: the slot is this client's until the server frees it,
        // which it does only after taking it in a request sent below.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.slot_ptr(slot), data.len())
        };
        Some(slot as u32)
    }

    /// Gives back a slot [`Self::place`] filled whose request was never
    /// sent (so the server never took it).
    pub fn unplace(&self, slot: u32) {
        self.map.owner(slot as usize).store(FREE, Ordering::Release);
    }

    /// Copies out the `len` bytes the server wrote into slot `slot` and
    /// gives the slot back.
    pub fn receive(&self, slot: u32, len: u64) -> Result<Bytes> {
        let s = slot as usize;
        if s >= SLOTS || len > SLOT as u64 {
            return Err(Error::Protocol(format!(
                "the server named shared slot {slot} of {len} bytes"
            )));
        }
        let owner = self.map.owner(s);
        if owner.load(Ordering::Acquire) != SERVER {
            return Err(Error::Protocol(format!(
                "the server named shared slot {slot}, which it did not fill"
            )));
        }
        // SAFETY: the slot is the client's to read until it stores FREE
        // below; the server wrote it before answering.
        let data = Bytes::copy_from_slice(unsafe {
            std::slice::from_raw_parts(self.map.slot_ptr(s), len as usize)
        });
        owner.store(FREE, Ordering::Release);
        Ok(data)
    }

    /// Slots now filled and not yet freed by the server.
    #[cfg(test)]
    pub fn in_use(&self) -> usize {
        (0..SLOTS)
            .filter(|&s| self.map.owner(s).load(Ordering::Acquire) != FREE)
            .count()
    }
}

/// The server's side of one connection's region.
pub struct ServerRegion {
    map: Mapping,
    /// What the server does with each slot ([`IDLE`], [`HELD`],
    /// [`GIVING`]): its own record, never the client's word, so that one
    /// use of a slot excludes the other whatever the client writes.
    state: [AtomicU8; SLOTS],
    /// Where the next search for a slot to answer in starts.
    next: AtomicUsize,
}

impl ServerRegion {
    /// Maps a client's region after checking what a client could get
    /// wrong: a memfd that can shrink (the server would fault reading a
    /// slot past its end), a size other than [`LEN`], a foreign layout.
    pub fn open(fd: OwnedFd) -> Result<Arc<ServerRegion>> {
        let refuse = |why: String| Error::InvalidArgument(format!("shared region refused: {why}"));
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS)
            .map_err(|e| refuse(format!("not a sealable memfd ({e})")))?;
        if SealFlag::from_bits_truncate(seals) & SealFlag::F_SEAL_SHRINK != SealFlag::F_SEAL_SHRINK
        {
            return Err(refuse("it is not sealed against shrinking".into()));
        }
        let size = nix::sys::stat::fstat(&fd)
            .map_err(|e| refuse(format!("fstat: {e}")))?
            .st_size;
        if size != LEN as i64 {
            return Err(refuse(format!("{size} bytes, not {LEN}")));
        }
        // The mapping keeps the memfd alive: the descriptor is closed on
        // return, one fewer per connection.
        let map = Mapping::map(fd.as_fd())?;
        if map.magic().load(Ordering::Acquire) != MAGIC {
            return Err(refuse("its header is not a LABIOS region's".into()));
        }
        Ok(Arc::new(ServerRegion {
            map,
            state: std::array::from_fn(|_| AtomicU8::new(IDLE)),
            next: AtomicUsize::new(0),
        }))
    }

    /// The `len` bytes of slot `slot` as a warehouse entry's bytes, held
    /// until the last clone of them is dropped; then the slot is the
    /// client's again.
    pub fn take(self: &Arc<Self>, slot: u32, len: u64) -> Result<Bytes> {
        let s = slot as usize;
        if s >= SLOTS || len > SLOT as u64 {
            return Err(Error::InvalidArgument(format!(
                "shared slot {slot} of {len} bytes: a region has {SLOTS} slots of {SLOT} bytes"
            )));
        }
        if self.state[s]
            .compare_exchange(IDLE, HELD, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
        {
            return Err(Error::InvalidArgument(format!(
                "shared slot {slot} is still held for an earlier put, or in use for an answer"
            )));
        }
        Ok(Bytes::from_owner(Held {
            region: self.clone(),
            slot: s,
            len: len as usize,
        }))
    }

    /// Copies `data` into a free slot for the client to read, or `None`
    /// when it does not fit one or none is free. Never a slot the server
    /// holds, whatever the client's word says.
    pub fn give(&self, data: &[u8]) -> Option<u32> {
        if data.len() > SLOT {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = (0..SLOTS).map(|i| (start + i) % SLOTS).find(|&s| {
            let state = &self.state[s];
            if state
                .compare_exchange(IDLE, GIVING, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return false;
            }
            let owner = self.map.owner(s);
            let claimed = owner
                .compare_exchange(FREE, FILLING, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
            if !claimed {
                state.store(IDLE, Ordering::Release);
            }
            claimed
        })?;
        // SAFETY: a slot the server neither holds nor fills elsewhere (its
        // own record says so), claimed from the client's FREE: an honest
        // client does not touch it until it read the answer.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.slot_ptr(slot), data.len())
        };
        // The bytes before the word: a client that sees SERVER sees them.
        self.map.owner(slot).store(SERVER, Ordering::Release);
        self.state[slot].store(IDLE, Ordering::Release);
        Some(slot as u32)
    }

    /// Slots whose bytes the server still holds.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.state
            .iter()
            .filter(|s| s.load(Ordering::Acquire) == HELD)
            .count()
    }
}

/// A slot's bytes held by the server.
struct Held {
    region: Arc<ServerRegion>,
    slot: usize,
    len: usize,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: within the mapping, which `region` keeps alive. The
        // client does not write a slot the server holds; one that does
        // changes only the bytes of its own put (see the module's doc).
        unsafe { std::slice::from_raw_parts(self.region.map.slot_ptr(self.slot), self.len) }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.region.state[self.slot].store(IDLE, Ordering::Release);
        self.region
            .map
            .owner(self.slot)
            .store(FREE, Ordering::Release);
    }
}

/// Sends all of `data` on `s`, with `fd` riding on its first bytes: the
/// server reads those with [`first_chunk`], before any other read could
/// drop the descriptor.
pub async fn send_with_fd(
    s: &tokio::net::UnixStream,
    data: &[u8],
    fd: Option<BorrowedFd<'_>>,
) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let raw = s.as_raw_fd();
    let fds: Vec<i32> = fd.iter().map(|f| f.as_raw_fd()).collect();
    let mut sent = 0;
    while sent < data.len() {
        s.writable().await?;
        let rights = [ControlMessage::ScmRights(&fds)];
        let cmsgs: &[ControlMessage] = if sent == 0 && !fds.is_empty() {
            &rights
        } else {
            &[]
        };
        let iov = [std::io::IoSlice::new(&data[sent..])];
        match s.try_io(tokio::io::Interest::WRITABLE, || {
            sendmsg::<()>(raw, &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).map_err(Into::into)
        }) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The most descriptors one message can carry (the kernel's SCM_MAX_FD):
/// room for all of them, so that none a client sends is left open
/// unowned in the server by a truncated control message.
const MAX_FDS: usize = 253;

/// The first bytes a Unix client sent, with the descriptors it handed over
/// with them (each owned, so closed when dropped).
pub async fn first_chunk(s: &tokio::net::UnixStream) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::FromRawFd;
    let raw = s.as_raw_fd();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        s.readable().await?;
        let got = s.try_io(tokio::io::Interest::READABLE, || {
            let mut iov = [std::io::IoSliceMut::new(&mut buf)];
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; MAX_FDS]);
            let msg = recvmsg::<()>(raw, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
            let mut fds = Vec::new();
            for c in msg.cmsgs()? {
                if let ControlMessageOwned::ScmRights(rights) = c {
                    // SAFETY: descriptors the kernel just gave this
                    // process, owned by no one else.
                    fds.extend(
                        rights
                            .into_iter()
                            .map(|f| unsafe { OwnedFd::from_raw_fd(f) }),
                    );
                }
            }
            Ok((msg.bytes, fds))
        });
        match got {
            Ok((n, fds)) => {
                buf.truncate(n);
                return Ok((buf, fds));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_of(client: &ClientRegion) -> Arc<ServerRegion> {
        ServerRegion::open(client.fd().try_clone_to_owned().unwrap()).unwrap()
    }

    #[test]
    fn a_placed_slot_is_the_servers_until_its_bytes_are_dropped() {
        let client = ClientRegion::create().unwrap();
        let server = server_of(&client);
        let slot = client.place(b"hello").unwrap();
        let bytes = server.take(slot, 5).unwrap();
        assert_eq!(&bytes[..], b"hello");
        let clone = bytes.clone();
        drop(bytes);
        assert_eq!((client.in_use(), server.held()), (1, 1));
        // Taken twice: refused while held.
        let again = server.take(slot, 5).unwrap_err().to_string();
        assert!(again.contains("still held"), "{again}");
        drop(clone);
        assert_eq!((client.in_use(), server.held()), (0, 0));
    }

    #[test]
    fn an_answer_in_a_slot_is_read_once_and_the_slot_given_back() {
        let client = ClientRegion::create().unwrap();
        let server = server_of(&client);
        let put = client.place(b"put").unwrap();
        let held = server.take(put, 3).unwrap();
        let slot = server.give(b"answer").unwrap();
        assert_ne!(slot, put, "a held slot is never answered in");
        assert_eq!(&client.receive(slot, 6).unwrap()[..], b"answer");
        let again = client.receive(slot, 6).unwrap_err().to_string();
        assert!(again.contains("did not fill"), "{again}");
        assert_eq!(client.in_use(), 1, "only the put's slot");
        drop(held);
        assert_eq!(client.in_use(), 0);
        // Every free slot answers; then the socket does.
        let all: Vec<u32> = (0..SLOTS).map(|_| server.give(b"x").unwrap()).collect();
        assert_eq!(server.give(b"x"), None);
        assert!(server.give(&vec![0; SLOT + 1]).is_none());
        for s in all {
            client.receive(s, 1).unwrap();
        }
    }

    #[test]
    fn every_slot_is_used_before_a_put_goes_over_the_socket() {
        let client = ClientRegion::create().unwrap();
        let server = server_of(&client);
        let held: Vec<Bytes> = (0..SLOTS)
            .map(|i| {
                let slot = client.place(&[i as u8; 100]).unwrap();
                server.take(slot, 100).unwrap()
            })
            .collect();
        assert_eq!(client.place(b"x"), None, "all slots held");
        for (i, b) in held.iter().enumerate() {
            assert_eq!(&b[..], &[i as u8; 100][..], "slot bytes kept apart");
        }
        drop(held);
        assert!(client.place(&vec![7; SLOT]).is_some());
        assert_eq!(client.place(&vec![7; SLOT + 1]), None, "larger than a slot");
    }

    #[test]
    fn forged_slots_and_regions_are_refused_with_the_reason() {
        let client = ClientRegion::create().unwrap();
        let server = server_of(&client);
        let e = server.take(SLOTS as u32, 1).unwrap_err().to_string();
        assert!(e.contains(&format!("shared slot {SLOTS}")), "{e}");
        let e = server.take(0, SLOT as u64 + 1).unwrap_err().to_string();
        assert!(e.contains("slots of"), "{e}");

        let unsealed = memfd_create(c"x", MFdFlags::MFD_ALLOW_SEALING).unwrap();
        nix::unistd::ftruncate(&unsealed, LEN as i64).unwrap();
        let e = ServerRegion::open(unsealed).err().unwrap().to_string();
        assert!(e.contains("not sealed against shrinking"), "{e}");

        let small = memfd_create(c"x", MFdFlags::MFD_ALLOW_SEALING).unwrap();
        nix::unistd::ftruncate(&small, 4096).unwrap();
        fcntl(&small, FcntlArg::F_ADD_SEALS(SealFlag::F_SEAL_SHRINK)).unwrap();
        let e = ServerRegion::open(small).err().unwrap().to_string();
        assert!(e.contains("4096 bytes"), "{e}");

        let file = tempfile::tempfile().unwrap();
        let e = ServerRegion::open(file.into()).err().unwrap().to_string();
        assert!(e.contains("not a sealable memfd"), "{e}");
    }
}

//! The bytes that outlive a call's set-up in the transaction layer — the keys of every
//! transaction, and the final responses that completed transactions keep for timers J, H and I —
//! placed one after another in blocks mapped for them, and handed back to the system a page at a
//! time as soon as nothing on the page is alive.
//!
//! Kept on the thread's heap, a burst's lingering transactions grew the worker's heap by tens of
//! MiB; when they ended 32 s later, the steady load's new chunks were placed in the holes all
//! over it and each pinned its page, so RSS stayed a quarter above its level for minutes
//! (bench/RESULTS.md, issue 24). Here a page goes back (`MADV_DONTNEED`) as its last piece is
//! dropped, and a block is unmapped with its last piece; what lives on pins only its own pages.
//! What dies within a set-up (a 2xx until its ACK, a request until its final response) stays
//! on the heap, where its chunk is reused at once: in a block it would hold its page until the
//! keys beside it ended.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// Bytes a page holds (the smallest page of the platforms strowger runs on; where pages are
/// larger, `madvise` refuses the unaligned ranges and pages come back with their block).
const PAGE: usize = 4096;
/// Bytes a block maps: 64 pages.
const BLOCK: usize = 64 * PAGE;

/// A mapping and, per page, how many pieces (and the writer, while the page is its next
/// place) use it.
struct Block {
    base: NonNull<u8>,
    len: usize,
    live: Box<[AtomicU32]>,
}

// SAFETY: the writer only writes bytes past every piece handed out, pieces only read their own
// bytes, and the counters are atomic.
unsafe impl Send for Block {}
unsafe impl Sync for Block {}

impl Block {
    /// `len` bytes (a multiple of [`PAGE`]) mapped anonymous and private; `None` if refused.
    fn map(len: usize) -> Option<Arc<Block>> {
        // SAFETY: a fresh anonymous mapping, owned by the block and unmapped when it drops.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Arc::new(Block {
            base: NonNull::new(p.cast())?,
            len,
            live: (0..len / PAGE).map(|_| AtomicU32::new(0)).collect(),
        }))
    }

    fn hold(&self, pages: std::ops::Range<usize>) {
        for p in pages {
            self.live[p].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lets go of `pages`; one nothing uses any more goes back to the system.
    fn release(&self, pages: std::ops::Range<usize>) {
        for p in pages {
            if self.live[p].fetch_sub(1, Ordering::AcqRel) == 1 {
                // SAFETY: the page lies in this mapping and no piece and no writer uses it: it
                // is read again only if the writer places a piece on it, as zeroes, which the
                // writer never does (it only moves forward).
                unsafe {
                    libc::madvise(
                        self.base.as_ptr().add(p * PAGE).cast(),
                        PAGE,
                        libc::MADV_DONTNEED,
                    );
                }
            }
        }
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: the block's own mapping, unmapped once, with no piece left in it.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Bytes placed in a block: read-only, cheap to clone, handing their pages back when the last
/// clone of the last piece on them drops.
pub struct Pooled {
    block: Arc<Block>,
    start: u32,
    len: u32,
}

impl Pooled {
    fn pages(&self) -> std::ops::Range<usize> {
        let (start, len) = (self.start as usize, self.len.max(1) as usize);
        start / PAGE..(start + len - 1) / PAGE + 1
    }
}

impl Clone for Pooled {
    fn clone(&self) -> Self {
        self.block.hold(self.pages());
        Pooled {
            block: self.block.clone(),
            start: self.start,
            len: self.len,
        }
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.block.release(self.pages());
    }
}

impl Deref for Pooled {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the range was written before the piece was made and lies in the block, whose
        // pages stay mapped while the piece holds them.
        unsafe {
            std::slice::from_raw_parts(
                self.block.base.as_ptr().add(self.start as usize),
                self.len as usize,
            )
        }
    }
}

/// Where the next pieces go: the current block and the offset past its last piece. The page
/// holding that offset is held for the writer until it moves past it.
#[derive(Default)]
pub(super) struct Pool {
    block: Option<Arc<Block>>,
    top: usize,
}

impl Pool {
    /// `bytes` copied into a block; on the heap if no block can be mapped.
    pub fn put(&mut self, bytes: &[u8]) -> Wire {
        if bytes.is_empty() {
            return Wire::Heap(bytes.into());
        }
        if bytes.len() > BLOCK / 4 {
            // A rare large message (over TCP) gets a mapping of its own.
            let len = bytes.len().div_ceil(PAGE) * PAGE;
            return match Block::map(len) {
                Some(block) => Wire::Pooled(write(&block, 0, bytes)),
                None => Wire::Heap(bytes.into()),
            };
        }
        if self.block.is_none() || self.top + bytes.len() > BLOCK {
            self.close();
            self.block = Block::map(BLOCK).inspect(|block| block.hold(0..1));
            self.top = 0;
        }
        let Some(block) = &self.block else {
            return Wire::Heap(bytes.into());
        };
        let piece = write(block, self.top, bytes);
        let (was, top) = (self.top / PAGE, self.top + bytes.len());
        let now = top / PAGE;
        if now != was {
            if now < block.live.len() {
                block.hold(now..now + 1);
            }
            block.release(was..was + 1);
        }
        self.top = top;
        Wire::Pooled(piece)
    }

    /// A key (UTF-8 already) placed like any other bytes.
    pub fn key(&mut self, key: &str) -> Key {
        Key(self.put(key.as_bytes()))
    }

    /// Lets go of the writer's page of the current block.
    fn close(&mut self) {
        if let Some(block) = self.block.take() {
            let page = self.top / PAGE;
            if page < block.live.len() {
                block.release(page..page + 1);
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close();
    }
}

/// `bytes` written at `at` in `block`, as a piece holding its pages.
fn write(block: &Arc<Block>, at: usize, bytes: &[u8]) -> Pooled {
    // SAFETY: `at + bytes.len()` is within the mapping (checked by the caller), and no piece
    // covers those bytes yet.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), block.base.as_ptr().add(at), bytes.len());
    }
    let piece = Pooled {
        block: block.clone(),
        start: at as u32,
        len: bytes.len() as u32,
    };
    block.hold(piece.pages());
    piece
}

/// A SIP message as the layer sends and keeps it: on the heap, or in a block of the pool.
#[derive(Clone)]
pub enum Wire {
    Heap(Arc<[u8]>),
    Pooled(Pooled),
}

impl Deref for Wire {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Wire::Heap(b) => b,
            Wire::Pooled(b) => b,
        }
    }
}

#[cfg(test)]
impl Wire {
    /// Whether both are the same bytes, not copies.
    pub(super) fn shares(&self, other: &Wire) -> bool {
        std::ptr::eq(self.as_ptr(), other.as_ptr())
    }

    /// How many hold a message on the heap.
    pub(super) fn holders(&self) -> usize {
        match self {
            Wire::Heap(b) => Arc::strong_count(b),
            Wire::Pooled(_) => panic!("a pooled message's block is shared by others"),
        }
    }
}

impl From<Vec<u8>> for Wire {
    fn from(v: Vec<u8>) -> Wire {
        Wire::Heap(v.into())
    }
}

impl From<Arc<[u8]>> for Wire {
    fn from(v: Arc<[u8]>) -> Wire {
        Wire::Heap(v)
    }
}

impl PartialEq for Wire {
    fn eq(&self, other: &Wire) -> bool {
        **self == **other
    }
}

impl Eq for Wire {}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// A transaction's key in the pool, looked up by `&str`.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Key(Wire);

impl Deref for Key {
    type Target = str;
    fn deref(&self) -> &str {
        // SAFETY: a key is only made from a `&str` (`Pool::key`).
        unsafe { std::str::from_utf8_unchecked(&self.0) }
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        self
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        (**self).hash(h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident pages of the block under `piece` (mincore).
    fn resident(piece: &Wire) -> usize {
        let Wire::Pooled(p) = piece else {
            panic!("on the heap")
        };
        let mut v = vec![0u8; p.block.live.len()];
        // SAFETY: the block's own mapping and a vector of one byte per page.
        unsafe { libc::mincore(p.block.base.as_ptr().cast(), p.block.len, v.as_mut_ptr()) };
        v.iter().filter(|&&b| b & 1 == 1).count()
    }

    #[test]
    fn pieces_read_back_and_clone() {
        let mut pool = Pool::default();
        let a = pool.put(b"SIP/2.0 200 OK\r\n\r\n");
        let k = pool.key("z9hG4bK1|BYE");
        assert_eq!(&*a, b"SIP/2.0 200 OK\r\n\r\n");
        assert_eq!(&*k, "z9hG4bK1|BYE");
        let b = a.clone();
        drop(a);
        assert_eq!(&*b, b"SIP/2.0 200 OK\r\n\r\n");
        let big = vec![7u8; BLOCK];
        assert_eq!(&*pool.put(&big), &big[..]);
    }

    /// A page whose pieces have all dropped goes back while a piece on a later page lives; the
    /// block goes with its last piece.
    #[test]
    fn a_page_goes_back_when_its_last_piece_drops() {
        let mut pool = Pool::default();
        let early: Vec<Wire> = (0..4).map(|_| pool.put(&[1u8; 1024])).collect();
        let late = pool.put(&[2u8; 3000]);
        let keep = late.clone();
        assert_eq!(resident(&keep), 2, "two pages written");
        drop(early);
        assert_eq!(resident(&keep), 1, "the first page went back");
        drop(late);
        assert_eq!(&*keep, &[2u8; 3000][..], "a clone keeps the page");
        let Wire::Pooled(p) = &keep else { panic!() };
        let block = Arc::downgrade(&p.block);
        drop(keep);
        drop(pool);
        assert!(
            block.upgrade().is_none(),
            "the block unmapped with its last piece"
        );
    }

    /// Keys hash and compare as the strings they hold, so maps find them by `&str`.
    #[test]
    // A key hashes its bytes; the atomics it reaches (page counters) are not part of that.
    #[allow(clippy::mutable_key_type)]
    fn keys_are_found_by_their_string() {
        let mut pool = Pool::default();
        let mut map = std::collections::HashMap::new();
        map.insert(pool.key("a|INVITE"), 1);
        map.insert(pool.key("b|BYE"), 2);
        assert_eq!(map.get("b|BYE"), Some(&2));
        assert_eq!(map.get("a|INVITE"), Some(&1));
    }
}

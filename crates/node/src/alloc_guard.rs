//! The process's allocator: the system allocator, except for single allocations of
//! `HUGE_ALLOCATION_BYTES_MIN` or more, which are mapped with `MAP_NORESERVE`.
//!
//! Why: kafka-protocol 0.18 (the Kafka listener's message decoder) sizes a `Vec` from an
//! array count read off the wire before decoding any element (upstream
//! kafka-protocol-rs#152/#161/#200, open). A 20-byte request can declare 2^31 elements and ask
//! for hundreds of GiB at once; the system allocator refuses that (it exceeds memory plus swap
//! under Linux's default overcommit heuristic) and Rust aborts the process. Mapped with
//! `MAP_NORESERVE`, the same request only reserves address space: no page is touched until an
//! element is decoded, the decode then fails on the missing bytes, and the mapping is
//! returned. tinymq itself never makes an allocation this large (its frames and fetch
//! buffers are bounded far below it), so nothing else takes this path.
//!
//! Under strict overcommit (`vm.overcommit_memory = 2`) `MAP_NORESERVE` is ignored and such a
//! request still fails; docs/kafka.md says so.

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations at least this large are mapped with `MAP_NORESERVE` (1 GiB).
pub const HUGE_ALLOCATION_BYTES_MIN: usize = 1 << 30;
/// The alignment `mmap` guarantees (a page).
const MAP_ALIGN_BYTES_MAX: usize = 4096;

pub struct GuardedAllocator;

fn is_huge(size: usize, align: usize) -> bool {
    size >= HUGE_ALLOCATION_BYTES_MIN && align <= MAP_ALIGN_BYTES_MAX
}

/// Maps `size` bytes of zeroed, unreserved memory; null when the address space is exhausted.
fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address the kernel picks; no file, no
    // existing memory is affected.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        ptr.cast()
    }
}

// SAFETY: every block is either the system allocator's (returned to it) or a mapping made by
// `map` of exactly `layout.size()` bytes (unmapped with that size); which one a block is
// follows from its layout alone, the same at allocation and deallocation.
unsafe impl GlobalAlloc for GuardedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout.size(), layout.align()) {
            return map(layout.size());
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_huge(layout.size(), layout.align()) {
            // Anonymous mappings are zero-filled.
            return map(layout.size());
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_huge(layout.size(), layout.align()) {
            // SAFETY: `ptr` was returned by `map` for this size (see the impl's comment).
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
            return;
        }
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (align, old_size) = (layout.align(), layout.size());
        if !is_huge(old_size, align) && !is_huge(new_size, align) {
            // SAFETY: forwarded with the caller's guarantees.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller guarantees `new_size`, rounded up to `align`, fits an isize.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, align) };
        // SAFETY: a non-zero size (at least one of the sizes is huge, and a zero-size layout
        // never reaches an allocator).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller size and do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(ptr, new, old_size.min(new_size)) };
            // SAFETY: `ptr` was allocated by this allocator with `layout`.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}

#[cfg(test)]
mod tests {
    /// What the Kafka decoder does with a lying array count: runs under the guard (this
    /// binary's allocator), where the system allocator alone would abort the test process.
    #[test]
    fn a_vec_sized_by_a_lying_count_only_reserves_address_space() {
        let count = i32::MAX as usize;
        let mut lying: Vec<[u8; 200]> = Vec::with_capacity(count);
        assert!(lying.capacity() >= count);
        lying.push([7; 200]);
        assert_eq!(lying[0][199], 7);
        let grown: Vec<u8> = vec![0; super::HUGE_ALLOCATION_BYTES_MIN + 1];
        assert_eq!(grown[super::HUGE_ALLOCATION_BYTES_MIN], 0);
    }

    #[test]
    fn growing_across_the_threshold_keeps_the_contents() {
        let mut v: Vec<u8> = Vec::with_capacity(16);
        v.extend_from_slice(b"kept");
        v.reserve_exact(super::HUGE_ALLOCATION_BYTES_MIN);
        assert_eq!(&v[..4], b"kept");
        v.shrink_to(16);
        assert_eq!(&v[..4], b"kept");
    }
}

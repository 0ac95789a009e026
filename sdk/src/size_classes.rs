//! The allocator of plugins built as WebAssembly: small blocks come from one free list per size
//! class, larger ones from the target's allocator.
//!
//! A plugin allocates and frees many small blocks in every call (the strings and lists the host
//! sends, the pod the SDK builds from them, a plugin's per-pod vectors). In a component the
//! target's allocator (dlmalloc, compiled to WebAssembly) took about 3.5% of a cycle in `perf`
//! of the topology-spread bench; taking a block from a free list and giving it back are a few
//! loads and stores. With it, PodTopologySpread's `set-pod` went from 5.2 to 4.3 µs (criterion
//! `set_pod`, the two builds run one after the other), for about 5% more RSS in the `mixed`
//! bench (dlmalloc packs blocks closer).
//!
//! Freed small blocks stay on their list for the next block of that size instead of going back
//! to the target's allocator, so a plugin holds on to the most small memory it ever used at
//! once. Components have no threads, which is what makes the unsynchronised state sound (see
//! [`SizeClasses`]).

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::ptr;

/// Block sizes, from 16 on 1.5 or 1.33 times apart, so that a block above 16 bytes wastes less
/// than a third of itself.
const SIZES: [usize; CLASSES] = [
    8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
];
const CLASSES: usize = 14;
const LARGEST: usize = SIZES[CLASSES - 1];
/// Blocks are cut at this alignment, so a class whose size is a multiple of it keeps it.
const CUT_ALIGN: usize = 16;
/// What is taken from the backing allocator at once to cut small blocks from.
const SLAB: usize = 64 * 1024;

/// Per 8 bytes of size (rounded up), the smallest class that holds it.
const CLASS_BY_EIGHTHS: [u8; LARGEST / 8 + 1] = {
    let mut table = [0u8; LARGEST / 8 + 1];
    let mut eighths = 0;
    let mut class = 0;
    while eighths < table.len() {
        while SIZES[class] < eighths * 8 {
            class += 1;
        }
        table[eighths] = class as u8;
        eighths += 1;
    }
    table
};

/// A size-class allocator over `backing`, for a program with one thread: its state is not
/// synchronised, so it must not be shared between threads (the SDK installs it only in
/// WebAssembly builds, which have none).
pub struct SizeClasses<B> {
    backing: B,
    state: UnsafeCell<State>,
}

struct State {
    /// Per class, the first free block; each free block holds the address of the next.
    free: [*mut u8; CLASSES],
    /// The unused rest of the current slab.
    next: *mut u8,
    end: *mut u8,
}

// SAFETY: see the type's documentation; WebAssembly builds of plugins have one thread.
unsafe impl<B: Sync> Sync for SizeClasses<B> {}

impl<B> SizeClasses<B> {
    /// An allocator with no memory yet.
    pub const fn new(backing: B) -> Self {
        SizeClasses {
            backing,
            state: UnsafeCell::new(State {
                free: [ptr::null_mut(); CLASSES],
                next: ptr::null_mut(),
                end: ptr::null_mut(),
            }),
        }
    }
}

/// The class of blocks that holds `layout`, or none for the backing allocator (large blocks, and
/// alignments above [`CUT_ALIGN`]). Every block of a class whose size is a multiple of 16 is
/// 16-aligned; the others are 8-aligned and only take alignments up to 8.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    if size > LARGEST || layout.align() > CUT_ALIGN {
        return None;
    }
    let class = CLASS_BY_EIGHTHS[size.div_ceil(8)] as usize;
    if layout.align() <= 8 || SIZES[class].is_multiple_of(CUT_ALIGN) {
        return Some(class);
    }
    // The next class of a size that is not a multiple of 16 is one.
    Some(class + 1).filter(|&c| c < CLASSES)
}

unsafe impl<B: GlobalAlloc> GlobalAlloc for SizeClasses<B> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            return self.backing.alloc(layout);
        };
        let state = &mut *self.state.get();
        let head = state.free[class];
        if !head.is_null() {
            state.free[class] = *(head as *mut *mut u8);
            return head;
        }
        let size = SIZES[class];
        let offset = state.next.align_offset(CUT_ALIGN);
        let fits = !state.next.is_null()
            && (state.end as usize - state.next as usize) >= offset.saturating_add(size);
        if !fits {
            let slab = self
                .backing
                .alloc(Layout::from_size_align_unchecked(SLAB, CUT_ALIGN));
            if slab.is_null() {
                return slab;
            }
            state.next = slab;
            state.end = slab.add(SLAB);
        } else {
            state.next = state.next.add(offset);
        }
        let block = state.next;
        state.next = block.add(size);
        block
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let Some(class) = class_of(layout) else {
            return self.backing.dealloc(block, layout);
        };
        let state = &mut *self.state.get();
        *(block as *mut *mut u8) = state.free[class];
        state.free[class] = block;
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class_of(layout).is_none() {
            // The backing allocator knows which of its pages are fresh, and zero already.
            return self.backing.alloc_zeroed(layout);
        }
        let block = self.alloc(layout);
        if !block.is_null() {
            ptr::write_bytes(block, 0, layout.size());
        }
        block
    }

    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
        match (class_of(layout), class_of(new_layout)) {
            (None, None) => self.backing.realloc(block, layout, new_size),
            (Some(old), Some(new)) if old == new => block,
            _ => {
                let moved = self.alloc(new_layout);
                if !moved.is_null() {
                    ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                    self.dealloc(block, layout);
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    /// A live block and the byte it was filled with.
    struct Live {
        block: *mut u8,
        layout: Layout,
        fill: u8,
    }

    fn filled(block: *mut u8, layout: Layout, fill: u8) -> Live {
        unsafe { ptr::write_bytes(block, fill, layout.size()) };
        Live {
            block,
            layout,
            fill,
        }
    }

    fn intact(live: &Live) -> bool {
        let bytes = unsafe { std::slice::from_raw_parts(live.block, live.layout.size()) };
        bytes.iter().all(|&b| b == live.fill)
    }

    #[test]
    fn blocks_keep_their_contents_and_alignment_through_random_allocations_frees_and_growth() {
        let allocator = SizeClasses::new(System);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut live: Vec<Live> = Vec::new();
        for step in 0..200_000u32 {
            let fill = step as u8;
            match next() % 4 {
                0 | 1 => {
                    // Mostly small sizes, some past the largest class; alignments up to 64.
                    let size = if next() % 8 == 0 {
                        1 + (next() % 5000) as usize
                    } else {
                        1 + (next() % 300) as usize
                    };
                    let align = 1usize << (next() % 7);
                    let layout = Layout::from_size_align(size, align).unwrap();
                    let block = if next() % 5 == 0 {
                        let block = unsafe { allocator.alloc_zeroed(layout) };
                        let bytes = unsafe { std::slice::from_raw_parts(block, size) };
                        assert!(bytes.iter().all(|&b| b == 0), "zeroed block has data");
                        block
                    } else {
                        unsafe { allocator.alloc(layout) }
                    };
                    assert!(!block.is_null());
                    assert_eq!(block as usize % align, 0, "misaligned for {layout:?}");
                    live.push(filled(block, layout, fill));
                }
                2 if !live.is_empty() => {
                    let gone = live.swap_remove((next() % live.len() as u64) as usize);
                    assert!(intact(&gone), "a block was overwritten");
                    unsafe { allocator.dealloc(gone.block, gone.layout) };
                }
                3 if !live.is_empty() => {
                    let k = (next() % live.len() as u64) as usize;
                    let old = &live[k];
                    assert!(intact(old), "a block was overwritten");
                    let new_size = 1 + (next() % 2000) as usize;
                    let kept = old.layout.size().min(new_size);
                    let block = unsafe { allocator.realloc(old.block, old.layout, new_size) };
                    assert!(!block.is_null());
                    assert_eq!(block as usize % old.layout.align(), 0);
                    let bytes = unsafe { std::slice::from_raw_parts(block, kept) };
                    assert!(bytes.iter().all(|&b| b == old.fill), "realloc lost data");
                    let layout = Layout::from_size_align(new_size, old.layout.align()).unwrap();
                    live[k] = filled(block, layout, fill);
                }
                _ => {}
            }
        }
        for block in &live {
            assert!(intact(block), "a block was overwritten");
        }
    }

    #[test]
    fn a_freed_block_is_handed_out_again_for_its_class_only() {
        let allocator = SizeClasses::new(System);
        let small = Layout::from_size_align(24, 8).unwrap();
        unsafe {
            let first = allocator.alloc(small);
            allocator.dealloc(first, small);
            let other_class = allocator.alloc(Layout::from_size_align(32, 8).unwrap());
            assert_ne!(other_class, first);
            // 17 to 24 bytes share a class.
            assert_eq!(
                allocator.alloc(Layout::from_size_align(17, 8).unwrap()),
                first
            );
            // A 16-aligned block of 24 bytes comes from the 32-byte class.
            let aligned = allocator.alloc(Layout::from_size_align(24, 16).unwrap());
            assert_eq!(aligned as usize % 16, 0);
            assert_eq!(
                class_of(Layout::from_size_align(24, 16).unwrap()),
                class_of(Layout::from_size_align(32, 8).unwrap())
            );
        }
    }
}

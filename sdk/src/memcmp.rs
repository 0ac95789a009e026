//! `memcmp` and `bcmp` for guests built for wasm32-unknown-unknown, comparing eight bytes at a
//! time.
//!
//! That target has no C library: every string equality (`==` on `str`, each hit of a
//! `HashMap<String, _>` lookup) calls compiler-builtins' `memcmp`, which compares one byte per
//! loop iteration, and the host's call deadlines add an epoch check to every iteration. In the
//! pod-affinity bench the byte loop took 7% of the WebAssembly run, against under 1% for the
//! same comparisons natively. The linker takes these in place of compiler-builtins' versions
//! (the components' `memcmp` is this one in `perf`: 0.9% of the same run).

/// Compares `n` bytes at `a` and `b` as `memcmp` does: the sign of the difference of the first
/// differing bytes (as unsigned), 0 when all are equal.
///
/// # Safety
/// `a` and `b` must be valid for reads of `n` bytes.
pub unsafe fn compare(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i + 8 <= n {
        // SAFETY: i + 8 <= n, and the caller guarantees n readable bytes.
        let (x, y) = unsafe {
            (
                a.add(i).cast::<u64>().read_unaligned(),
                b.add(i).cast::<u64>().read_unaligned(),
            )
        };
        if x != y {
            // Little-endian: the first differing byte in memory is the lowest differing one.
            let shift = (x ^ y).trailing_zeros() & !7;
            return i32::from((x >> shift) as u8) - i32::from((y >> shift) as u8);
        }
        i += 8;
    }
    while i < n {
        // SAFETY: i < n.
        let (x, y) = unsafe { (*a.add(i), *b.add(i)) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
        i += 1;
    }
    0
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod symbols {
    /// # Safety
    /// As C's `memcmp`.
    #[no_mangle]
    pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: the caller's contract is memcmp's.
        unsafe { super::compare(a, b, n) }
    }

    /// `bcmp` only asks whether the bytes differ, which `memcmp`'s answer tells.
    ///
    /// # Safety
    /// As C's `bcmp`.
    #[no_mangle]
    pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        // SAFETY: the caller's contract is bcmp's, the same as memcmp's.
        unsafe { super::compare(a, b, n) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_wise_comparison_agrees_with_byte_order_on_every_length_and_difference() {
        let base: Vec<u8> = (0..40u8)
            .map(|i| i.wrapping_mul(37).wrapping_add(200))
            .collect();
        for len in 0..=base.len() {
            let a = &base[..len];
            // SAFETY: both slices hold `len` bytes.
            assert_eq!(unsafe { compare(a.as_ptr(), a.as_ptr(), len) }, 0);
            for at in 0..len {
                for delta in [1u8, 0x7f, 0x80, 0xff] {
                    let mut b = a.to_vec();
                    b[at] = b[at].wrapping_add(delta);
                    // Later bytes differ the other way: only the first difference may count.
                    for later in b.iter_mut().skip(at + 1) {
                        *later = later.wrapping_sub(delta);
                    }
                    let expected = i32::from(a[at]) - i32::from(b[at]);
                    // SAFETY: both hold `len` bytes.
                    let got = unsafe { compare(a.as_ptr(), b.as_ptr(), len) };
                    assert_eq!(got, expected, "len {len}, byte {at}, +{delta}");
                }
            }
        }
    }

    #[test]
    fn unaligned_starts_compare_like_aligned_ones() {
        let bytes: Vec<u8> = (0..64u8).collect();
        let copy = bytes.clone();
        for offset in 0..8 {
            let n = 64 - offset;
            // SAFETY: both hold 64 bytes from the start, so `n` from `offset`.
            unsafe {
                assert_eq!(
                    compare(bytes.as_ptr().add(offset), copy.as_ptr().add(offset), n),
                    0
                );
                let shifted = compare(bytes.as_ptr().add(offset), copy.as_ptr(), n);
                assert_eq!(shifted > 0, offset > 0, "offset {offset}");
            }
        }
    }
}

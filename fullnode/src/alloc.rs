//! The one allocator setting the follower tunes: how long memory it freed stays with the
//! process before mimalloc (the binary's global allocator) gives it back to the kernel.
//!
//! Applying a block allocates and frees the same tens of megabytes (the decoded changes, the
//! roots' node lists, the group's sorted writes). mimalloc's default gives freed pages back
//! after 10 ms, and a block takes longer than that, so every block faulted its big buffers
//! in again and the kernel zeroed them (2 MiB at a time under transparent huge pages):
//! `clear_page_erms` took 3.3 % of a live replay's samples over 10M accounts. Keeping freed
//! memory for a second holds it across blocks and still returns it when the node goes idle.

/// How long freed memory is kept by default, in milliseconds.
pub const DEFAULT_PURGE_DELAY_MS: i64 = 1000;

/// mimalloc's `mi_option_purge_delay` (the same index in its v2 and v3 option enums).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Sets how long freed memory is kept before it goes back to the kernel: `ms` milliseconds,
/// 0 at once, -1 never. Takes effect for memory freed from then on; harmless (and without
/// effect) when mimalloc is linked but not the global allocator.
pub fn set_purge_delay(ms: i64) {
    // SAFETY: `mi_option_set` stores one option value in mimalloc's option table; it takes
    // no pointers and may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, ms as std::ffi::c_long) }
}

/// The delay now in effect, in milliseconds.
pub fn purge_delay() -> i64 {
    // SAFETY: as above, a read of one option value.
    let value: std::ffi::c_long = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
    // `c_long` is 64 bits where Gigas runs (Linux, 64-bit).
    value as i64
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_purge_delay_is_set_and_read_back() {
        let before = super::purge_delay();
        super::set_purge_delay(1234);
        assert_eq!(super::purge_delay(), 1234);
        super::set_purge_delay(before);
        assert_eq!(super::purge_delay(), before);
    }
}

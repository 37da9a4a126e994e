//! The only module allowed `unsafe`; each block states why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::AsRawFd;

use tokio::io::unix::AsyncFd;

/// Registers a file descriptor owner with tokio's reactor.
pub fn async_fd<T: AsRawFd>(inner: T) -> io::Result<AsyncFd<T>> {
    // SAFETY: `AsyncFd` takes ownership of `inner`, which owns its descriptor and keeps
    // it open until the `AsyncFd` (and so the registration) is dropped; the descriptor
    // is not registered anywhere else.
    unsafe { AsyncFd::register(inner) }.map_err(|e| e.into_parts().1)
}

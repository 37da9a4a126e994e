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

/// Attaches `file`, an open `/dev/net/tun`, to the TUN device `name` (created if it
/// does not exist; `%d` in the name picks a free number), with a virtio-net header
/// in front of every packet; returns the device's name. With `multi_queue` the device
/// has one queue per attached file, and the kernel keeps a flow's packets on the
/// queue its last packet was written to.
pub fn tun_attach(file: &std::fs::File, name: &str, multi_queue: bool) -> io::Result<String> {
    use nix::libc;
    // SAFETY: `ifreq` is plain old data, for which all zeroes is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= request.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the name {name} is longer than 15 bytes"),
        ));
    }
    for (to, from) in request.ifr_name.iter_mut().zip(name.bytes()) {
        *to = from as libc::c_char;
    }
    let queues = if multi_queue {
        libc::IFF_MULTI_QUEUE
    } else {
        0
    };
    request.ifr_ifru.ifru_flags =
        (libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR | queues) as _;
    // SAFETY: TUNSETIFF reads and writes one `ifreq`, which `request` is and which
    // outlives the call; the descriptor is open.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel wrote the device's name NUL-terminated into `ifr_name`, which
    // was zeroed beyond the name given.
    let name = unsafe { std::ffi::CStr::from_ptr(request.ifr_name.as_ptr()) };
    Ok(name.to_string_lossy().into_owned())
}

/// Tells the kernel which offloads the TUN device behind `file` takes (TUNSETOFFLOAD).
pub fn tun_set_offload(file: &std::fs::File, offloads: u32) -> io::Result<()> {
    use nix::libc;
    // SAFETY: TUNSETOFFLOAD takes its argument by value; the descriptor is open.
    let rc = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            libc::TUNSETOFFLOAD,
            libc::c_ulong::from(offloads),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

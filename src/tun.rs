//! The TUN device: created with a virtio-net header in front of every packet and, where
//! the kernel allows, with TCP segmentation and checksum offloads (so that one read
//! brings up to 64 KB of a TCP flow and one write hands over as much: see
//! [`crate::core::offload`]); configured (MTU, addresses, routes, up) over netlink;
//! read and written without blocking through tokio's reactor. The kernel removes the
//! device, and with it its addresses and routes, when the daemon closes it.

use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::unix::fs::OpenOptionsExt;

use anyhow::Context;
use futures::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::{LinkUnspec, RouteMessageBuilder};
use tokio::io::unix::AsyncFd;
use tracing::warn;

use crate::config::TunConfig;

/// Offloads asked of the kernel: checksums, and TCP segmentation over IPv4 and IPv6.
const OFFLOADS: u32 = nix::libc::TUN_F_CSUM | nix::libc::TUN_F_TSO4 | nix::libc::TUN_F_TSO6;

/// An open, configured TUN device.
pub struct Tun {
    fd: AsyncFd<File>,
    name: String,
    offload: bool,
}

impl Tun {
    /// Creates the device with `queues` queues (one per data-path thread) and
    /// configures it; `routes` are sent into the tunnel. One `Tun` per queue: fewer
    /// than asked (at least one, logged) if the kernel refuses more.
    pub async fn open(
        cfg: &TunConfig,
        routes: &[IpNet],
        queues: usize,
    ) -> anyhow::Result<Vec<Tun>> {
        let mut multi_queue = queues > 1;
        let mut name = cfg.name.clone();
        let mut files = Vec::with_capacity(queues);
        while files.len() < queues.max(1) {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(nix::libc::O_NONBLOCK)
                .open("/dev/net/tun")
                .with_context(|| format!("opening TUN device {name} (are you root?)"))?;
            // The first file creates the device (a `%d` in its name picks a number),
            // the others attach to it by the name it got.
            match crate::sys::tun_attach(&file, &name, multi_queue) {
                Ok(attached) => {
                    name = attached;
                    files.push(file);
                    if !multi_queue {
                        break;
                    }
                }
                Err(e) if !files.is_empty() => {
                    warn!(tun = name, error = %e, queues = files.len(),
                        "the kernel refused another TUN queue; fewer data-path threads");
                    break;
                }
                // Tried again as a device of one queue.
                Err(e) if multi_queue => {
                    warn!(tun = name, error = %e,
                        "the kernel refused a multi-queue TUN device; one data-path thread");
                    multi_queue = false;
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("creating TUN device {name} (are you root?)"));
                }
            }
        }
        // Without offloads every packet is read and written alone, as before them.
        // They are the device's: asked once, they hold for every queue.
        let offload = cfg.offload
            && crate::sys::tun_set_offload(&files[0], OFFLOADS)
                .inspect_err(|e| {
                    warn!(tun = name, error = %e, "the kernel refused TUN offloads; going without")
                })
                .is_ok();
        configure(&name, cfg, routes)
            .await
            .with_context(|| format!("configuring TUN device {name}"))?;
        files
            .into_iter()
            .map(|file| {
                let fd = crate::sys::async_fd(file)
                    .with_context(|| format!("registering TUN device {name} with the reactor"))?;
                Ok(Tun {
                    fd,
                    name: name.clone(),
                    offload,
                })
            })
            .collect()
    }

    /// A port that is not a device: one end of a datagram socket pair, whose other end
    /// plays the site's LAN (`braid loadgen`'s sites). Packets cross it as they cross
    /// a TUN device without offloads, each behind a plain virtio-net header.
    pub fn from_socket(socket: std::os::unix::net::UnixDatagram, name: &str) -> io::Result<Tun> {
        socket.set_nonblocking(true)?;
        let file = File::from(std::os::fd::OwnedFd::from(socket));
        Ok(Tun {
            fd: crate::sys::async_fd(file)?,
            name: name.to_string(),
            offload: false,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// True if the kernel hands over and takes TCP super-packets.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// Waits until a packet can be read.
    pub async fn readable(&self) -> io::Result<tokio::io::unix::AsyncFdReadyGuard<'_, File>> {
        self.fd.readable().await
    }

    /// Reads one packet, virtio-net header first, from a device the caller saw readable.
    pub fn read(fd: &AsyncFd<File>, buf: &mut [u8]) -> io::Result<usize> {
        fd.get_ref().read(buf)
    }

    /// Writes one packet, its virtio-net header first, given in pieces; a full device
    /// queue drops it (`WouldBlock`).
    pub fn write(&self, parts: &[IoSlice<'_>]) -> io::Result<usize> {
        self.fd.get_ref().write_vectored(parts)
    }
}

/// Sends `add` into the tunnel and stops sending `remove` (the exit's reload of its
/// sites' prefixes).
pub async fn change_routes(name: &str, add: &[IpNet], remove: &[IpNet]) -> anyhow::Result<()> {
    on_link(name, async |handle, index| {
        for net in remove {
            handle
                .route()
                .del(route_into(net, index)?)
                .execute()
                .await
                .with_context(|| format!("removing route {net} from the tunnel"))?;
        }
        add_routes(handle, index, add).await
    })
    .await
    .with_context(|| format!("changing the routes of TUN device {name}"))
}

async fn configure(name: &str, cfg: &TunConfig, routes: &[IpNet]) -> anyhow::Result<()> {
    on_link(name, async |handle, index| {
        // No IPv6 link-local address: the kernel would otherwise send router
        // solicitations and MLD reports into the tunnel, which no peer wants.
        // Hosts with IPv6 disabled have no such file, and need nothing.
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{name}/addr_gen_mode"), "1");
        handle
            .link()
            .set(LinkUnspec::new_with_index(index).mtu(cfg.mtu).up().build())
            .execute()
            .await
            .with_context(|| format!("setting MTU {} and link up", cfg.mtu))?;
        for net in &cfg.addresses {
            handle
                .address()
                .add(index, net.addr(), net.prefix_len())
                .replace()
                .execute()
                .await
                .with_context(|| format!("adding address {net}"))?;
        }
        add_routes(handle, index, routes).await
    })
    .await
}

/// Runs `f` with a netlink connection and the index of device `name`.
async fn on_link<T>(
    name: &str,
    f: impl AsyncFnOnce(&rtnetlink::Handle, u32) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let (connection, handle, _) = rtnetlink::new_connection().context("opening netlink")?;
    let netlink = tokio::spawn(connection);
    let result = async {
        let link = handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute()
            .try_next()
            .await
            .context("looking up the device")?
            .context("the device vanished")?;
        f(&handle, link.header.index).await
    }
    .await;
    netlink.abort();
    result
}

async fn add_routes(
    handle: &rtnetlink::Handle,
    index: u32,
    routes: &[IpNet],
) -> anyhow::Result<()> {
    for net in routes {
        handle
            .route()
            .add(route_into(net, index)?)
            .replace()
            .execute()
            .await
            .with_context(|| format!("adding route {net} into the tunnel"))?;
    }
    Ok(())
}

/// The route of `net` through device `index`.
fn route_into(
    net: &IpNet,
    index: u32,
) -> anyhow::Result<rtnetlink::packet_route::route::RouteMessage> {
    Ok(RouteMessageBuilder::<std::net::IpAddr>::new()
        .destination_prefix(net.network(), net.prefix_len())
        .with_context(|| format!("route {net}"))?
        .output_interface(index)
        .build())
}

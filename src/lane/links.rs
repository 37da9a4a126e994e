//! The entry's uplink interfaces as the kernel reports them: a task listens to
//! rtnetlink's link and address events and, at each (and every few seconds, in case
//! one was missed), reads every watched interface (index, up, addresses) and tells
//! its uplink's dialers what changed (`core::link_state` judges).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use futures::StreamExt;
use rtnetlink::MulticastGroup;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::core::link_state::{LinkChange, LinkState, judge};

/// Interfaces are read again this often without an event.
const RECHECK: Duration = Duration::from_secs(5);

/// What a dialer sees of its interface: whether lanes can be dialled over it, and
/// how many times it was renewed (came back, or changed its address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkView {
    pub usable: bool,
    pub renewals: u64,
}

/// The watched interfaces, each with what its dialers follow.
#[derive(Clone, Default)]
pub struct LinkWatch {
    links: std::sync::Arc<std::sync::Mutex<BTreeMap<String, watch::Sender<LinkView>>>>,
}

impl LinkWatch {
    /// What the dialers of an uplink on `interface` follow; read at once.
    pub fn subscribe(&self, interface: &str) -> watch::Receiver<LinkView> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        links
            .entry(interface.to_string())
            .or_insert_with(|| {
                watch::Sender::new(LinkView {
                    usable: read(interface).usable(),
                    renewals: 0,
                })
            })
            .subscribe()
    }

    /// Follows the kernel until `shutdown`. Without rtnetlink (refused), only the
    /// periodic reading.
    pub async fn run(self, shutdown: CancellationToken) {
        let groups = [
            MulticastGroup::Link,
            MulticastGroup::Ipv4Ifaddr,
            MulticastGroup::Ipv6Ifaddr,
        ];
        let mut events = match rtnetlink::new_multicast_connection(&groups) {
            Ok((connection, _handle, messages)) => {
                tokio::spawn(connection);
                Some(messages)
            }
            Err(e) => {
                warn!(error = %e, "no rtnetlink events: uplink interfaces are read every {RECHECK:?}");
                None
            }
        };
        let mut known: BTreeMap<String, LinkState> = BTreeMap::new();
        loop {
            self.review(&mut known);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(RECHECK) => {}
                event = async {
                    match events.as_mut() {
                        Some(events) => events.next().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if event.is_none() {
                        warn!("rtnetlink events ended: uplink interfaces are read every {RECHECK:?}");
                        events = None;
                    }
                }
            }
        }
    }

    /// Reads every watched interface and tells its dialers what changed.
    fn review(&self, known: &mut BTreeMap<String, LinkState>) {
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        for (interface, sender) in links.iter() {
            let now = read(interface);
            let before = known.get(interface).cloned().unwrap_or_else(|| {
                // First seen: as its dialers were told when they subscribed.
                if sender.borrow().usable {
                    now.clone()
                } else {
                    LinkState::default()
                }
            });
            match judge(&before, &now) {
                LinkChange::Same => {}
                LinkChange::Lost => {
                    warn!(interface, "uplink interface down or gone: its lanes close");
                    sender.send_modify(|v| v.usable = false);
                }
                LinkChange::Renewed => {
                    info!(interface, addresses = ?now.addresses, "uplink interface up: dialling");
                    sender.send_modify(|v| {
                        v.usable = true;
                        v.renewals += 1;
                    });
                }
            }
            known.insert(interface.clone(), now);
        }
    }
}

/// An interface as the kernel reports it now (`/sys/class/net` and its addresses;
/// link-local ones do not count: a lane cannot reach the exit from them).
fn read(interface: &str) -> LinkState {
    let dir = std::path::Path::new("/sys/class/net").join(interface);
    let text = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let index = text("ifindex").trim().parse().ok();
    let flags = u32::from_str_radix(text("flags").trim().trim_start_matches("0x"), 16).unwrap_or(0);
    let operstate = text("operstate");
    let up = flags & 1 != 0 && matches!(operstate.trim(), "up" | "unknown");
    let mut addresses: Vec<IpAddr> = nix::ifaddrs::getifaddrs()
        .map(|all| {
            all.filter(|a| a.interface_name == interface)
                .filter_map(|a| {
                    let address = a.address?;
                    if let Some(v4) = address.as_sockaddr_in() {
                        Some(IpAddr::V4(v4.ip()))
                    } else {
                        address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
                    }
                })
                .filter(|ip| match ip {
                    IpAddr::V4(v4) => !v4.is_link_local(),
                    IpAddr::V6(v6) => !v6.is_unicast_link_local(),
                })
                .collect()
        })
        .unwrap_or_default();
    addresses.sort();
    LinkState {
        index,
        up,
        addresses,
    }
}

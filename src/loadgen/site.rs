//! One site of the load generator: a real entry (its configuration parsed as a
//! file's, its engine, driver and dialers) whose TUN device is one end of a socket
//! pair, and the other end, which plays the site's LAN: it sends packets at a rate
//! when asked to and counts what the tunnel delivers.

use std::net::Ipv4Addr;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::ThreadsOf;
use crate::cert::TlsMaterial;
use crate::clock::Clock;
use crate::config::{Config, RoleConfig};
use crate::control::metrics::Metrics;
use crate::control::pacing_control::Tables;
use crate::control::status::StatusBoard;
use crate::core::engine::{Role, SiteSpec};
use crate::core::offload::{PLAIN_VNET_HDR, VNET_HDR_LEN};
use crate::driver::{Driver, ThreadLinks};
use crate::lane::client::{Dialers, tls_config};
use crate::lane::dscp::ColourDscp;
use crate::notify::Notifier;
use crate::tun::Tun;

/// The UDP payload of a generated packet: with its headers a 1,228-byte IP packet.
const PAYLOAD: usize = 1200;
/// How often a sending site hands its LAN's packets over.
const SEND_TICK: Duration = Duration::from_millis(10);

/// Site `index`'s id.
pub fn site_id(index: usize) -> String {
    format!("load-{index}")
}

/// Site `index`'s prefix, a /24 of 10.128.0.0/9 (32,768 sites at most), and the
/// address its LAN sends from.
pub fn site_prefix(index: usize) -> (Ipv4Addr, u8) {
    let index = index as u32;
    (
        Ipv4Addr::new(10, (128 + index / 256) as u8, (index % 256) as u8, 0),
        24,
    )
}

fn site_host(index: usize) -> Ipv4Addr {
    let (net, _) = site_prefix(index);
    Ipv4Addr::from(u32::from(net) | 1)
}

/// The most sites [`site_prefix`] numbers.
pub const MAX_SITES: usize = 128 * 256;

/// What every site shares.
pub struct Shared {
    pub exit: String,
    pub exit_name: String,
    pub ca_dir: std::path::PathBuf,
    /// The uplinks' interfaces; each site has a lane of each colour on every one.
    pub interfaces: Vec<String>,
    pub metrics: Arc<Metrics>,
    pub clock: Clock,
    pub shutdown: CancellationToken,
    /// Every site's dialers and drivers.
    pub tasks: TaskTracker,
}

/// A running site: its LAN's end of the socket pair and what arrived there.
pub struct Site {
    pub index: usize,
    lan: Arc<tokio::net::UnixDatagram>,
    received: Arc<AtomicU64>,
}

impl Site {
    /// Starts site `index`: issues its certificate if the CA directory has none,
    /// reads its configuration and starts its dialers and driver.
    pub fn start(index: usize, shared: &Shared) -> anyhow::Result<Site> {
        let id = site_id(index);
        let cert = shared.ca_dir.join(format!("{id}.pem"));
        if !cert.exists() {
            crate::cert::issue(&shared.ca_dir, &id)?;
        }
        let config = Config::parse(&site_config(index, shared), &shared.ca_dir)
            .with_context(|| format!("site {id}'s configuration"))?;
        let RoleConfig::Entry(entry) = &config.role else {
            anyhow::bail!("site {id}'s configuration is not an entry's");
        };
        let material = TlsMaterial::load(&config.tls)?;
        let (events_tx, events) = mpsc::channel(16);
        let mut dialers = Dialers::new(
            tls_config(&material)?,
            ColourDscp {
                green: config.abe.green_dscp,
                blue: config.abe.blue_dscp,
            },
            events_tx,
            shared.clock,
            shared.shutdown.clone(),
            shared.tasks.clone(),
        );
        dialers.apply(entry);
        let dial_demand = dialers.dial_demand();
        let (tun_end, lan) = UnixDatagram::pair().context("a socket pair for the site's LAN")?;
        // A burst of the tunnel's deliveries must not be refused by the pair.
        socket2::SockRef::from(&lan).set_recv_buffer_size(1 << 20)?;
        socket2::SockRef::from(&tun_end).set_recv_buffer_size(1 << 20)?;
        lan.set_nonblocking(true)?;
        let lan = Arc::new(tokio::net::UnixDatagram::from_std(lan)?);
        let sites = [SiteSpec {
            id: id.clone(),
            prefixes: Vec::new(),
        }];
        let (_commands_tx, commands) = mpsc::channel(1);
        let driver: Driver = ThreadsOf {
            config: &config,
            role: Role::Entry,
            sites: &sites,
            site_ids: std::slice::from_ref(&id),
            tables: &Tables::new(),
            metrics: &shared.metrics,
            report: &Arc::new(Mutex::new(Vec::new())),
            clock: shared.clock,
            status: &Arc::new(StatusBoard::new(1)),
            notifier: &Arc::new(Notifier::default()),
            dial_demand: Some(&dial_demand),
        }
        .driver(
            Tun::from_socket(tun_end, &id)?,
            ThreadLinks::all(1).remove(0),
            events,
            commands,
        )?;
        let shutdown = shared.shutdown.clone();
        shared.tasks.spawn(async move {
            // The dialers live as long as the driver: dropped, they stop dialling.
            let _dialers = dialers;
            if let Err(e) = driver.run(shutdown).await {
                tracing::error!(error = format!("{e:#}"), "a site's data path stopped");
            }
        });
        let received = Arc::new(AtomicU64::new(0));
        shared.tasks.spawn(count_arrivals(
            lan.clone(),
            received.clone(),
            shared.shutdown.clone(),
        ));
        Ok(Site {
            index,
            lan,
            received,
        })
    }

    /// Bytes of IP packets the tunnel delivered to the site's LAN so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Sends UDP packets to site `to`'s LAN at `rate_kbps` until `stop`.
    pub fn send(&self, to: usize, rate_kbps: u64, tasks: &TaskTracker, stop: CancellationToken) {
        let packet = udp_packet(site_host(self.index), site_host(to));
        tasks.spawn(send_at_rate(self.lan.clone(), packet, rate_kbps, stop));
    }
}

/// Site `index`'s configuration, as a file would give it.
fn site_config(index: usize, shared: &Shared) -> String {
    let id = site_id(index);
    let dir = shared.ca_dir.display();
    let mut toml = format!(
        "role = \"entry\"\nsite = \"{id}\"\n[tun]\n[tls]\nca = \"{dir}/ca.pem\"\n\
         cert = \"{dir}/{id}.pem\"\nkey = \"{dir}/{id}.key\"\n\
         [exit]\naddress = \"{}\"\nname = \"{}\"\n",
        shared.exit, shared.exit_name
    );
    for interface in &shared.interfaces {
        toml.push_str(&format!(
            "[[uplinks]]\nname = \"{interface}\"\ninterface = \"{interface}\"\n"
        ));
    }
    toml
}

/// A UDP packet from `from` to `to`'s discard port, behind a plain virtio-net header.
fn udp_packet(from: Ipv4Addr, to: Ipv4Addr) -> Vec<u8> {
    let builder = etherparse::PacketBuilder::ipv4(from.octets(), to.octets(), 64).udp(40000, 9);
    let payload = [0u8; PAYLOAD];
    let mut packet = PLAIN_VNET_HDR.to_vec();
    // Writing into a Vec cannot fail.
    let _ = builder.write(&mut packet, &payload);
    packet
}

async fn send_at_rate(
    lan: Arc<tokio::net::UnixDatagram>,
    packet: Vec<u8>,
    rate_kbps: u64,
    stop: CancellationToken,
) {
    let bytes_per_tick = (rate_kbps * 1000 / 8) as f64 * SEND_TICK.as_secs_f64();
    let ip_len = (packet.len() - VNET_HDR_LEN) as f64;
    let mut tick = tokio::time::interval(SEND_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut credit = 0.0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = stop.cancelled() => return,
        }
        credit += bytes_per_tick;
        while credit >= ip_len {
            credit -= ip_len;
            // A full pair drops the packet, as a LAN's full queue would.
            let _ = lan.try_send(&packet);
        }
    }
}

async fn count_arrivals(
    lan: Arc<tokio::net::UnixDatagram>,
    received: Arc<AtomicU64>,
    shutdown: CancellationToken,
) {
    let mut buf = vec![0u8; 65536];
    loop {
        let n = tokio::select! {
            r = lan.recv(&mut buf) => match r {
                Ok(n) => n,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        received.fetch_add(n.saturating_sub(VNET_HDR_LEN) as u64, Ordering::Relaxed);
    }
}

/// Writes the exit's `[[sites]]` for sites `0..count`.
pub fn exit_sites(count: usize) -> String {
    (0..count)
        .map(|i| {
            let (net, len) = site_prefix(i);
            format!(
                "[[sites]]\nid = \"{}\"\nprefixes = [\"{net}/{len}\"]\n",
                site_id(i)
            )
        })
        .collect()
}

/// True if `dir` holds a CA (`ca.pem`, `ca.key`).
pub fn has_ca(dir: &Path) -> bool {
    dir.join("ca.pem").exists() && dir.join("ca.key").exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_get_distinct_prefixes_up_to_the_most() {
        assert_eq!(site_prefix(0), (Ipv4Addr::new(10, 128, 0, 0), 24));
        assert_eq!(site_prefix(257), (Ipv4Addr::new(10, 129, 1, 0), 24));
        assert_eq!(
            site_prefix(MAX_SITES - 1),
            (Ipv4Addr::new(10, 255, 255, 0), 24)
        );
        assert_eq!(site_host(3), Ipv4Addr::new(10, 128, 3, 1));
    }

    #[test]
    fn a_generated_packet_is_a_udp_packet_between_the_sites() {
        let packet = udp_packet(site_host(1), site_host(2));
        let ip = etherparse::SlicedPacket::from_ip(&packet[VNET_HDR_LEN..]).unwrap();
        let Some(etherparse::NetSlice::Ipv4(v4)) = ip.net else {
            panic!("not IPv4");
        };
        assert_eq!(v4.header().source_addr(), site_host(1));
        assert_eq!(v4.header().destination_addr(), site_host(2));
        assert_eq!(packet.len() - VNET_HDR_LEN, 20 + 8 + PAYLOAD);
    }

    #[test]
    fn the_exit_sites_parse_as_an_exit_configuration() {
        let dir = std::env::temp_dir().join(format!("braid-loadgen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        crate::cert::init_ca(&dir).unwrap();
        crate::cert::issue(&dir, "exit").unwrap();
        let toml = format!(
            "role = \"exit\"\n[tun]\n[tls]\nca = \"ca.pem\"\ncert = \"exit.pem\"\nkey = \"exit.key\"\n\
             [listen]\naddress = \"0.0.0.0:4433\"\n{}",
            exit_sites(300)
        );
        let config = Config::parse(&toml, &dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let RoleConfig::Exit(exit) = config.unwrap().role else {
            panic!("not an exit");
        };
        assert_eq!(exit.sites.len(), 300);
        assert_eq!(exit.sites[299].id, "load-299");
    }
}

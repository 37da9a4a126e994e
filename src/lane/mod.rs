//! Lanes: one QUIC connection per uplink and colour, with mutual TLS against the
//! deployment CA, a hello on a stream, and IP packets as QUIC DATAGRAM frames.
//!
//! `client.rs` dials the exit over each uplink of an entry and keeps the lane up;
//! `server.rs` accepts and authenticates lanes at the exit. Both hand a ready
//! [`NewLane`] to the driver, which owns the data path.

pub mod cc;
pub mod client;
pub mod dscp;
pub mod exits;
pub mod io;
pub mod links;
pub mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use socket2::{Domain, Protocol, Socket, Type};

use crate::config::{UDP_PAYLOAD_V4, UDP_PAYLOAD_V6};
use crate::core::engine::{PEER_ACK_DELAY, QUIET_KEEP_ALIVE, Role, UplinkPolicy};
use crate::core::lane::Colour;
use crate::core::stats::DropReason;
use crate::core::wire::MAX_MESSAGE_LEN;
use dscp::{DscpSocket, Marking};

/// A lane that hears nothing for this long is down; a restarted exit closes the
/// lanes of the exit before it sooner, at their first packet ([`StatelessKeys`]).
const IDLE_TIMEOUT: Duration = Duration::from_secs(3);
/// quinn's own datagram queue: small, so that queueing happens in braid where it is
/// measured (the lane's `fill`) and dropped deliberately.
const QUINN_DATAGRAM_SEND_BUFFER: usize = 64 * 1024;
/// Received datagrams waiting for the driver.
const QUINN_DATAGRAM_RECEIVE_BUFFER: usize = 4 * 1024 * 1024;
/// Kernel socket buffers of a lane's UDP socket.
const SOCKET_BUFFER: usize = 4 * 1024 * 1024;
/// How long a peer may take for the handshake and hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// A lane that completed its handshake and hello.
pub struct NewLane {
    pub conn: quinn::Connection,
    pub site: String,
    pub uplink: String,
    pub colour: Colour,
    /// The uplink's position in the entry's configuration.
    pub rank: u32,
    /// The uplink's tier and quality limits (`uplinks[]`, or the lane's hello).
    pub policy: UplinkPolicy,
    /// The uplink's rate in this gateway's sending direction, when known (kbit/s).
    pub rate_kbps: Option<u64>,
    /// What the lane's congestion controller knows of the uplink.
    pub path: Arc<cc::KnownUplink>,
    /// An entry's lane: whether it counts for its exit (`exits`), which the driver
    /// updates as the data path takes it out of service and back.
    pub standing: Option<Arc<exits::LaneStanding>>,
}

/// What the lane tasks tell the driver.
pub enum LaneEvent {
    Up(NewLane),
    /// A peer was refused before it became a lane.
    Refused {
        reason: DropReason,
        detail: String,
    },
}

/// QUIC transport settings of every lane. The path is assumed to carry 1500-byte IP
/// packets, so the MTU is fixed at that size from the first packet: quinn's black-hole
/// detection would otherwise fall back to 1200 bytes under heavy loss and refuse
/// full-size datagrams for a minute (docs/architecture.md). `uplink` is what the configuration
/// says of the lane's uplink: the rate its congestion window starts at once known, and
/// the delay variation its delay cap allows. `role` is this end's: the entry's lanes
/// send QUIC's own keep-alive every [`QUIET_KEEP_ALIVE`] (what keeps a quiet site's
/// lanes open; an active site's lanes send braid's, more often), the exit's none
/// (`core/engine/quiet.rs`); and the entry asks the exit to acknowledge each of its
/// packets at once (below).
pub fn transport_config(
    v6_path: bool,
    uplink: Arc<cc::KnownUplink>,
    role: Role,
) -> quinn::TransportConfig {
    let keep_alive = (role == Role::Entry).then_some(QUIET_KEEP_ALIVE);
    let udp_payload = if v6_path {
        UDP_PAYLOAD_V6
    } else {
        UDP_PAYLOAD_V4
    } as u16;
    let mut t = quinn::TransportConfig::default();
    let mut mtud = quinn::MtuDiscoveryConfig::default();
    mtud.upper_bound(udp_payload);
    t.initial_mtu(udp_payload)
        .min_mtu(udp_payload)
        .mtu_discovery_config(Some(mtud))
        .keep_alive_interval(keep_alive)
        .max_idle_timeout(quinn::IdleTimeout::try_from(IDLE_TIMEOUT).ok())
        .datagram_send_buffer_size(QUINN_DATAGRAM_SEND_BUFFER)
        .datagram_receive_buffer_size(Some(QUINN_DATAGRAM_RECEIVE_BUFFER))
        // Lanes carry datagrams; their one stream is the hello. A peer can open one
        // stream at a time and make the other end hold at most a message per stream
        // (an authenticated site must not be able to fill the exit's memory with
        // stream data nobody reads).
        .max_concurrent_uni_streams(0u8.into())
        .max_concurrent_bidi_streams(1u8.into())
        .stream_receive_window(quinn::VarInt::from_u32(MAX_MESSAGE_LEN as u32))
        .receive_window(quinn::VarInt::from_u32(2 * MAX_MESSAGE_LEN as u32))
        .congestion_controller_factory(Arc::new(cc::LaneControllerFactory { uplink }));
    // Quick acknowledgements even when little flows, so that a path that died shows
    // within a few round trips (`EXCHANGES_TO_STALL` in `core/engine/liveness.rs`).
    // The entry asks the exit to acknowledge each of its packets at once: an exit
    // serving a thousand quiet sites answers six thousand keep-alives a second, and
    // each one's acknowledgement held for the delay woke the lane's task a second
    // time (idle CPU at 1,000 sites 17.8-20.5 % of a core, 15.0-16.2 at once;
    // docs/benchmarks.md). Uploads, which the exit now acknowledges packet by
    // packet, measured the same goodput and CPU per GB (the same page).
    let mut acks = quinn::AckFrequencyConfig::default();
    acks.max_ack_delay(Some(PEER_ACK_DELAY));
    if role == Role::Entry {
        acks.ack_eliciting_threshold(0u8.into());
    }
    t.ack_frequency_config(Some(acks));
    t
}

/// A UDP socket for a lane endpoint, bound to `bind` and, if given, to an interface.
pub fn udp_socket(bind: SocketAddr, device: Option<&str>) -> anyhow::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(bind), Type::DGRAM, Some(Protocol::UDP))
        .context("creating a UDP socket")?;
    if bind.is_ipv6() {
        // A listener on [::] also serves IPv4 peers.
        socket
            .set_only_v6(false)
            .context("allowing IPv4 on an IPv6 socket")?;
    }
    if let Some(dev) = device {
        socket
            .bind_device(Some(dev.as_bytes()))
            .with_context(|| format!("binding to interface {dev}"))?;
    }
    // Larger buffers absorb bursts; failing to get them is not fatal.
    let _ = socket.set_recv_buffer_size(SOCKET_BUFFER);
    let _ = socket.set_send_buffer_size(SOCKET_BUFFER);
    socket
        .bind(&bind.into())
        .with_context(|| format!("binding UDP {bind}"))?;
    Ok(socket.into())
}

/// The keys of an exit's connection IDs and stateless resets, derived from its TLS
/// key (HKDF) so that they are the same after a restart. A restarted exit then
/// recognises its own connection IDs in the packets of lanes it no longer knows and
/// answers each with a reset the entry can check, and the entry redials at once,
/// instead of at QUIC's idle timeout (a crashed exit sends no CONNECTION_CLOSE).
/// Exits sharing a floating address and a TLS key reset each other's lanes the
/// same way.
#[derive(Clone)]
pub struct StatelessKeys {
    reset: Arc<ring::hmac::Key>,
    connection_ids: u64,
}

impl StatelessKeys {
    pub fn from_tls_key(tls_key: &rustls_pki_types::PrivateKeyDer<'_>) -> StatelessKeys {
        use ring::hmac::{HMAC_SHA256, Key, sign};
        let salt = Key::new(HMAC_SHA256, b"braid stateless keys");
        let secret = Key::new(HMAC_SHA256, sign(&salt, tls_key.secret_der()).as_ref());
        let reset = sign(&secret, b"stateless reset\x01");
        let ids = sign(&secret, b"connection ids\x01");
        let mut id_key = [0u8; 8];
        id_key.copy_from_slice(&ids.as_ref()[..8]);
        StatelessKeys {
            reset: Arc::new(Key::new(HMAC_SHA256, reset.as_ref())),
            connection_ids: u64::from_le_bytes(id_key),
        }
    }
}

/// A server's side of [`endpoint`]: what it accepts, and the keys that outlive it.
struct Serving {
    config: quinn::ServerConfig,
    keys: StatelessKeys,
}

/// The endpoint configuration shared by both roles; its datagrams carry the DSCP
/// `marking` gives them.
fn endpoint(
    socket: std::net::UdpSocket,
    serving: Option<Serving>,
    marking: Arc<Marking>,
) -> anyhow::Result<quinn::Endpoint> {
    let socket = DscpSocket::new(socket, marking).context("setting up the UDP socket")?;
    let mut config = quinn::EndpointConfig::default();
    let server = serving.map(|s| {
        config.reset_key(s.keys.reset);
        let ids = s.keys.connection_ids;
        config.cid_generator(move || {
            Box::new(quinn_proto::HashedConnectionIdGenerator::from_key(ids))
        });
        s.config
    });
    if server.is_none() {
        // An entry's endpoint carries exactly one lane, so quinn can tell its packets
        // by the exit's address alone: an empty connection ID saves 8 bytes in every
        // packet towards the entry (0.5 % of a download's uplink capacity).
        config.cid_generator(|| Box::new(quinn_proto::RandomConnectionIdGenerator::new(0)));
    }
    quinn::Endpoint::new_with_abstract_socket(
        config,
        server,
        Arc::new(socket),
        Arc::new(quinn::TokioRuntime),
    )
    .context("creating the QUIC endpoint")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cert::{TlsConfig, TlsMaterial, init_ca, issue};

    fn material(dir: &std::path::Path, name: &str) -> TlsMaterial {
        let (cert, key) = issue(dir, name).expect("issue");
        let ca = dir.join("ca.pem");
        TlsMaterial::load(&TlsConfig { ca, cert, key }).expect("load")
    }

    fn loopback() -> SocketAddr {
        "127.0.0.1:0".parse().expect("address")
    }

    /// An exit's endpoint on loopback, admitting site1, presenting `exit`'s certificate
    /// and resetting with its key.
    fn exit_endpoint(exit: &TlsMaterial) -> quinn::Endpoint {
        let admission =
            server::Admission::new(["site1".to_string()].into(), exit).expect("admission");
        let serving = Serving {
            config: admission.quic_config(false, cc::KnownUplink::new(None, None)),
            keys: StatelessKeys::from_tls_key(&exit.key),
        };
        let socket = udp_socket(loopback(), None).expect("socket");
        endpoint(socket, Some(serving), Arc::new(Marking::Fixed(0))).expect("server endpoint")
    }

    /// An entry's lane to `exit_at`, without the exit's side of the handshake.
    fn dial(site: &TlsMaterial, exit_at: SocketAddr) -> quinn::Connecting {
        let socket = udp_socket(loopback(), None).expect("socket");
        let client = endpoint(socket, None, Arc::new(Marking::Fixed(0))).expect("client");
        let config = client::quic_config(
            client::tls_config(site).expect("client TLS"),
            false,
            cc::KnownUplink::new(None, None),
        )
        .expect("client QUIC config");
        client
            .connect_with(config, exit_at, "exit")
            .expect("connect")
    }

    async fn accept(exit: &quinn::Endpoint) -> quinn::Connection {
        let incoming = exit.accept().await.expect("incoming");
        incoming.await.expect("accepted")
    }

    fn test_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("braid-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        init_ca(&dir).expect("init");
        dir
    }

    #[tokio::test]
    async fn datagrams_towards_the_entry_carry_no_connection_id() {
        let dir = test_dir("cid");
        let (exit, site) = (material(&dir, "exit"), material(&dir, "site1"));
        let server = exit_endpoint(&exit);
        let connecting = dial(&site, server.local_addr().expect("bound"));
        let (to_exit, to_entry) = tokio::join!(connecting, accept(&server));
        let to_exit = to_exit.expect("handshake");
        let room = |c: &quinn::Connection| c.max_datagram_size().expect("datagrams");
        // The exit's packets name no connection: they have the 8 bytes of the entry's
        // packets, which name the exit's, for payload.
        assert_eq!(room(&to_entry), room(&to_exit) + 8);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Relays UDP between the first who sends to its address (the entry) and the exit
    /// at `exit_at`, which the caller may move (an exit restarted on the same address).
    fn relay(exit_at: Arc<std::sync::Mutex<SocketAddr>>) -> SocketAddr {
        let socket = std::net::UdpSocket::bind(loopback()).expect("relay socket");
        let address = socket.local_addr().expect("relay address");
        std::thread::spawn(move || {
            let mut entry = None;
            let mut buf = [0u8; 2048];
            while let Ok((n, from)) = socket.recv_from(&mut buf) {
                let entry = *entry.get_or_insert(from);
                let to = if from == entry {
                    *exit_at.lock().expect("exit address")
                } else {
                    entry
                };
                let _ = socket.send_to(&buf[..n], to);
            }
        });
        address
    }

    /// How a lane of `site` to `exit` ends when the exit dies without a word and
    /// another starts on the same address with `restarted`'s key: how the entry's
    /// connection closed within a second of its next datagram, if it did.
    async fn after_a_crash(
        site: &TlsMaterial,
        exit: &TlsMaterial,
        restarted: &TlsMaterial,
    ) -> Option<quinn::ConnectionError> {
        let before = exit_endpoint(exit);
        let exit_at = Arc::new(std::sync::Mutex::new(before.local_addr().expect("bound")));
        let through = relay(exit_at.clone());
        let (lane, _held) = tokio::join!(dial(site, through), accept(&before));
        let lane = lane.expect("handshake");
        // The exit before keeps its connection (it sends nothing more: crashed); the
        // lane's packets reach the exit started after it.
        let after = exit_endpoint(restarted);
        *exit_at.lock().expect("exit address") = after.local_addr().expect("bound");
        lane.send_datagram(bytes::Bytes::from_static(&[0; 200]))
            .expect("datagram");
        tokio::time::timeout(Duration::from_secs(1), lane.closed())
            .await
            .ok()
    }

    #[tokio::test]
    async fn an_exit_restarted_with_its_key_resets_the_lanes_of_the_exit_before_it() {
        let dir = test_dir("reset");
        let (site, exit) = (material(&dir, "site1"), material(&dir, "exit"));
        let closed = after_a_crash(&site, &exit, &exit).await;
        assert!(
            matches!(closed, Some(quinn::ConnectionError::Reset)),
            "the lane was not reset: {closed:?}"
        );
        // An exit of another key cannot: the lane lives on until its idle timeout.
        let other = material(&dir, "another-exit");
        assert!(after_a_crash(&site, &exit, &other).await.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

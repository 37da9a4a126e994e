//! The exit's side of lanes: accept QUIC connections on one UDP port, require a
//! certificate from the deployment CA, read the hello, check that the site it names
//! is the certificate's and is configured, answer, and hand the lane to the driver.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::CertificateDer;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

use super::cc::KnownUplink;
use super::dscp::{ColourDscp, Marking};
use super::{
    HELLO_TIMEOUT, LaneEvent, NewLane, Serving, StatelessKeys, endpoint, transport_config,
    udp_socket,
};
use crate::cert::{TlsMaterial, certificate_name};
use crate::clock::Clock;
use crate::core::cutoff::QualityLimits;
use crate::core::engine::{Role, UplinkPolicy};
use crate::core::handshake_limit::{HANDSHAKE_BURST, HANDSHAKES_PER_SECOND, HandshakeLimit};
use crate::core::stats::DropReason;
use crate::core::wire::{ALPN, Hello, HelloReply, MAX_MESSAGE_LEN};

/// Whom the exit admits and with what: the sites it serves and the QUIC server
/// configuration built from its TLS material. A reload replaces it whole; lanes
/// already up are not affected by a new one.
pub struct Admission {
    sites: HashSet<String>,
    /// Each connection gets its own transport settings from it ([`Admission::quic_config`]).
    config: quinn::ServerConfig,
    /// The endpoint's, from the exit's TLS key when it binds.
    keys: StatelessKeys,
}

impl Admission {
    /// Admits `sites` with certificates of `material`'s CA, presenting its certificate.
    pub fn new(sites: HashSet<String>, material: &TlsMaterial) -> anyhow::Result<Admission> {
        let crypto = Arc::new(
            quinn::crypto::rustls::QuicServerConfig::try_from(tls_config(material)?)
                .context("TLS configuration unusable for QUIC")?,
        );
        Ok(Admission {
            sites,
            config: quinn::ServerConfig::with_crypto(crypto),
            keys: StatelessKeys::from_tls_key(&material.key),
        })
    }

    /// The QUIC configuration for a peer over an IPv6 path (`v6_path`) or an IPv4 one
    /// (the path MTU differs: 1452 vs 1472 bytes of UDP payload, and an exit on `[::]`
    /// serves both), whose lane's congestion window follows what its hello says of the
    /// uplink (`uplink`).
    pub fn quic_config(&self, v6_path: bool, uplink: Arc<KnownUplink>) -> quinn::ServerConfig {
        let mut config = self.config.clone();
        config.transport_config(Arc::new(transport_config(v6_path, uplink, Role::Exit)));
        config
    }
}

/// The exit's QUIC endpoint and its admission, which reloads may replace.
pub struct Listener {
    endpoint: quinn::Endpoint,
    admission: watch::Receiver<Arc<Admission>>,
    /// The DSCP of each peer's datagrams, set once its hello names its colour.
    marking: Arc<Marking>,
    dscp: ColourDscp,
}

/// Binds the exit's UDP port; lanes' datagrams carry their colour's DSCP in `dscp`.
pub fn bind(
    listen: SocketAddr,
    admission: watch::Receiver<Arc<Admission>>,
    dscp: ColourDscp,
) -> anyhow::Result<Listener> {
    let serving = {
        let admission = admission.borrow();
        Serving {
            config: admission.quic_config(listen.is_ipv6(), KnownUplink::new(None, None)),
            keys: admission.keys.clone(),
        }
    };
    // Handshakes and hellos, before a peer's colour is known, go out blue.
    let marking = Arc::new(Marking::per_peer(dscp.blue));
    let endpoint = endpoint(udp_socket(listen, None)?, Some(serving), marking.clone())?;
    Ok(Listener {
        endpoint,
        admission,
        marking,
        dscp,
    })
}

/// Handshakes (TLS and hello) in progress at once: a flood of connection attempts is
/// refused beyond it instead of growing tasks and memory without bound. Each takes at
/// most [`HELLO_TIMEOUT`], so honest peers get a slot within that time.
pub const MAX_HANDSHAKES: usize = 256;

/// Accepts lanes until `shutdown`; handshakes still running then are ended.
pub async fn run(listener: Listener, events: mpsc::Sender<LaneEvent>, shutdown: CancellationToken) {
    let endpoint = &listener.endpoint;
    let mut handshakes = tokio::task::JoinSet::new();
    // One task per admitted lane, until its connection closes: it ends the lane's
    // DSCP marking.
    let markings = TaskTracker::new();
    let clock = Clock::new();
    let mut rate = HandshakeLimit::new(HANDSHAKES_PER_SECOND, HANDSHAKE_BURST, clock.now());
    loop {
        let incoming = tokio::select! {
            i = endpoint.accept() => i,
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => continue,
            () = shutdown.cancelled() => break,
        };
        let Some(incoming) = incoming else { break };
        let peer = incoming.remote_address();
        let busy = if handshakes.len() >= MAX_HANDSHAKES {
            Some(format!("{MAX_HANDSHAKES} handshakes already in progress"))
        } else if !rate.admit(clock.now()) {
            Some(format!(
                "more than {HANDSHAKES_PER_SECOND} handshakes a second"
            ))
        } else {
            None
        };
        if let Some(why) = busy {
            incoming.refuse();
            // Counted if the driver keeps up; under a flood, dropping the count beats
            // stalling the accept loop.
            let _ = events.try_send(LaneEvent::Refused {
                reason: DropReason::Unauthenticated,
                detail: format!("{peer}: {why}"),
            });
            continue;
        }
        let admission = listener.admission.borrow().clone();
        let events = events.clone();
        let v4_peer = match peer.ip() {
            IpAddr::V4(_) => true,
            IpAddr::V6(a) => a.to_ipv4_mapped().is_some(),
        };
        // The lane's uplink is known once its hello is read, after the handshake.
        let uplink = KnownUplink::new(None, None);
        let config = admission.quic_config(!v4_peer, uplink.clone());
        let connecting = incoming.accept_with(Arc::new(config));
        let (marking, dscp) = (listener.marking.clone(), listener.dscp);
        let markings = markings.clone();
        handshakes.spawn(async move {
            let event = match admit(connecting, &admission.sites, &uplink).await {
                Ok(Admitted::Watch(conn)) => {
                    // Held until the entry hangs up or its keep-alives stop; no
                    // handshake slot, no lane.
                    debug!(%peer, "watch connection up");
                    markings.spawn(async move { conn.closed().await });
                    return;
                }
                Ok(Admitted::Lane(lane)) => {
                    let conn = lane.conn.clone();
                    marking.mark(
                        conn.remote_address(),
                        dscp.of(lane.colour),
                        conn.stable_id(),
                    );
                    markings.spawn(unmark_when_closed(marking, conn));
                    LaneEvent::Up(lane)
                }
                Err((reason, e)) => {
                    debug!(%peer, error = format!("{e:#}"), "lane refused");
                    LaneEvent::Refused {
                        reason,
                        detail: format!("{peer}: {e:#}"),
                    }
                }
            };
            let _ = events.send(event).await;
        });
    }
    handshakes.shutdown().await;
    endpoint.close(0u32.into(), b"shutdown");
    // Closing the endpoint closes every lane, which ends their markings.
    markings.close();
    markings.wait().await;
}

/// The lane's datagrams, marked since it was admitted, are no longer once its
/// connection closes.
async fn unmark_when_closed(marking: Arc<Marking>, conn: quinn::Connection) {
    let (peer, id) = (conn.remote_address(), conn.stable_id());
    conn.closed().await;
    marking.unmark(peer, id);
}

/// What a peer's hello admitted.
enum Admitted {
    Lane(NewLane),
    /// An entry's watch connection (`core::exit_choice`): it only learns that this
    /// exit answers.
    Watch(quinn::Connection),
}

/// Handshake and hello of one peer; the hello says the rate of its uplink towards the
/// site, if known, which the lane's congestion window then starts at, and how much the
/// uplink's delay varies, if declared.
async fn admit(
    connecting: Result<quinn::Connecting, quinn::ConnectionError>,
    sites: &HashSet<String>,
    uplink: &Arc<KnownUplink>,
) -> Result<Admitted, (DropReason, anyhow::Error)> {
    let refused = |e: anyhow::Error| (DropReason::Unauthenticated, e);
    let connecting = connecting
        .context("accepting the connection")
        .map_err(refused)?;
    let conn = tokio::time::timeout(HELLO_TIMEOUT, connecting)
        .await
        .map_err(|_| refused(anyhow!("no handshake within {HELLO_TIMEOUT:?}")))?
        .context("TLS handshake")
        .map_err(refused)?;
    let result = async {
        let cert_name = peer_name(&conn)?;
        let (mut send, mut recv) = conn.accept_bi().await.context("waiting for the hello")?;
        let buf = recv
            .read_to_end(MAX_MESSAGE_LEN)
            .await
            .context("reading the hello")?;
        let verdict = Hello::decode(&buf)
            .context("bad hello")
            .and_then(|hello| check_site(hello, &cert_name, sites));
        let reply = match &verdict {
            Ok(_) => HelloReply::Accepted,
            Err(e) => HelloReply::Refused {
                reason: format!("{e:#}"),
            },
        };
        send.write_all(&reply.encode())
            .await
            .context("answering the hello")?;
        send.finish().context("answering the hello")?;
        verdict
    };
    match tokio::time::timeout(HELLO_TIMEOUT, result).await {
        Ok(Ok(hello)) if hello.watch => Ok(Admitted::Watch(conn)),
        Ok(Ok(hello)) => {
            uplink.set(hello.down_kbps, hello.delay_variation_ms);
            Ok(Admitted::Lane(NewLane {
                conn,
                site: hello.site,
                uplink: hello.uplink,
                colour: hello.colour,
                rank: hello.rank,
                policy: UplinkPolicy {
                    priority: hello.priority,
                    overflow: hello.overflow,
                    quality: QualityLimits {
                        max_rtt: hello.max_rtt_ms.map(Duration::from_millis),
                        max_loss_bp: hello.max_loss_bp,
                        cut_off: hello.cut_off,
                    },
                },
                rate_kbps: hello.down_kbps,
                path: uplink.clone(),
                standing: None,
            }))
        }
        Ok(Err(e)) => {
            // Let the refusal reach the peer before closing.
            let _ = tokio::time::timeout(HELLO_TIMEOUT, conn.closed()).await;
            conn.close(1u32.into(), b"refused");
            Err(refused(e))
        }
        Err(_) => {
            conn.close(1u32.into(), b"hello timeout");
            Err(refused(anyhow!("no hello within {HELLO_TIMEOUT:?}")))
        }
    }
}

fn check_site(hello: Hello, cert_name: &str, sites: &HashSet<String>) -> anyhow::Result<Hello> {
    if hello.site != cert_name {
        bail!(
            "site {:?} in the hello is not the certificate's {cert_name:?}",
            hello.site
        );
    }
    if !sites.contains(&hello.site) {
        bail!("site {:?} is not served by this exit", hello.site);
    }
    Ok(hello)
}

fn peer_name(conn: &quinn::Connection) -> anyhow::Result<String> {
    let certs = conn
        .peer_identity()
        .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
        .context("the peer presented no certificate")?;
    let leaf = certs.first().context("the peer presented an empty chain")?;
    certificate_name(leaf)
}

/// The exit's TLS server configuration: present the exit's certificate, require a
/// client certificate issued by the deployment CA.
pub fn tls_config(material: &TlsMaterial) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        WebPkiClientVerifier::builder_with_provider(material.roots.clone(), provider.clone())
            .build()
            .context("client certificate verifier")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with ring")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(material.chain.clone(), material.key.clone_key())
        .context("the exit certificate and key do not match")?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.max_early_data_size = 0;
    Ok(Arc::new(config))
}

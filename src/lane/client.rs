//! The entry's side of lanes: per uplink and colour (a green and a blue lane each),
//! dial the exit from that uplink's interface, authenticate, say hello, hand the lane
//! to the driver, and redial with backoff when it drops.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info, info_span, warn};

use super::cc::KnownUplink;
use super::dscp::{ColourDscp, Marking};
use super::exits::{self, ExitFollow, LaneStanding};
use super::links::{LinkView, LinkWatch};
use super::{HELLO_TIMEOUT, LaneEvent, NewLane, endpoint, transport_config, udp_socket};
use crate::cert::TlsMaterial;
use crate::clock::Clock;
use crate::config::{EntryConfig, ExitPeer, UplinkConfig};
use crate::control::metrics::Metrics;
use crate::core::engine::Role;
use crate::core::lane::Colour;
use crate::core::redial::Redial;
use crate::core::wire::{ALPN, Hello, HelloReply, MAX_MESSAGE_LEN, PROTOCOL_VERSION};

/// The entry's dialers, one per configured uplink, started and stopped as the
/// configuration says (at start and at every reload).
pub struct Dialers {
    /// The TLS configuration every dialer's next handshake uses (reloads renew it).
    tls: watch::Sender<Arc<rustls::ClientConfig>>,
    /// The outer DSCP of each colour's lanes.
    dscp: ColourDscp,
    events: mpsc::Sender<LaneEvent>,
    clock: Clock,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// The exits, in order of preference, as last configured.
    exits: Vec<ExitPeer>,
    /// The choice among them every dialer follows, and the token that stops it.
    choice: Option<(ExitFollow, CancellationToken)>,
    /// One blue dialer per uplink, that the choice opens watch connections with.
    watchers: watch::Sender<Vec<Dialer>>,
    /// The uplinks dialed now, each with the token that stops its dialer.
    running: Vec<(UplinkConfig, CancellationToken)>,
    /// The uplinks the data path wants hung up.
    held: DialDemand,
    /// Every uplink ever configured, by name.
    configured: BTreeSet<String>,
    /// The uplinks' interfaces as the kernel reports them.
    links: LinkWatch,
    /// Where the choice of exit is shown (none: nowhere).
    metrics: Option<Arc<Metrics>>,
}

/// Which uplinks the data path wants hung up, by name: cold ones (`standby =
/// "cold"`) until their tier is wanted, and those at their data cap. Set by the
/// driver as the engine decides, followed by every dialer.
#[derive(Clone)]
pub struct DialDemand(Arc<watch::Sender<BTreeSet<String>>>);

impl Default for DialDemand {
    fn default() -> DialDemand {
        DialDemand(Arc::new(watch::Sender::new(BTreeSet::new())))
    }
}

impl DialDemand {
    /// Wants `uplink` dialled (`dial`) or hung up.
    pub fn set(&self, uplink: &str, dial: bool) {
        self.0.send_if_modified(|held| {
            if dial {
                held.remove(uplink)
            } else {
                held.insert(uplink.to_string())
            }
        });
    }
}

impl Dialers {
    /// Dialers that run on `tracker` until `shutdown`.
    pub fn new(
        tls: Arc<rustls::ClientConfig>,
        dscp: ColourDscp,
        events: mpsc::Sender<LaneEvent>,
        clock: Clock,
        shutdown: CancellationToken,
        tracker: TaskTracker,
    ) -> Dialers {
        let links = LinkWatch::default();
        tracker.spawn(links.clone().run(shutdown.clone()));
        Dialers {
            tls: watch::Sender::new(tls),
            dscp,
            events,
            clock,
            shutdown,
            tracker,
            exits: Vec::new(),
            choice: None,
            watchers: watch::Sender::new(Vec::new()),
            running: Vec::new(),
            held: DialDemand::default(),
            configured: BTreeSet::new(),
            links,
            metrics: None,
        }
    }

    /// Shows the exit the lanes go to in `metrics` from the next [`Dialers::apply`].
    pub fn show_exits_in(&mut self, metrics: Arc<Metrics>) {
        self.metrics = Some(metrics);
    }

    /// Dials exactly `entry`'s uplinks: the dialer of an uplink that is gone or
    /// changed stops (its lane closes), one starts for each new or changed uplink;
    /// all start anew, at the first exit, when the exits changed.
    pub fn apply(&mut self, entry: &EntryConfig) {
        let exits_changed = self.exits != entry.exits;
        self.exits = entry.exits.clone();
        // Watch connections go over the uplinks configured now.
        let watchers = (0..entry.uplinks.len())
            .map(|rank| {
                let mut d = self.dialer(entry, rank, Colour::Blue);
                d.watch = true;
                d
            })
            .collect();
        self.watchers.send_replace(watchers);
        if exits_changed || self.choice.is_none() {
            if let Some((_, stop)) = self.choice.take() {
                stop.cancel();
            }
            let stop = self.shutdown.child_token();
            let follow = exits::start(
                &entry.exits,
                self.watchers.subscribe(),
                self.metrics.clone(),
                self.clock,
                stop.clone(),
                &self.tracker,
            );
            self.choice = Some((follow, stop));
        }
        self.running.retain(|(uplink, stop)| {
            let keep = !exits_changed && entry.uplinks.contains(uplink);
            if !keep {
                info!(uplink = %uplink.name, "uplink removed or changed, or a new exit: closing its lane");
                stop.cancel();
            }
            keep
        });
        for (rank, uplink) in entry.uplinks.iter().enumerate() {
            if self.running.iter().any(|(running, _)| running == uplink) {
                continue;
            }
            // A new cold one waits until the data path wants it; one dialled anew
            // (its configuration changed) keeps what the data path last wanted.
            if uplink.cold && self.configured.insert(uplink.name.clone()) {
                self.held.set(&uplink.name, false);
            }
            self.configured.insert(uplink.name.clone());
            // A green and a blue lane per uplink (SPEC §1), stopped together.
            let stop = self.shutdown.child_token();
            for colour in Colour::ALL {
                let mut dialer = self.dialer(entry, rank, colour);
                dialer.exit = self.choice.as_ref().map(|(follow, _)| follow.clone());
                self.tracker
                    .spawn(dialer.run(self.events.clone(), self.clock, stop.clone()));
            }
            self.running.push((uplink.clone(), stop));
        }
    }

    /// The dialer of `entry.uplinks[rank]`'s lane of `colour`, following its
    /// interface and what the data path wants dialled.
    fn dialer(&self, entry: &EntryConfig, rank: usize, colour: Colour) -> Dialer {
        let uplink = &entry.uplinks[rank];
        let dscp = self.dscp.of(colour);
        let mut dialer = Dialer::new(entry, rank as u32, colour, dscp, self.tls.subscribe());
        dialer.held = Some(self.held.0.subscribe());
        dialer.link = Some(self.links.subscribe(&uplink.interface));
        dialer
    }

    /// What the driver sets as the data path wants uplinks dialled or hung up.
    pub fn dial_demand(&self) -> DialDemand {
        self.held.clone()
    }

    /// Every lane's next handshake uses `tls` (new certificate files); lanes up now
    /// stay up.
    pub fn set_tls(&self, tls: Arc<rustls::ClientConfig>) {
        self.tls.send_replace(tls);
    }
}

/// Everything one uplink's dialer needs.
#[derive(Clone)]
pub struct Dialer {
    pub site: String,
    /// Where each exit is over this uplink, in order of preference.
    pub exits: Vec<ExitTarget>,
    /// Which of them to dial, followed as it changes (none: the first).
    pub exit: Option<ExitFollow>,
    /// Whether it opens a watch connection rather than a lane (`lane::exits`).
    pub watch: bool,
    pub uplink: UplinkConfig,
    /// The uplink's position in the configuration.
    pub rank: u32,
    pub colour: Colour,
    /// The outer DSCP of the lane's datagrams.
    pub dscp: u8,
    /// The TLS configuration of the next handshake.
    pub tls: watch::Receiver<Arc<rustls::ClientConfig>>,
    /// The uplinks the data path wants hung up: this one's lane is up only while
    /// it is not among them (none: always).
    pub held: Option<watch::Receiver<BTreeSet<String>>>,
    /// Its interface as the kernel reports it (none: assumed usable).
    pub link: Option<watch::Receiver<LinkView>>,
}

impl Dialer {
    /// The dialer of `entry.uplinks[rank]`'s lane of `colour`, marked `dscp`.
    pub fn new(
        entry: &EntryConfig,
        rank: u32,
        colour: Colour,
        dscp: u8,
        tls: watch::Receiver<Arc<rustls::ClientConfig>>,
    ) -> Dialer {
        let uplink = &entry.uplinks[rank as usize];
        Dialer {
            site: entry.site.clone(),
            exits: entry
                .exits
                .iter()
                .map(|e| ExitTarget {
                    peer: uplink.peer.clone().unwrap_or_else(|| e.address.clone()),
                    name: e.name.clone(),
                })
                .collect(),
            exit: None,
            watch: false,
            uplink: uplink.clone(),
            rank,
            colour,
            dscp,
            tls,
            held: None,
            link: None,
        }
    }

    /// Its interface as last reported.
    fn link_now(&self) -> LinkView {
        self.link.as_ref().map_or(
            LinkView {
                usable: true,
                renewals: 0,
            },
            |l| *l.borrow(),
        )
    }

    /// Returns once its interface is usable; false at `shutdown`.
    async fn until_link_usable(&mut self, shutdown: &CancellationToken) -> bool {
        let Some(link) = self.link.as_mut() else {
            return true;
        };
        tokio::select! {
            r = link.wait_for(|l| l.usable) => r.is_ok(),
            () = shutdown.cancelled() => false,
        }
    }

    /// Whether it may dial now: its uplink is wanted (not a cold standby or at its
    /// cap) and its interface usable.
    pub(super) fn may_dial(&self) -> bool {
        self.wanted() && self.link_now().usable
    }

    /// Whether the lane is wanted now.
    fn wanted(&self) -> bool {
        self.held
            .as_ref()
            .is_none_or(|h| !h.borrow().contains(&self.uplink.name))
    }

    /// Returns once the lane is wanted; false at `shutdown`.
    async fn until_wanted(&mut self, shutdown: &CancellationToken) -> bool {
        let name = self.uplink.name.clone();
        let Some(held) = self.held.as_mut() else {
            return true;
        };
        tokio::select! {
            r = held.wait_for(|h| !h.contains(&name)) => r.is_ok(),
            () = shutdown.cancelled() => false,
        }
    }

    /// Keeps this uplink's lane up until `shutdown` (a cold one's while wanted).
    pub async fn run(
        mut self,
        events: mpsc::Sender<LaneEvent>,
        clock: Clock,
        shutdown: CancellationToken,
    ) {
        let span = info_span!("lane", uplink = %self.uplink.name, colour = self.colour.as_str());
        async move {
            let mut redial = Redial::new(HELLO_TIMEOUT);
            loop {
                if !self.wanted() {
                    info!("held down (cold standby, or at its data cap): not dialled");
                    if !self.until_wanted(&shutdown).await {
                        return;
                    }
                    info!("wanted again: dialling");
                }
                if !self.link_now().usable {
                    info!(interface = %self.uplink.interface, "interface missing, down or without an address: waiting for it");
                    if !self.until_link_usable(&shutdown).await {
                        return;
                    }
                    settle(&shutdown).await;
                }
                let link = self.link_now();
                let exit = self.exit.as_ref().map_or(0, ExitFollow::chosen);
                let mut follow = self.exit.clone();
                let attempt = tokio::select! {
                    r = self.connect(exit, redial.answer_limit()) => r,
                    () = shutdown.cancelled() => return,
                    // Every lane moves: this attempt is for an exit left behind.
                    () = until_exit_moves(&mut follow, exit) => continue,
                };
                match attempt {
                    Ok((conn, _endpoint, path)) => {
                        info!(peer = %conn.remote_address(), "lane up");
                        redial.connected();
                        let up_since = clock.now();
                        let standing = self.exit.as_ref().map(|f| f.lane_up(exit));
                        let _down = StandingGuard(standing.clone());
                        let lane = NewLane {
                            conn: conn.clone(),
                            standing,
                            site: self.site.clone(),
                            uplink: self.uplink.name.clone(),
                            colour: self.colour,
                            rank: self.rank,
                            policy: self.uplink.policy(),
                            rate_kbps: self.uplink.rate_up_kbps,
                            path,
                        };
                        if events.send(LaneEvent::Up(lane)).await.is_err() {
                            return; // the driver is gone: shutting down
                        }
                        let (mut held, mut link_rx) = (self.held.clone(), self.link.clone());
                        tokio::select! {
                            reason = conn.closed() => warn!(%reason, "lane down"),
                            () = shutdown.cancelled() => {
                                conn.close(0u32.into(), b"shutdown");
                                return;
                            }
                            () = until_unwanted(&mut held, &self.uplink.name) => {
                                info!("no longer wanted: hanging up");
                                conn.close(0u32.into(), b"standby");
                                redial.connected();
                                continue;
                            }
                            () = until_link_changes(&mut link_rx, link) => {
                                info!(interface = %self.uplink.interface, "interface down, gone or readdressed: closing the lane");
                                conn.close(0u32.into(), b"interface changed");
                                redial.connected();
                                settle(&shutdown).await;
                                continue;
                            }
                            () = until_exit_moves(&mut follow, exit) => {
                                info!("every lane moves to another exit: hanging up");
                                conn.close(0u32.into(), b"exit moved");
                                redial.connected();
                                continue;
                            }
                        }
                        redial.lane_down(clock.now().saturating_since(up_since), conn.rtt());
                    }
                    Err(e) => {
                        let failures = redial.failed(exit_answered(&e));
                        // The first failure in a row is worth a warning; repeats of an
                        // uplink that stays down are not.
                        if failures == 1 {
                            warn!(error = format!("{e:#}"), "lane connect failed; retrying");
                        } else {
                            debug!(
                                error = format!("{e:#}"),
                                failures, "lane connect failed again"
                            );
                        }
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(redial.next_wait()) => {}
                    () = shutdown.cancelled() => return,
                    // Back or readdressed: at once, not after the backoff.
                    () = until_link_changes(&mut self.link, link) => settle(&shutdown).await,
                    // Another exit: at once too.
                    () = until_exit_moves(&mut follow, exit) => {}
                }
            }
        }
        .instrument(span)
        .await
    }

    /// One attempt to exit `exit` of the list: resolve, bind to the uplink,
    /// handshake, hello; the name resolved and the exit's first answer each within
    /// `answer_within`.
    pub async fn connect(
        &self,
        exit: usize,
        answer_within: Duration,
    ) -> anyhow::Result<(quinn::Connection, quinn::Endpoint, Arc<KnownUplink>)> {
        let target = self
            .exits
            .get(exit)
            .with_context(|| format!("no exit {exit} in the configuration"))?;
        let peer = tokio::time::timeout(answer_within, self.resolve(&target.peer))
            .await
            .map_err(|_| NoAnswer {
                from: format!("the resolver for {}", target.peer),
                within: answer_within,
            })??;
        let hello = Hello {
            version: PROTOCOL_VERSION,
            site: self.site.clone(),
            uplink: self.uplink.name.clone(),
            colour: self.colour,
            down_kbps: self.uplink.rate_down_kbps,
            rank: self.rank,
            delay_variation_ms: self.uplink.delay_variation_ms,
            priority: self.uplink.priority,
            overflow: self.uplink.overflow,
            max_rtt_ms: self.uplink.max_rtt_ms,
            max_loss_bp: self.uplink.max_loss_bp,
            cut_off: self.uplink.cut_off,
            watch: self.watch,
        };
        let bind = SocketAddr::new(
            self.uplink.source.unwrap_or(if peer.is_ipv6() {
                IpAddr::V6(Ipv6Addr::UNSPECIFIED)
            } else {
                IpAddr::V4(Ipv4Addr::UNSPECIFIED)
            }),
            0,
        );
        // Taken out of the watch before the handshake, which must not hold it.
        let tls = self.tls.borrow().clone();
        let known = KnownUplink::new(self.uplink.rate_up_kbps, self.uplink.delay_variation_ms);
        let config = quic_config(tls, peer.is_ipv6(), known.clone())?;
        let (conn, endpoint) = open_lane(
            bind,
            Some(&self.uplink.interface),
            self.dscp,
            ExitAddress {
                peer,
                name: &target.name,
                answer_within,
            },
            config,
            &hello,
        )
        .await?;
        Ok((conn, endpoint, known))
    }

    async fn resolve(&self, peer: &str) -> anyhow::Result<SocketAddr> {
        let mut addrs = tokio::net::lookup_host(peer)
            .await
            .with_context(|| format!("resolving {peer}"))?;
        let wanted_v6 = self.uplink.source.map(|s| s.is_ipv6());
        addrs
            .find(|a| wanted_v6.is_none_or(|v6| a.is_ipv6() == v6))
            .with_context(|| format!("{peer} has no address of the uplink's family"))
    }
}

/// One exit as a dialer reaches it.
#[derive(Clone)]
pub struct ExitTarget {
    /// `host:port` over the dialer's uplink.
    pub peer: String,
    /// The name its certificate must carry.
    pub name: String,
}

/// Tells the exit choice that a lane is out of service once dropped, however the lane
/// ends.
struct StandingGuard(Option<Arc<LaneStanding>>);

impl Drop for StandingGuard {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            s.set(false);
        }
    }
}

/// Returns once the exit choice moved from `exit` (never without a choice to follow).
async fn until_exit_moves(follow: &mut Option<ExitFollow>, exit: usize) {
    match follow {
        Some(f) => f.until_moved_from(exit).await,
        None => std::future::pending().await,
    }
}

/// How long a dialer waits after its interface came up or changed its address
/// before it dials: whatever brings the interface up (a DHCP client, the network
/// manager) adds its routes a moment later, and an Initial sent before them is lost
/// and resent by quinn only after a second.
pub const LINK_SETTLE: Duration = Duration::from_millis(100);

async fn settle(shutdown: &CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(LINK_SETTLE) => {}
        () = shutdown.cancelled() => {}
    }
}

/// Returns once `uplink` is among the `held` ones (never, without a demand to follow).
async fn until_unwanted(held: &mut Option<watch::Receiver<BTreeSet<String>>>, uplink: &str) {
    match held {
        Some(held) => {
            if held.wait_for(|h| h.contains(uplink)).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Returns once the interface went down or was renewed since `seen` (never without
/// a watch).
async fn until_link_changes(link: &mut Option<watch::Receiver<LinkView>>, seen: LinkView) {
    match link {
        Some(link) => {
            if link.wait_for(|l| *l != seen).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// An attempt's failure: the exit did not answer its first Initial in time, or its
/// name was not resolved in that time.
#[derive(Debug, thiserror::Error)]
#[error("no answer from {from} within {within:?}")]
pub struct NoAnswer {
    from: String,
    within: Duration,
}

/// The context of an attempt's failure once the exit had answered it, if only to
/// close the connection: the exit is there.
#[derive(Debug, thiserror::Error)]
#[error("the exit at {0} answered")]
struct ExitAnswered(SocketAddr);

/// Whether the exit answered an attempt that failed with `e`, if only to refuse it
/// (what [`Redial::failed`] asks). A failure before it (the name not resolved, a
/// socket not bound, no answer in time) is no answer.
pub fn exit_answered(e: &anyhow::Error) -> bool {
    e.downcast_ref::<ExitAnswered>().is_some()
}

/// Whether the exit ended a connection that failed with `e` before its handshake
/// was done: it answered, if only to refuse. The other failures are this end's own.
fn ended_by_exit(e: &quinn::ConnectionError) -> bool {
    use quinn::ConnectionError as E;
    match e {
        E::VersionMismatch
        | E::TransportError(_)
        | E::ConnectionClosed(_)
        | E::ApplicationClosed(_)
        | E::Reset => true,
        E::TimedOut | E::LocallyClosed | E::CidsExhausted => false,
    }
}

/// The exit a lane is opened to.
pub struct ExitAddress<'a> {
    pub peer: SocketAddr,
    /// The name its certificate must carry.
    pub name: &'a str,
    /// How long its answer to the first Initial may take ([`crate::core::redial`]
    /// says why this is short).
    pub answer_within: Duration,
}

/// Opens one lane: a QUIC connection with `config` from `bind` (on `device`, if
/// given) to `exit`, with `dscp` in the outer header of its datagrams, and the hello
/// exchange.
pub async fn open_lane(
    bind: SocketAddr,
    device: Option<&str>,
    dscp: u8,
    exit: ExitAddress<'_>,
    config: quinn::ClientConfig,
    hello: &Hello,
) -> anyhow::Result<(quinn::Connection, quinn::Endpoint)> {
    let ExitAddress {
        peer,
        name,
        answer_within,
    } = exit;
    let socket = udp_socket(bind, device)?;
    let endpoint = endpoint(socket, None, Arc::new(Marking::Fixed(dscp)))?;
    let mut connecting = endpoint
        .connect_with(config, peer, name)
        .with_context(|| format!("connecting to {peer}"))?;
    let first_answer = tokio::time::timeout(answer_within, connecting.handshake_data())
        .await
        .map_err(|_| NoAnswer {
            from: peer.to_string(),
            within: answer_within,
        })?;
    // Only whether it came: the handshake data itself is not `Send`.
    if let Err(e) = first_answer.map(drop) {
        let answered = ended_by_exit(&e);
        let e = anyhow::Error::new(e).context(format!("handshake with {peer}"));
        return Err(if answered {
            e.context(ExitAnswered(peer))
        } else {
            e
        });
    }
    let after_answer = async {
        let conn = tokio::time::timeout(HELLO_TIMEOUT, connecting)
            .await
            .map_err(|_| anyhow!("no handshake with {peer} within {HELLO_TIMEOUT:?}"))?
            .with_context(|| format!("handshake with {peer}"))?;
        let reply = tokio::time::timeout(HELLO_TIMEOUT, say_hello(&conn, hello))
            .await
            .map_err(|_| anyhow!("no answer to the hello within {HELLO_TIMEOUT:?}"))??;
        match reply {
            HelloReply::Accepted => Ok(conn),
            HelloReply::Refused { reason } => bail!("the exit refused the lane: {reason}"),
        }
    };
    let conn = after_answer.await.context(ExitAnswered(peer))?;
    Ok((conn, endpoint))
}

/// A lane's QUIC configuration over an IPv6 path (`v6_path`) or an IPv4 one, for an
/// uplink of what the configuration says (`uplink`).
pub fn quic_config(
    tls: Arc<rustls::ClientConfig>,
    v6_path: bool,
    uplink: Arc<KnownUplink>,
) -> anyhow::Result<quinn::ClientConfig> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .context("TLS configuration unusable for QUIC")?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let transport = transport_config(v6_path, uplink, Role::Entry);
    config.transport_config(Arc::new(transport));
    Ok(config)
}

async fn say_hello(conn: &quinn::Connection, hello: &Hello) -> anyhow::Result<HelloReply> {
    let (mut send, mut recv) = conn.open_bi().await.context("opening the hello stream")?;
    send.write_all(&hello.encode())
        .await
        .context("sending the hello")?;
    send.finish().context("finishing the hello")?;
    let buf = recv
        .read_to_end(MAX_MESSAGE_LEN)
        .await
        .context("reading the exit's answer")?;
    HelloReply::decode(&buf).context("the exit's answer")
}

/// The entry's TLS client configuration: trust only the deployment CA, present the
/// site's certificate.
pub fn tls_config(material: &TlsMaterial) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .context("TLS 1.3 with ring")?
        .with_root_certificates(material.roots.clone())
        .with_client_auth_cert(material.chain.clone(), material.key.clone_key())
        .context("the site certificate and key do not match")?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failure_after_the_exits_answer_counts_as_answered() {
        let peer: SocketAddr = "192.0.2.1:4433".parse().expect("address");
        let no_answer = anyhow::Error::new(NoAnswer {
            from: peer.to_string(),
            within: Duration::from_millis(1500),
        });
        assert!(!exit_answered(&no_answer));
        let unresolved = anyhow!("lookup failed").context("resolving exit.example:4433");
        assert!(!exit_answered(&unresolved), "the exit never heard of it");
        let refused = anyhow!("the exit refused the lane: busy").context(ExitAnswered(peer));
        assert!(exit_answered(&refused));
        assert_eq!(
            format!("{refused:#}"),
            "the exit at 192.0.2.1:4433 answered: the exit refused the lane: busy"
        );
        assert!(ended_by_exit(&quinn::ConnectionError::Reset));
        assert!(!ended_by_exit(&quinn::ConnectionError::TimedOut));
        assert!(!ended_by_exit(&quinn::ConnectionError::LocallyClosed));
    }
}

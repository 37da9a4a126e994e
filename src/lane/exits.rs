//! The entry's choice of exit, run: the rules of `core::exit_choice` fed with every
//! lane's and watch connection's ups and downs, the chosen exit published to every
//! dialer (which all move together), and a watch connection kept to each exit the
//! rules want watched.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info, info_span, warn};

use super::HELLO_TIMEOUT;
use super::client::{self, Dialer};
use crate::clock::Clock;
use crate::config::ExitPeer;
use crate::control::metrics::Metrics;
use crate::core::exit_choice::ExitChoice;
use crate::core::redial::Redial;

/// What a dialer or watcher tells the choice.
#[derive(Debug, Clone, Copy)]
enum Report {
    LaneUp(usize),
    LaneDown(usize),
    Watch { exit: usize, up: bool },
}

/// A dialer's view of the choice: where to dial, and where to report its lane.
#[derive(Clone)]
pub struct ExitFollow {
    chosen: watch::Receiver<usize>,
    reports: mpsc::UnboundedSender<Report>,
}

impl ExitFollow {
    /// The exit to dial now.
    pub fn chosen(&self) -> usize {
        *self.chosen.borrow()
    }

    /// Returns once the choice is another exit than `exit` (never once the choice
    /// has stopped: shutting down).
    pub async fn until_moved_from(&mut self, exit: usize) {
        if self.chosen.wait_for(|&c| c != exit).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// A lane to `exit` is up and in service, reported to the choice until it is
    /// not.
    pub fn lane_up(&self, exit: usize) -> Arc<LaneStanding> {
        let _ = self.reports.send(Report::LaneUp(exit));
        Arc::new(LaneStanding {
            follow: self.clone(),
            exit,
            in_service: AtomicBool::new(true),
        })
    }
}

/// Whether one lane counts for its exit: in service from when it comes up until its
/// connection closes (told by its dialer) or the data path takes it out of service
/// for silence (told by the driver, which also tells when it is back). A dead exit's
/// lanes fall silent within 0.4 s, while their connections close only at QUIC's
/// idle timeout, seconds later.
pub struct LaneStanding {
    follow: ExitFollow,
    exit: usize,
    in_service: AtomicBool,
}

impl LaneStanding {
    /// The lane is in service (`true`) or not; the choice hears of changes only.
    pub fn set(&self, in_service: bool) {
        if self.in_service.swap(in_service, Ordering::Relaxed) == in_service {
            return;
        }
        let report = if in_service {
            Report::LaneUp(self.exit)
        } else {
            Report::LaneDown(self.exit)
        };
        let _ = self.follow.reports.send(report);
    }
}

/// Starts choosing among `exits` until `stop`; `watchers` are one dialer per uplink,
/// in order of preference, that the watch connections are tried over; the choice is
/// shown in `metrics`, if given.
pub fn start(
    exits: &[ExitPeer],
    watchers: watch::Receiver<Vec<Dialer>>,
    metrics: Option<Arc<Metrics>>,
    clock: Clock,
    stop: CancellationToken,
    tracker: &TaskTracker,
) -> ExitFollow {
    let holds: Vec<Duration> = exits.iter().map(|e| e.hold).collect();
    let (chosen_tx, chosen) = watch::channel(0);
    let (reports, reports_rx) = mpsc::unbounded_channel();
    let choosing = Choosing {
        choice: ExitChoice::new(&holds, clock.now()),
        names: exits.iter().map(|e| e.address.clone()).collect(),
        metrics,
        watchers,
        watching: vec![None; exits.len()],
        chosen: chosen_tx,
        reports: reports.clone(),
        clock,
        stop,
        tracker: tracker.clone(),
    };
    tracker.spawn(choosing.run(reports_rx));
    ExitFollow { chosen, reports }
}

struct Choosing {
    choice: ExitChoice,
    /// Each exit's address, for the log and the metrics.
    names: Vec<String>,
    metrics: Option<Arc<Metrics>>,
    watchers: watch::Receiver<Vec<Dialer>>,
    /// The token that stops each exit's watch connection, while it is kept.
    watching: Vec<Option<CancellationToken>>,
    chosen: watch::Sender<usize>,
    reports: mpsc::UnboundedSender<Report>,
    clock: Clock,
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl Choosing {
    async fn run(mut self, mut reports: mpsc::UnboundedReceiver<Report>) {
        self.show();
        loop {
            self.keep_watches();
            let deadline = self.choice.poll_timeout();
            let wake = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(self.clock.deadline(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = reports.recv() => {
                    let now = self.clock.now();
                    match r {
                        Some(Report::LaneUp(exit)) => self.choice.lane_up(exit),
                        Some(Report::LaneDown(exit)) => self.choice.lane_down(exit, now),
                        Some(Report::Watch { exit, up }) => self.choice.watch(exit, up, now),
                        None => return,
                    }
                }
                () = wake => {}
                () = self.stop.cancelled() => return,
            }
            let from = self.choice.current();
            if let Some(to) = self.choice.poll(self.clock.now()) {
                let (from_name, to_name) = (&self.names[from], &self.names[to]);
                if to < from {
                    info!(from = %from_name, to = %to_name, "a preferred exit answered for its hold time: moving every lane back to it");
                } else {
                    warn!(from = %from_name, to = %to_name, "the exit does not answer: moving every lane to the next");
                }
                self.chosen.send_replace(to);
                self.show();
            }
        }
    }

    fn show(&self) {
        if let Some(m) = &self.metrics {
            m.exits_in_use(&self.names, self.choice.current());
        }
    }

    /// Keeps a watch connection to exactly the exits the choice wants watched.
    fn keep_watches(&mut self) {
        let wanted = self.choice.watched();
        for (exit, watching) in self.watching.iter_mut().enumerate() {
            match (wanted.contains(&exit), watching.is_some()) {
                (true, false) => {
                    let stop = self.stop.child_token();
                    let watch = Watch {
                        exit,
                        dialers: self.watchers.clone(),
                        reports: self.reports.clone(),
                    };
                    let span = info_span!("watch", exit = %self.names[exit]);
                    self.tracker.spawn(watch.run(stop.clone()).instrument(span));
                    *watching = Some(stop);
                }
                (false, true) => {
                    if let Some(stop) = watching.take() {
                        stop.cancel();
                    }
                }
                _ => {}
            }
        }
    }
}

/// One exit's watch connection: up over the first uplink it can be (of those that
/// may dial), again whenever it drops.
struct Watch {
    exit: usize,
    /// One per uplink, as configured now.
    dialers: watch::Receiver<Vec<Dialer>>,
    reports: mpsc::UnboundedSender<Report>,
}

impl Watch {
    async fn run(self, stop: CancellationToken) {
        let mut redial = Redial::new(HELLO_TIMEOUT);
        loop {
            let mut up = None;
            // Whether any exit answered, if only to refuse.
            let mut answered = false;
            let dialers = self.dialers.borrow().clone();
            // Not over a cold standby or a capped uplink, which are hung up to save
            // their cost, nor one whose interface is down.
            for dialer in dialers.iter().filter(|d| d.may_dial()) {
                let attempt = tokio::select! {
                    r = dialer.connect(self.exit, redial.answer_limit()) => r,
                    () = stop.cancelled() => return,
                };
                match attempt {
                    Ok((conn, endpoint, _)) => {
                        up = Some((conn, endpoint));
                        break;
                    }
                    Err(e) => {
                        answered |= client::exit_answered(&e);
                        debug!(error = format!("{e:#}"), "no watch connection");
                    }
                }
            }
            match up {
                Some((conn, _endpoint)) => {
                    info!(peer = %conn.remote_address(), "the exit answers: watching it");
                    redial.connected();
                    let _ = self.reports.send(Report::Watch {
                        exit: self.exit,
                        up: true,
                    });
                    tokio::select! {
                        _ = conn.closed() => {}
                        () = stop.cancelled() => {
                            conn.close(0u32.into(), b"watch no longer wanted");
                            return;
                        }
                    }
                    let _ = self.reports.send(Report::Watch {
                        exit: self.exit,
                        up: false,
                    });
                }
                None => {
                    redial.failed(answered);
                }
            }
            tokio::select! {
                () = tokio::time::sleep(redial.next_wait()) => {}
                () = stop.cancelled() => return,
            }
        }
    }
}

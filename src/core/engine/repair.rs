//! Loss repair: what a lane carried is kept for a while and sent again over the other
//! lanes when its peer reports a run of it missing or the lane is given up; the lane
//! sequence numbers that tell the peer what went missing.

use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::core::lane::{LaneId, LaneView};
use crate::core::time::Instant;
use crate::core::wire::{DATAGRAM_HEADER_LEN, LossReport, split_datagram};

use super::DataPath;
use super::lanes::{Lane, quickest_lane};
use super::liveness::LANE_STALL;

/// Datagrams handed to a lane are kept this long (at most [`RESEND_MAX_BYTES`]), so
/// that those its path may have lost are sent again over the other lanes when it is
/// given up: packets still queued behind its congestion window and packets in flight
/// when the path died. A lane is given up at the latest [`LANE_STALL`] after it was
/// last heard, and what it was handed a round trip before that may be lost too.
pub const RESEND_WINDOW: Duration = Duration::from_millis(LANE_STALL.as_millis() as u64 + 100);
/// The most a lane keeps for sending again: what a lane of up to 250 Mbit/s carries
/// in a round trip of 134 ms, as a report of its losses comes a round trip after
/// the packets left (see [`LossReport`]); beyond it, the inner flows recover what
/// the lane lost themselves. A buffer sized by what a lane queues, not by what it
/// carries in a round trip, let a fast lane over a long path forget its lost packets
/// before their report came (docs/design/resequencing.md).
pub const RESEND_MAX_BYTES: usize = 4 * 1024 * 1024;
/// The longest run of a lane's packets missing that the receiver reports lost (see
/// [`LossReport`]): a longer one is an outage, whose packets the sender sends again
/// when it gives the lane up ([`RESEND_WINDOW`]).
pub(super) const MAX_REPORTED_LOSS: u16 = 64;

impl Lane {
    /// Keeps a datagram handed to the lane at `now`, forgetting those older than
    /// [`RESEND_WINDOW`] or beyond [`RESEND_MAX_BYTES`].
    pub(super) fn keep_recent(&mut self, datagram: &Bytes, now: Instant) {
        self.recent.push_back((now, datagram.clone()));
        self.recent_bytes += datagram.len();
        self.forget_old(now);
    }

    /// Forgets the kept datagrams older than [`RESEND_WINDOW`] or beyond
    /// [`RESEND_MAX_BYTES`]; at every sample too, so that a lane whose traffic
    /// stopped does not pin its last datagrams' buffers.
    pub(super) fn forget_old(&mut self, now: Instant) {
        while let Some((at, d)) = self.recent.front() {
            if now.saturating_since(*at) <= RESEND_WINDOW && self.recent_bytes <= RESEND_MAX_BYTES {
                break;
            }
            self.recent_bytes -= d.len();
            self.recent.pop_front();
        }
    }

    /// The lane sequence number for the next packet handed to the lane, counted.
    pub(super) fn next_lane_seq(&mut self) -> u16 {
        let seq = self.tx_lane_seq;
        self.tx_lane_seq = seq.wrapping_add(1);
        seq
    }

    /// The peer's packet with lane sequence number `seq` arrived: the run of packets
    /// before it that did not, if it is one to report. A packet behind the one
    /// expected is a copy or came late, and changes nothing.
    pub(super) fn received_lane_seq(&mut self, seq: u16) -> Option<LossReport> {
        let expected = self.rx_lane_seq.unwrap_or(seq);
        let missing = seq.wrapping_sub(expected);
        if missing >= 0x8000 {
            return None;
        }
        self.rx_lane_seq = Some(seq.wrapping_add(1));
        (1..=MAX_REPORTED_LOSS)
            .contains(&missing)
            .then_some(LossReport {
                first: expected,
                count: missing as u8,
            })
    }
}

impl DataPath {
    /// Sends again, over the site's other lanes that are up, the datagrams lane
    /// `dead` was handed since a round trip before its peer was last heard: those its
    /// dead path lost, or holds until it returns. Returns how many were sent.
    pub(super) fn resend_from(&mut self, dead: LaneId, srtt: Duration, now: Instant) -> u64 {
        let Some(Some(l)) = self.lanes.get_mut(dead.0 as usize) else {
            return 0;
        };
        let heard_at = l.heard_at;
        let mut batch = std::mem::take(&mut self.resend_batch);
        batch.extend(
            l.recent
                .drain(..)
                .filter(|(at, _)| heard_at.saturating_since(*at) <= srtt)
                .map(|(_, d)| d),
        );
        l.recent_bytes = 0;
        let resent = self.send_again(dead, &mut batch, now);
        self.resend_batch = batch;
        if let Some(Some(l)) = self.lanes.get_mut(dead.0 as usize) {
            l.counters.resent += resent;
        }
        resent
    }

    /// The peer reported that `report`'s run of the packets lane `lane` carried did
    /// not arrive: sends those it still keeps again over the site's other lanes.
    ///
    /// Why: a lane loses packets when its uplink's buffer overflows, as a competing
    /// flow's slow start makes it do, and the flows striped over the lanes each lost
    /// one and cut their windows, which CUBIC over a long round trip took seconds to
    /// regrow (docs/design/resequencing.md). Sent again over the lane where it
    /// arrives first, the packet mostly fills its gap before the receiver stops
    /// waiting for it, and the inner flows do not see the loss; the lane's own window
    /// still does.
    pub(super) fn repair(&mut self, lane: LaneId, report: LossReport, now: Instant) {
        let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) else {
            return;
        };
        // Only packets of flows the receiver keeps in order: it holds their flows'
        // later packets until the copy arrives. Another flow's copy would arrive
        // behind its later packets, reordered.
        let lost = |(_, d): &(Instant, Bytes)| {
            split_datagram(d).is_some_and(|(h, _)| {
                h.gap != 0 && h.lane_seq.wrapping_sub(report.first) < u16::from(report.count)
            })
        };
        let mut batch = std::mem::take(&mut self.resend_batch);
        // The lost packets are among the latest handed: looked for from the newest.
        batch.extend(
            l.recent
                .iter()
                .rev()
                .filter(|entry| lost(entry))
                .take(usize::from(report.count))
                .map(|(_, d)| d.clone()),
        );
        batch.reverse();
        let repaired = self.send_again(lane, &mut batch, now);
        self.resend_batch = batch;
        if let Some(Some(l)) = self.lanes.get_mut(lane.0 as usize) {
            l.counters.loss_repaired += repaired;
        }
    }

    /// Sends `batch`, datagrams lane `from` carried, again over the other lanes of
    /// its site that are up: each where it arrives first, on a lane of the same
    /// colour if one is up, renumbered in that lane's sequence and marked as copies.
    /// They keep their sequence numbers for the site: the receiving gateway puts them
    /// back in their flows' order, or, where it gave up waiting for them, passes them
    /// on late (to TCP, a retransmission that came early). Drains `batch`; returns
    /// how many were sent.
    pub(super) fn send_again(&mut self, from: LaneId, batch: &mut Vec<Bytes>, now: Instant) -> u64 {
        let Some(Some(l)) = self.lanes.get(from.0 as usize) else {
            batch.clear();
            return 0;
        };
        let (site, colour) = (l.site, l.colour);
        let mut sent = 0;
        for datagram in batch.drain(..) {
            let (len, views) = (datagram.len(), &self.sites[site.0 as usize].lanes);
            let admits = |v: &LaneView| v.up && v.id != from;
            let quickest = quickest_lane(views, colour, len - DATAGRAM_HEADER_LEN, now, admits);
            // Once per failure or loss, a round trip's packets at most.
            let copy = BytesMut::from(&datagram[..]);
            if quickest.is_some_and(|view| self.send_copy(site, view, copy, now)) {
                sent += 1;
            }
        }
        sent
    }
}

//! What the data path reports. The names of the enums below are the labels of the
//! Prometheus metrics the shell exports, so they are the user-facing contract.

use std::time::Duration;

/// Upper bounds (seconds) of the delay histograms' buckets; `+Inf` is implied.
pub const DELAY_BUCKETS: [f64; 10] = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

/// Delays counted per [`DELAY_BUCKETS`] bucket (the last is `+Inf`), with their sum:
/// the core cannot call into prometheus, so it counts, and the shell copies the
/// counts into a Prometheus histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DelayHistogram {
    pub buckets: [u64; DELAY_BUCKETS.len() + 1],
    pub sum: Duration,
}

impl DelayHistogram {
    pub fn observe(&mut self, delay: Duration) {
        let secs = delay.as_secs_f64();
        let bucket = DELAY_BUCKETS
            .iter()
            .position(|&b| secs <= b)
            .unwrap_or(DELAY_BUCKETS.len());
        self.buckets[bucket] += 1;
        self.sum += delay;
    }

    /// Adds what `now` observed beyond `before` (an earlier copy of the same
    /// histogram).
    pub fn add_since(&mut self, now: &DelayHistogram, before: &DelayHistogram) {
        for (bucket, (n, b)) in self
            .buckets
            .iter_mut()
            .zip(now.buckets.iter().zip(&before.buckets))
        {
            *bucket += n.saturating_sub(*b);
        }
        self.sum += now.sum.saturating_sub(before.sum);
    }

    /// How many delays were observed.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }
}

/// Why a packet was dropped: the `reason` label of `braid_packets_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Not exactly one well-formed IP packet.
    Malformed,
    /// Addressed to the link itself (link-local unicast or multicast, such as the
    /// kernel's own MLD reports on the TUN device): routers never forward these.
    LinkLocal,
    /// No lane is up to carry it.
    NoLane,
    /// Larger than the lane can carry (an ICMP error went back where allowed).
    TooBig,
    /// The lane's queue inside braid is full: it holds its byte limit, or the
    /// packet would wait longer than its bound (`aqm::lane_max_sojourn`, or
    /// `aqm::MAX_SOJOURN` in an uplink's shaper) at the lane's rate.
    QueueFull,
    /// The lane's queue inside braid, or a paced application's queue, has stood
    /// above CoDel's target delay for an interval: dropped so that the inner
    /// transport slows down (`core/aqm.rs`).
    QueueDelay,
    /// The exit knows no site for the inner destination.
    NoSite,
    /// A site sent a packet whose source address is not among its prefixes.
    Spoofed,
    /// At an exit that does not forward between sites (`site_to_site`): a site sent a
    /// packet to a prefix of a site the exit serves.
    SiteToSite,
    /// A peer failed the TLS handshake or claimed another site's id.
    Unauthenticated,
    /// The TUN device refused to take it for a reason other than a full queue (the
    /// kernel found the packet invalid, or the device is going away).
    TunRefused,
    /// At an exit with several data-path threads: the thread serving the packet's site
    /// had a full inbox (`exit.threads`).
    HandoffFull,
    /// Its application keeps to uplinks of which none has a lane up, and is `strict`
    /// (`uplinks`, `avoid` in the application table).
    Steered,
}

impl DropReason {
    pub const ALL: [DropReason; 13] = [
        DropReason::Malformed,
        DropReason::LinkLocal,
        DropReason::NoLane,
        DropReason::TooBig,
        DropReason::QueueFull,
        DropReason::QueueDelay,
        DropReason::NoSite,
        DropReason::Spoofed,
        DropReason::SiteToSite,
        DropReason::Unauthenticated,
        DropReason::TunRefused,
        DropReason::HandoffFull,
        DropReason::Steered,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::LinkLocal => "link_local",
            DropReason::NoLane => "no_lane",
            DropReason::TooBig => "too_big",
            DropReason::QueueFull => "queue_full",
            DropReason::QueueDelay => "queue_delay",
            DropReason::NoSite => "no_site",
            DropReason::Spoofed => "spoofed",
            DropReason::SiteToSite => "site_to_site",
            DropReason::Unauthenticated => "unauthenticated",
            DropReason::TunRefused => "tun_refused",
            DropReason::HandoffFull => "handoff_full",
            DropReason::Steered => "steered",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_unique_and_in_declaration_order() {
        let labels: crate::core::hash::FixedSet<_> =
            DropReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), DropReason::ALL.len());
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(
                *r as usize, i,
                "ALL must list the reasons in order: metrics index by it"
            );
        }
    }
}

//! Plain counters of the data path. The names of the enums below are the labels of the
//! Prometheus metrics the shell exports, so they are the user-facing contract.

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
    /// The lane's queue inside braid is full.
    QueueFull,
    /// The exit knows no site for the inner destination.
    NoSite,
    /// A site sent a packet whose source address is not among its prefixes.
    Spoofed,
    /// A peer failed the TLS handshake or claimed another site's id.
    Unauthenticated,
}

impl DropReason {
    pub const ALL: [DropReason; 8] = [
        DropReason::Malformed,
        DropReason::LinkLocal,
        DropReason::NoLane,
        DropReason::TooBig,
        DropReason::QueueFull,
        DropReason::NoSite,
        DropReason::Spoofed,
        DropReason::Unauthenticated,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::LinkLocal => "link_local",
            DropReason::NoLane => "no_lane",
            DropReason::TooBig => "too_big",
            DropReason::QueueFull => "queue_full",
            DropReason::NoSite => "no_site",
            DropReason::Spoofed => "spoofed",
            DropReason::Unauthenticated => "unauthenticated",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Drop counters, one per reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounters([u64; DropReason::ALL.len()]);

impl DropCounters {
    /// Counts one drop; returns true if it is the first for this reason, so the
    /// caller can log it once at a visible level.
    pub fn count(&mut self, reason: DropReason) -> bool {
        let c = &mut self.0[reason.index()];
        *c += 1;
        *c == 1
    }

    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_drop_of_each_reason_is_flagged_once() {
        let mut c = DropCounters::default();
        assert!(c.count(DropReason::Malformed));
        assert!(!c.count(DropReason::Malformed));
        assert!(c.count(DropReason::Spoofed));
        assert_eq!(c.get(DropReason::Malformed), 2);
        assert_eq!(c.get(DropReason::NoLane), 0);
        let labels: std::collections::HashSet<_> =
            DropReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), DropReason::ALL.len());
    }
}

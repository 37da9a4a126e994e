//! What the data path reports. The names of the enums below are the labels of the
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

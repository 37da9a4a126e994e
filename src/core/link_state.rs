//! Uplinks that come and go: what an uplink's lanes do when its interface goes down,
//! disappears, comes back or changes its address. The shell reads the interface as
//! the kernel reports it at each rtnetlink link or address event; this decides.

use std::net::IpAddr;

/// An interface as the kernel reports it at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinkState {
    /// Its index; `None` when there is no such interface.
    pub index: Option<u32>,
    /// Administratively up and with a carrier.
    pub up: bool,
    /// Its addresses, sorted.
    pub addresses: Vec<IpAddr>,
}

impl LinkState {
    /// Whether lanes can be dialled over it: it exists, is up and has an address.
    pub fn usable(&self) -> bool {
        self.index.is_some() && self.up && !self.addresses.is_empty()
    }
}

/// What an uplink's lanes must do after a change of its interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkChange {
    /// Nothing that matters to them changed.
    Same,
    /// It went down or away: close them at once, and dial only once it is back.
    Lost,
    /// It came back, or is another interface of that name, or its addresses changed:
    /// dial again at once (a lane bound to what was there is dead or will be).
    Renewed,
}

/// Judges the change from `before` to `now`.
pub fn judge(before: &LinkState, now: &LinkState) -> LinkChange {
    match (before.usable(), now.usable()) {
        (true, false) => LinkChange::Lost,
        (false, true) => LinkChange::Renewed,
        (false, false) => LinkChange::Same,
        (true, true) if before.index != now.index || before.addresses != now.addresses => {
            LinkChange::Renewed
        }
        (true, true) => LinkChange::Same,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(index: u32, up: bool, addresses: &[&str]) -> LinkState {
        LinkState {
            index: Some(index),
            up,
            addresses: addresses
                .iter()
                .map(|a| a.parse().expect("address"))
                .collect(),
        }
    }

    #[test]
    fn down_gone_back_and_readdressed_interfaces_are_told_apart() {
        let up = link(4, true, &["100.64.0.2"]);
        assert_eq!(judge(&up, &up), LinkChange::Same);
        assert_eq!(
            judge(&up, &link(4, false, &["100.64.0.2"])),
            LinkChange::Lost
        );
        assert_eq!(
            judge(&up, &LinkState::default()),
            LinkChange::Lost,
            "deleted"
        );
        assert_eq!(
            judge(&up, &link(4, true, &[])),
            LinkChange::Lost,
            "no address"
        );
        assert_eq!(
            judge(&link(4, false, &["100.64.0.2"]), &up),
            LinkChange::Renewed
        );
        assert_eq!(
            judge(&LinkState::default(), &up),
            LinkChange::Renewed,
            "created"
        );
        assert_eq!(
            judge(&up, &link(9, true, &["100.64.0.2"])),
            LinkChange::Renewed,
            "deleted and made again between two events"
        );
        assert_eq!(
            judge(&up, &link(4, true, &["100.64.0.7"])),
            LinkChange::Renewed,
            "a new address (a DSL line's renewal)"
        );
        assert_eq!(
            judge(&LinkState::default(), &link(4, false, &[])),
            LinkChange::Same,
            "created but not up yet"
        );
    }
}

//! Which of several controllers pointed at one fleet allocates a site, so that they do
//! not take turns overwriting each other's tables.
//!
//! A table names the controller that wrote it (`controller`). That controller re-puts
//! it every third of `takeover_after` even when nothing changed (a new version, the
//! same applications: the gateway leaves its data path alone). Another controller
//! leaves the site alone while the table's version keeps moving, and takes it over
//! once the version has stood still for `takeover_after`: its writer has stopped. A
//! table no controller wrote (an operator's) is anyone's. Two controllers that start
//! together both see a table they may take; the gateway's version check lets one
//! put it first, and the other, refused, then finds the table named after the first.
//!
//! Nothing is stored: a restarted controller starts by waiting as if it had just
//! seen every table, which at worst delays a takeover by `takeover_after`.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::time::Instant;

/// What a controller is to do with a site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// Allocate it; put the table even unchanged when `renew` (the lease runs out
    /// otherwise).
    Mine { renew: bool },
    /// Another controller allocates it; `first` is true the first time this is said,
    /// to be logged once.
    Held { by: String, first: bool },
    /// Allocate it, taking it from `from`, whose table has not moved for
    /// `takeover_after`.
    TakeOver { from: String },
}

/// One site's table as last seen.
#[derive(Debug, Clone)]
struct Seen {
    version: u64,
    /// When this version was first seen.
    since: Instant,
    held: bool,
}

/// A controller's view of which sites are its own.
#[derive(Debug)]
pub struct Leases {
    me: String,
    takeover_after: Duration,
    seen: BTreeMap<String, Seen>,
}

impl Leases {
    pub fn new(me: impl Into<String>, takeover_after: Duration) -> Leases {
        Leases {
            me: me.into(),
            takeover_after,
            seen: BTreeMap::new(),
        }
    }

    /// How often the controller renews its tables.
    pub fn renew_every(&self) -> Duration {
        self.takeover_after / 3
    }

    /// The standing of `site`, whose table in force is `version`, written by
    /// `writer`, seen at `now`.
    pub fn standing(
        &mut self,
        site: &str,
        version: u64,
        writer: Option<&str>,
        now: Instant,
    ) -> Standing {
        let seen = self.seen.entry(site.to_string()).or_insert(Seen {
            version,
            since: now,
            held: false,
        });
        if seen.version != version {
            *seen = Seen {
                version,
                since: now,
                held: seen.held,
            };
        }
        let still = now.saturating_since(seen.since);
        match writer {
            Some(other) if other != self.me => {
                if still >= self.takeover_after {
                    seen.held = false;
                    Standing::TakeOver {
                        from: other.to_string(),
                    }
                } else {
                    let first = !seen.held;
                    seen.held = true;
                    Standing::Held {
                        by: other.to_string(),
                        first,
                    }
                }
            }
            mine_or_nobodys => {
                seen.held = false;
                Standing::Mine {
                    renew: mine_or_nobodys.is_some() && still >= self.takeover_after / 3,
                }
            }
        }
    }

    /// Forgets the sites not in `present` (gone from every gateway).
    pub fn retain(&mut self, present: impl Fn(&str) -> bool) {
        self.seen.retain(|site, _| present(site));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(30);

    fn at(s: u64) -> Instant {
        Instant::from_nanos(s * 1_000_000_000)
    }

    #[test]
    fn an_operators_table_is_taken_and_ones_own_renewed_every_third_of_the_lease() {
        let mut a = Leases::new("a", T);
        assert_eq!(
            a.standing("s", 1, None, at(0)),
            Standing::Mine { renew: false }
        );
        // Its own table, put at version 2, is renewed once it stood 10 s.
        assert_eq!(
            a.standing("s", 2, Some("a"), at(1)),
            Standing::Mine { renew: false }
        );
        assert_eq!(
            a.standing("s", 2, Some("a"), at(10)),
            Standing::Mine { renew: false }
        );
        assert_eq!(
            a.standing("s", 2, Some("a"), at(11)),
            Standing::Mine { renew: true }
        );
        assert_eq!(a.renew_every(), Duration::from_secs(10));
    }

    #[test]
    fn another_controllers_moving_table_is_left_alone_and_a_still_one_taken_over() {
        let mut b = Leases::new("b", T);
        assert_eq!(
            b.standing("s", 5, Some("a"), at(0)),
            Standing::Held {
                by: "a".into(),
                first: true
            }
        );
        // a renews every 10 s: the version moves, b keeps waiting (and says so once).
        for (v, t) in [(5, 9), (6, 10), (6, 29), (7, 30), (8, 40)] {
            assert_eq!(
                b.standing("s", v, Some("a"), at(t)),
                Standing::Held {
                    by: "a".into(),
                    first: false
                },
                "at {t} s"
            );
        }
        // a stops: 30 s after version 8 appeared, b takes the site.
        assert!(matches!(
            b.standing("s", 8, Some("a"), at(69)),
            Standing::Held { .. }
        ));
        assert_eq!(
            b.standing("s", 8, Some("a"), at(70)),
            Standing::TakeOver { from: "a".into() }
        );
        // Its own table from then on; were a to come back and put one, b would wait
        // again and say so again.
        assert_eq!(
            b.standing("s", 9, Some("b"), at(71)),
            Standing::Mine { renew: false }
        );
        assert_eq!(
            b.standing("s", 10, Some("a"), at(80)),
            Standing::Held {
                by: "a".into(),
                first: true
            }
        );
    }

    #[test]
    fn a_restarted_controller_waits_a_whole_lease_before_taking_over() {
        let mut b = Leases::new("b", T);
        // The table has stood still for long, but b has only just seen it.
        assert!(matches!(
            b.standing("s", 3, Some("a"), at(1000)),
            Standing::Held { .. }
        ));
        assert_eq!(
            b.standing("s", 3, Some("a"), at(1030)),
            Standing::TakeOver { from: "a".into() }
        );
        b.retain(|site| site != "s");
        assert!(matches!(
            b.standing("s", 3, Some("a"), at(1031)),
            Standing::Held { .. }
        ));
    }
}

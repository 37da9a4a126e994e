//! Which exit an entry's lanes go to, when its configuration lists several (`[[exit]]`,
//! in order of preference). Pure: the shell reports lanes and watch connections
//! coming up and going down, with the instant, and dials where [`ExitChoice::current`]
//! says.
//!
//! Every lane of a site goes to one exit, because the site's resequencing and state
//! live there; so the choice is the site's, never a lane's, and all lanes move
//! together:
//!
//! - The exit chosen must bring a lane up within [`FIRST_ANSWER`] of being chosen,
//!   and, once it had lanes, may be without any for at most [`SILENT_GRACE`]. Past
//!   either, the lanes move to the next exit of the list (after the last, the first
//!   again), or at once to a preferred one that answers.
//! - While the lanes are on an exit other than the first, the shell keeps a watch
//!   connection to every preferred one ([`ExitChoice::watched`]); once one has
//!   answered without a break for its hold time, the lanes return to it.

use std::ops::Range;
use std::time::Duration;

use super::time::Instant;

/// How long a newly chosen exit has to bring its first lane up: a handshake and a
/// hello take a few round trips, and quinn resends a lost Initial after a second.
pub const FIRST_ANSWER: Duration = Duration::from_secs(3);
/// How long the chosen exit may be without any lane before the lanes move: longer
/// than a lane given up falsely takes to come back (the redial's first backoff,
/// 200 ms, and a handshake), short enough that a dead exit, whose lanes are given
/// up within 400 ms, is left within about a second.
pub const SILENT_GRACE: Duration = Duration::from_millis(400);

/// One exit as the choice sees it.
#[derive(Debug, Clone)]
struct Exit {
    /// How long it must answer again before the lanes return to it.
    hold: Duration,
    /// Its lanes up now.
    lanes_up: usize,
    /// Since when its watch connection has been up (none: it is down or not kept).
    answering_since: Option<Instant>,
}

/// The site's choice of exit.
#[derive(Debug, Clone)]
pub struct ExitChoice {
    exits: Vec<Exit>,
    current: usize,
    /// When the current exit was chosen.
    chosen_at: Instant,
    /// Since when the current exit, having had lanes, has had none.
    silent_since: Option<Instant>,
    /// Whether the current exit has had a lane up since it was chosen.
    answered: bool,
}

impl ExitChoice {
    /// The choice among exits of these hold times, in order of preference, starting
    /// with the first at `now`.
    pub fn new(holds: &[Duration], now: Instant) -> ExitChoice {
        ExitChoice {
            exits: holds
                .iter()
                .map(|&hold| Exit {
                    hold,
                    lanes_up: 0,
                    answering_since: None,
                })
                .collect(),
            current: 0,
            chosen_at: now,
            silent_since: None,
            answered: false,
        }
    }

    /// The exit every lane should go to now (its index in the list).
    pub fn current(&self) -> usize {
        self.current
    }

    /// The exits to keep a watch connection to: the ones preferred to the current.
    pub fn watched(&self) -> Range<usize> {
        0..self.current
    }

    /// A lane to `exit` came up.
    pub fn lane_up(&mut self, exit: usize) {
        let Some(e) = self.exits.get_mut(exit) else {
            return;
        };
        e.lanes_up += 1;
        if exit == self.current {
            self.answered = true;
            self.silent_since = None;
        }
    }

    /// A lane to `exit` went down (or was hung up).
    pub fn lane_down(&mut self, exit: usize, now: Instant) {
        let Some(e) = self.exits.get_mut(exit) else {
            return;
        };
        e.lanes_up = e.lanes_up.saturating_sub(1);
        if exit == self.current && e.lanes_up == 0 && self.silent_since.is_none() {
            self.silent_since = Some(now);
        }
    }

    /// The watch connection to `exit` came up (`up`) or went down.
    pub fn watch(&mut self, exit: usize, up: bool, now: Instant) {
        if let Some(e) = self.exits.get_mut(exit) {
            e.answering_since = up.then_some(now);
        }
    }

    /// Moves the lanes if the rules say so at `now`; returns the new exit if they move.
    pub fn poll(&mut self, now: Instant) -> Option<usize> {
        if self.exits.is_empty() {
            return None;
        }
        let failed = self.deadline_of_failure().is_some_and(|at| now >= at);
        let next = if failed {
            // A preferred exit that answers now, else the next in the list.
            (0..self.current)
                .find(|&i| self.exits[i].answering_since.is_some())
                .unwrap_or((self.current + 1) % self.exits.len())
        } else {
            (0..self.current).find(|&i| self.return_at(i).is_some_and(|at| now >= at))?
        };
        if next == self.current {
            // The only exit: it is dialled again, and given its time again.
            self.chosen_at = now;
            self.silent_since = None;
            self.answered = false;
            return None;
        }
        self.current = next;
        self.chosen_at = now;
        self.answered = false;
        self.silent_since = None;
        // Watches of exits no longer preferred are dropped by the shell.
        for e in &mut self.exits[next..] {
            e.answering_since = None;
        }
        Some(next)
    }

    /// The next instant [`ExitChoice::poll`] may move the lanes, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let returns = (0..self.current).filter_map(|i| self.return_at(i));
        returns.chain(self.deadline_of_failure()).min()
    }

    /// When the current exit counts as failed, if nothing changes.
    fn deadline_of_failure(&self) -> Option<Instant> {
        if !self.answered {
            Some(self.chosen_at + FIRST_ANSWER)
        } else {
            self.silent_since.map(|at| at + SILENT_GRACE)
        }
    }

    /// When the lanes return to preferred exit `i`, if its watch stays up.
    fn return_at(&self, i: usize) -> Option<Instant> {
        let e = &self.exits[i];
        e.answering_since.map(|at| at + e.hold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(30);

    fn at(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    /// Two exits of the default hold; the first answers with two lanes at 100 ms.
    fn two_answered() -> ExitChoice {
        let mut c = ExitChoice::new(&[HOLD, HOLD], at(0));
        c.lane_up(0);
        c.lane_up(0);
        assert_eq!(c.poll(at(100)), None);
        c
    }

    #[test]
    fn the_lanes_stay_on_the_first_exit_while_it_has_a_lane() {
        let mut c = two_answered();
        c.lane_down(0, at(1000));
        // One lane is still up: no deadline at all.
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.poll(at(60_000)), None);
        assert_eq!(c.current(), 0);
        assert!(c.watched().is_empty());
    }

    #[test]
    fn an_exit_without_lanes_for_the_grace_is_left_for_the_next() {
        let mut c = two_answered();
        c.lane_down(0, at(1000));
        c.lane_down(0, at(1100));
        assert_eq!(c.poll_timeout(), Some(at(1100) + SILENT_GRACE));
        assert_eq!(
            c.poll(at(1100) + SILENT_GRACE - Duration::from_millis(1)),
            None
        );
        assert_eq!(c.poll(at(1100) + SILENT_GRACE), Some(1));
        assert_eq!(c.current(), 1);
        assert_eq!(c.watched(), 0..1);
    }

    #[test]
    fn a_lane_back_within_the_grace_keeps_the_exit() {
        let mut c = two_answered();
        c.lane_down(0, at(1000));
        c.lane_down(0, at(1000));
        c.lane_up(0);
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.poll(at(5000)), None);
        // A stale report from an exit left behind changes nothing.
        c.lane_down(1, at(5000));
        assert_eq!(c.poll(at(9000)), None);
    }

    #[test]
    fn an_exit_that_never_answers_is_left_after_the_first_answer_time() {
        let mut c = ExitChoice::new(&[HOLD, HOLD, HOLD], at(0));
        assert_eq!(c.poll(at(2999)), None);
        assert_eq!(c.poll(at(3000)), Some(1));
        // The second does not answer either: the third, then the first again.
        assert_eq!(c.poll(at(6000)), Some(2));
        assert_eq!(c.poll(at(9000)), Some(0));
    }

    #[test]
    fn no_exit_is_no_choice_and_no_panic() {
        let mut c = ExitChoice::new(&[], at(0));
        c.lane_up(0);
        c.lane_down(0, at(10));
        c.watch(0, true, at(10));
        assert_eq!(c.poll(at(10_000)), None);
        assert_eq!(c.current(), 0);
    }

    #[test]
    fn a_single_exit_is_dialled_on_and_never_left() {
        let mut c = ExitChoice::new(&[HOLD], at(0));
        assert_eq!(c.poll(at(3000)), None);
        assert_eq!(c.current(), 0);
        // Its time starts over: no busy loop of deadlines in the past.
        assert_eq!(c.poll_timeout(), Some(at(6000)));
    }

    #[test]
    fn the_lanes_return_after_the_preferred_exit_answered_for_its_hold() {
        let hold = Duration::from_secs(5);
        let mut c = ExitChoice::new(&[hold, HOLD], at(0));
        c.lane_up(0);
        c.lane_down(0, at(100));
        assert_eq!(c.poll(at(500)), Some(1));
        c.lane_up(1);
        // The first answers, breaks off, answers again: the hold counts from then.
        c.watch(0, true, at(1000));
        c.watch(0, false, at(3000));
        c.watch(0, true, at(4000));
        assert_eq!(c.poll_timeout(), Some(at(9000)));
        assert_eq!(c.poll(at(8999)), None);
        assert_eq!(c.poll(at(9000)), Some(0));
        assert!(c.watched().is_empty());
        // Back on the first, which must bring its lanes up in time like any other.
        assert_eq!(c.poll_timeout(), Some(at(9000) + FIRST_ANSWER));
    }

    #[test]
    fn a_failed_exit_is_left_at_once_for_a_preferred_one_that_answers() {
        let mut c = ExitChoice::new(&[HOLD, HOLD, HOLD], at(0));
        c.lane_up(0);
        c.lane_down(0, at(10));
        assert_eq!(c.poll(at(410)), Some(1));
        c.lane_up(1);
        c.lane_down(1, at(500));
        assert_eq!(c.poll(at(900)), Some(2));
        c.lane_up(2);
        // The first answers again; the third fails before the first's hold is over:
        // the lanes go to the first at once, not to the second, which is silent.
        c.watch(0, true, at(1000));
        c.lane_down(2, at(2000));
        assert_eq!(c.poll(at(2400)), Some(0));
    }

    #[test]
    fn moving_to_a_preferred_exit_forgets_the_watches_behind_it() {
        let hold = Duration::from_secs(1);
        let mut c = ExitChoice::new(&[hold, hold, hold], at(0));
        assert_eq!(c.poll(at(3000)), Some(1));
        assert_eq!(c.poll(at(6000)), Some(2));
        c.lane_up(2);
        c.watch(1, true, at(6100));
        assert_eq!(c.poll(at(7100)), Some(1));
        assert_eq!(c.watched(), 0..1);
        // The watch of the exit now chosen is no reason to move again.
        c.lane_up(1);
        assert_eq!(c.poll_timeout(), None);
    }
}

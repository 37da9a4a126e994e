//! Which of a site's recent sequence numbers have arrived, so that the receiving
//! gateway passes each packet once. Loss repair sends a packet again over another
//! lane when its lane reports it lost or is given up (`engine/repair.rs`), and the
//! original may still arrive: a path that fell silent for a moment, an
//! acknowledgement rather than the packet lost. Every packet the sender numbers for a
//! site carries its number, so a copy and its original show the same one.
//!
//! Copies are marked as such, and a sender sends each original once, so only a copy
//! of a number that arrived, or an original whose copy arrived, is a duplicate; an
//! original of a number that arrived before means the sender numbers afresh (it
//! restarted), and the window starts again there: a restarted sender's packets are
//! never taken for duplicates of its earlier life's.
//!
//! The window covers the last 65,536 numbers (16 KiB per site): at 100 Mbit/s of
//! full-size packets, about seven seconds; at a gigabit, about 0.7 s, still longer
//! than loss repair resends for (`RESEND_WINDOW`). A number older than the window
//! cannot be told and is passed.

const SPAN: u32 = 1 << 16;
const WORDS: usize = (SPAN / 64) as usize;

#[derive(Debug, Clone)]
pub struct SeenWindow {
    /// The highest number seen, if any.
    top: Option<u32>,
    /// Bit `n % SPAN` is set when a datagram numbered `n` of the window arrived...
    arrived: Box<[u64; WORDS]>,
    /// ...and here when one of them was a copy.
    copied: Box<[u64; WORDS]>,
}

impl Default for SeenWindow {
    fn default() -> Self {
        SeenWindow {
            top: None,
            arrived: Box::new([0; WORDS]),
            copied: Box::new([0; WORDS]),
        }
    }
}

impl SeenWindow {
    /// Records that the datagram numbered `seq`, a copy or the original, arrived;
    /// false when it is a duplicate, to be dropped: a copy of a number that arrived
    /// before, or an original whose copy did. An original of a number that arrived
    /// before but not as a copy is no duplicate (a sender sends each original once):
    /// the sender numbers afresh after a restart, and the window starts again there.
    pub fn first_arrival(&mut self, seq: u32, copy: bool) -> bool {
        let Some(top) = self.top else {
            self.restart(seq, copy);
            return true;
        };
        let ahead = seq.wrapping_sub(top);
        let behind = top.wrapping_sub(seq);
        if ahead != 0 && ahead < SPAN {
            // Newer: the numbers skipped since the top have not arrived yet.
            for n in 1..=ahead {
                set(&mut self.arrived, top.wrapping_add(n), false);
                set(&mut self.copied, top.wrapping_add(n), false);
            }
            self.top = Some(seq);
            self.record(seq, copy);
            return true;
        }
        if behind >= SPAN {
            // Far from the window: the sender numbers afresh.
            self.restart(seq, copy);
            return true;
        }
        let (arrived, copied) = (is_set(&self.arrived, seq), is_set(&self.copied, seq));
        match (copy, arrived, copied) {
            (_, false, _) => {
                self.record(seq, copy);
                true
            }
            (true, true, _) | (false, true, true) => false,
            (false, true, false) => {
                self.restart(seq, copy);
                true
            }
        }
    }

    fn restart(&mut self, seq: u32, copy: bool) {
        self.arrived.fill(0);
        self.copied.fill(0);
        self.top = Some(seq);
        self.record(seq, copy);
    }

    fn record(&mut self, seq: u32, copy: bool) {
        set(&mut self.arrived, seq, true);
        if copy {
            set(&mut self.copied, seq, true);
        }
    }
}

fn word_bit(seq: u32) -> (usize, u64) {
    let n = seq % SPAN;
    ((n / 64) as usize, 1 << (n % 64))
}

fn set(bits: &mut [u64; WORDS], seq: u32, on: bool) {
    let (word, bit) = word_bit(seq);
    if on {
        bits[word] |= bit;
    } else {
        bits[word] &= !bit;
    }
}

fn is_set(bits: &[u64; WORDS], seq: u32) -> bool {
    let (word, bit) = word_bit(seq);
    bits[word] & bit != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_and_its_original_pass_once_in_either_order() {
        let mut w = SeenWindow::default();
        assert!(w.first_arrival(10, false));
        assert!(w.first_arrival(12, false), "11 is still on its way");
        assert!(w.first_arrival(11, true), "late, not a duplicate");
        assert!(!w.first_arrival(11, false), "the original behind its copy");
        assert!(!w.first_arrival(12, true), "a copy behind its original");
        assert!(!w.first_arrival(11, true), "a second copy");
        assert!(w.first_arrival(13, false));
    }

    #[test]
    fn numbers_wrap() {
        let mut w = SeenWindow::default();
        assert!(w.first_arrival(u32::MAX, false));
        assert!(w.first_arrival(0, false));
        assert!(!w.first_arrival(u32::MAX, true));
        assert!(!w.first_arrival(0, true));
    }

    #[test]
    fn a_number_the_window_has_passed_is_cleared_for_its_next_round() {
        let mut w = SeenWindow::default();
        assert!(w.first_arrival(5, true));
        assert!(w.first_arrival(5 + SPAN - 1, false));
        // 5 + SPAN shares 5's bits: cleared as the window moved over it.
        assert!(w.first_arrival(5 + SPAN, false));
        assert!(!w.first_arrival(5 + SPAN, true));
    }

    #[test]
    fn a_sender_that_numbers_afresh_is_passed_however_near_its_old_numbers() {
        for old_top in [100, 1_000_000] {
            let mut w = SeenWindow::default();
            for seq in 0..old_top {
                assert!(w.first_arrival(seq, seq % 10 == 0));
            }
            // The sender restarted: its numbers begin again at 0, where its earlier
            // life's arrived, some as copies.
            let passed = (0..100).filter(|&seq| w.first_arrival(seq, false)).count();
            assert!(passed >= 99, "{old_top}: {passed} of 100 passed");
            assert!(!w.first_arrival(50, true), "and its copies are told again");
        }
    }
}

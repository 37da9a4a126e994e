//! Which of a site's recent sequence numbers have arrived, so that the receiving
//! gateway passes each packet once. Loss repair sends a packet again over another
//! lane when its lane reports it lost or is given up (`engine/repair.rs`), and the
//! original may still arrive: a path that fell silent for a moment, an
//! acknowledgement rather than the packet lost. Every packet the sender numbers for a
//! site carries its number, so a copy and its original show the same one.
//!
//! The window covers the last 65,536 numbers (8 KiB per site): at 100 Mbit/s of
//! full-size packets, about seven seconds; at a gigabit, about 0.7 s, still longer
//! than loss repair resends for (`RESEND_WINDOW`). A number older than the window
//! cannot be told and is passed; so is everything after the sender starts numbering
//! afresh (a restart), which moves the window to its new numbers.

const SPAN: u32 = 1 << 16;
const WORDS: usize = (SPAN / 64) as usize;

#[derive(Debug, Clone)]
pub struct SeenWindow {
    /// The highest number seen, if any.
    top: Option<u32>,
    /// Bit `n % SPAN` is set when number `n` of the window arrived.
    bits: Box<[u64; WORDS]>,
}

impl Default for SeenWindow {
    fn default() -> Self {
        SeenWindow {
            top: None,
            bits: Box::new([0; WORDS]),
        }
    }
}

impl SeenWindow {
    /// Records that the packet numbered `seq` arrived; false when one of that number
    /// arrived before (a duplicate, to be dropped).
    pub fn first_arrival(&mut self, seq: u32) -> bool {
        let Some(top) = self.top else {
            self.restart(seq);
            return true;
        };
        let ahead = seq.wrapping_sub(top);
        let behind = top.wrapping_sub(seq);
        if ahead != 0 && ahead < SPAN {
            // Newer: the numbers skipped since the top have not arrived yet.
            for n in 1..=ahead {
                self.clear(top.wrapping_add(n));
            }
            self.top = Some(seq);
            self.set(seq);
            true
        } else if behind < SPAN {
            let seen = self.is_set(seq);
            self.set(seq);
            !seen
        } else {
            // Far from the window either way: the sender numbers afresh.
            self.restart(seq);
            true
        }
    }

    fn restart(&mut self, seq: u32) {
        self.bits.fill(0);
        self.top = Some(seq);
        self.set(seq);
    }

    fn word_bit(seq: u32) -> (usize, u64) {
        let n = seq % SPAN;
        ((n / 64) as usize, 1 << (n % 64))
    }

    fn set(&mut self, seq: u32) {
        let (word, bit) = Self::word_bit(seq);
        self.bits[word] |= bit;
    }

    fn clear(&mut self, seq: u32) {
        let (word, bit) = Self::word_bit(seq);
        self.bits[word] &= !bit;
    }

    fn is_set(&self, seq: u32) -> bool {
        let (word, bit) = Self::word_bit(seq);
        self.bits[word] & bit != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_number_passes_once_in_whatever_order() {
        let mut w = SeenWindow::default();
        assert!(w.first_arrival(10));
        assert!(w.first_arrival(12), "11 is still on its way");
        assert!(w.first_arrival(11), "late, not a duplicate");
        assert!(!w.first_arrival(11), "a copy of 11");
        assert!(!w.first_arrival(12), "a copy of 12");
        assert!(!w.first_arrival(10));
        assert!(w.first_arrival(13));
    }

    #[test]
    fn numbers_wrap() {
        let mut w = SeenWindow::default();
        assert!(w.first_arrival(u32::MAX));
        assert!(w.first_arrival(0));
        assert!(!w.first_arrival(u32::MAX));
        assert!(!w.first_arrival(0));
    }

    #[test]
    fn a_number_the_window_has_passed_is_cleared_for_its_next_round() {
        let mut w = SeenWindow::default();
        assert!(w.first_arrival(5));
        assert!(w.first_arrival(5 + SPAN - 1));
        // 5 + SPAN shares 5's bit: cleared as the window moved over it.
        assert!(w.first_arrival(5 + SPAN));
        assert!(!w.first_arrival(5 + SPAN));
    }

    #[test]
    fn a_sender_that_numbers_afresh_is_passed() {
        let mut w = SeenWindow::default();
        for seq in 1_000_000..1_000_100 {
            assert!(w.first_arrival(seq));
        }
        // The sender restarted: its numbers begin again at 0.
        for seq in 0..100 {
            assert!(w.first_arrival(seq), "{seq}");
        }
        assert!(!w.first_arrival(50), "and its copies are told again");
    }
}

//! Longest-prefix match from an inner address to a value (the exit's site table).
//!
//! Contract: lookups cost one hash probe per distinct prefix length in use, whatever
//! the number of prefixes; no allocation per lookup. Prefixes of different families
//! never match each other.

use std::net::IpAddr;

use ipnet::IpNet;

use super::hash::FixedMap;
use super::packet::ip_bits;

/// Prefixes of one length: masked address -> value.
#[derive(Debug, Clone)]
struct Level<V> {
    len: u8,
    entries: FixedMap<u128, V>,
}

/// A longest-prefix-match table.
#[derive(Debug, Clone)]
pub struct PrefixMap<V> {
    v4: Vec<Level<V>>,
    v6: Vec<Level<V>>,
}

impl<V> Default for PrefixMap<V> {
    fn default() -> Self {
        PrefixMap {
            v4: Vec::new(),
            v6: Vec::new(),
        }
    }
}

impl<V: Copy> PrefixMap<V> {
    /// Adds `prefix -> value`, replacing an identical prefix.
    pub fn insert(&mut self, prefix: IpNet, value: V) {
        let prefix = prefix.trunc();
        let (levels, width) = match prefix {
            IpNet::V4(_) => (&mut self.v4, 32),
            IpNet::V6(_) => (&mut self.v6, 128),
        };
        let len = prefix.prefix_len();
        let key = mask(ip_bits(prefix.addr()), len, width);
        let pos = match levels.iter().position(|l| l.len <= len) {
            Some(p) if levels[p].len == len => p,
            Some(p) => {
                levels.insert(p, new_level(len));
                p
            }
            None => {
                levels.push(new_level(len));
                levels.len() - 1
            }
        };
        levels[pos].entries.insert(key, value);
    }

    /// The value of the longest prefix containing `addr`.
    pub fn lookup(&self, addr: IpAddr) -> Option<V> {
        let (levels, width) = match addr {
            IpAddr::V4(_) => (&self.v4, 32),
            IpAddr::V6(_) => (&self.v6, 128),
        };
        let bits = ip_bits(addr);
        levels
            .iter()
            .find_map(|l| l.entries.get(&mask(bits, l.len, width)).copied())
    }
}

fn new_level<V>(len: u8) -> Level<V> {
    Level {
        len,
        entries: FixedMap::default(),
    }
}

fn mask(bits: u128, len: u8, width: u8) -> u128 {
    let host_bits = u32::from(width - len.min(width));
    let keep = u128::MAX.checked_shl(host_bits).unwrap_or(0);
    bits & keep & (u128::MAX >> (128 - u32::from(width)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().expect("prefix")
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn longest_prefix_wins_and_families_stay_apart() {
        let mut m = PrefixMap::default();
        m.insert(net("198.18.0.0/15"), 1);
        m.insert(net("198.18.4.0/24"), 2);
        m.insert(net("0.0.0.0/0"), 9);
        m.insert(net("fd00:1::/64"), 3);
        assert_eq!(m.lookup(ip("198.18.4.7")), Some(2));
        assert_eq!(m.lookup(ip("198.19.4.7")), Some(1));
        assert_eq!(m.lookup(ip("203.0.113.1")), Some(9));
        assert_eq!(m.lookup(ip("fd00:1::5")), Some(3));
        assert_eq!(m.lookup(ip("fd00:2::5")), None);
    }

    #[test]
    fn host_bits_in_the_configured_prefix_are_ignored() {
        let mut m = PrefixMap::default();
        m.insert(net("198.18.4.9/24"), 2);
        m.insert(net("fd00::1/128"), 3);
        assert_eq!(m.lookup(ip("198.18.4.200")), Some(2));
        assert_eq!(m.lookup(ip("fd00::1")), Some(3));
        assert_eq!(m.lookup(ip("fd00::2")), None);
    }
}

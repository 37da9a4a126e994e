//! The classifier: a site's application table compiled into match rules, mapping a
//! packet to its application (SPEC §4).
//!
//! Contract: [`Classifier::classify`] returns the first application whose every match
//! key holds, or [`AppIdx::DEFAULT`]; it reads only the packet's parsed header.

use std::net::IpAddr;

use ipnet::IpNet;

use super::hash::FixedMap;
use super::pacing_table::{AppIdx, Direction, PacingTable, PortRange, Proto};
use super::packet::PacketInfo;

/// A table's match rules, compiled for classification.
#[derive(Debug, Clone, Default)]
pub struct Classifier {
    rules: Vec<Rule>,
    /// Rules whose remote ports are a single port, by that port (indices ascending):
    /// tables of many applications mostly tell them apart that way, so a packet
    /// is tested against few rules instead of all.
    by_remote_port: FixedMap<u16, Vec<u32>>,
    /// The other rules (indices ascending).
    others: Vec<u32>,
}

#[derive(Debug, Clone, Copy)]
struct Rule {
    proto: Proto,
    local: Option<IpNet>,
    local_ports: Option<PortRange>,
    remote: Option<IpNet>,
    remote_ports: Option<PortRange>,
    dscp: Option<u8>,
}

impl Rule {
    fn matches(
        &self,
        info: &PacketInfo,
        local: IpAddr,
        remote: IpAddr,
        ports: Option<(u16, u16)>,
    ) -> bool {
        let port_ok = |range: Option<PortRange>, port: Option<u16>| match range {
            None => true,
            Some(r) => port.is_some_and(|p| r.contains(p)),
        };
        self.proto.matches(info.proto)
            && self.dscp.is_none_or(|d| d == info.dscp)
            && self.local.is_none_or(|n| n.contains(&local))
            && self.remote.is_none_or(|n| n.contains(&remote))
            && port_ok(self.local_ports, ports.map(|p| p.0))
            && port_ok(self.remote_ports, ports.map(|p| p.1))
    }
}

impl Classifier {
    pub fn new(table: &PacingTable) -> Classifier {
        let rules = table
            .apps
            .iter()
            .map(|a| Rule {
                proto: a.matches.proto.unwrap_or(Proto::Any),
                local: a.matches.local_prefix,
                local_ports: a.matches.local_ports,
                remote: a.matches.remote_prefix,
                remote_ports: a.matches.remote_ports,
                dscp: a.matches.dscp,
            })
            .collect::<Vec<Rule>>();
        let mut by_remote_port: FixedMap<u16, Vec<u32>> = FixedMap::default();
        let mut others = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            match rule.remote_ports {
                Some(r) if r.first == r.last => {
                    by_remote_port.entry(r.first).or_default().push(i as u32)
                }
                _ => others.push(i as u32),
            }
        }
        Classifier {
            rules,
            by_remote_port,
            others,
        }
    }

    /// The first application whose rules all hold for a packet travelling in
    /// `direction`, or `default`. Tests the rules of the packet's remote port and
    /// those without a single remote port, in table order; callers cache the result
    /// per flow.
    pub fn classify(&self, info: &PacketInfo, direction: Direction) -> AppIdx {
        // (local, remote) addresses and ports: the site's LAN side is the source of
        // packets going up and the destination of packets coming down.
        let (local, remote, ports) = match direction {
            Direction::Up => (info.src, info.dst, info.ports),
            Direction::Down => (info.dst, info.src, info.ports.map(|(s, d)| (d, s))),
        };
        // A rule of a single remote port never matches a packet without ports.
        let indexed = ports
            .and_then(|(_, remote_port)| self.by_remote_port.get(&remote_port))
            .map_or(&[][..], Vec::as_slice);
        let (mut a, mut b) = (indexed.iter().peekable(), self.others.iter().peekable());
        // Merge the two ascending lists: the first rule in table order that matches.
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(&&x), Some(&&y)) if x < y => a.next(),
                (_, Some(_)) => b.next(),
                (Some(_), None) => a.next(),
                (None, None) => return AppIdx::DEFAULT,
            };
            if let Some(&i) = next
                && self.rules[i as usize].matches(info, local, remote, ports)
            {
                return AppIdx(i + 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::packet::tests as testing;

    fn table(json: &str) -> PacingTable {
        PacingTable::parse(json.as_bytes()).expect("valid")
    }

    #[test]
    fn the_first_matching_application_wins_and_the_rest_is_default() {
        let t = table(
            r#"{"version": 1, "apps": [
              {"name": "ssh", "match": {"proto": "tcp", "remote_ports": "22"}},
              {"name": "lan-a", "match": {"local_prefix": "198.18.1.0/25"}},
              {"name": "web", "match": {"proto": "tcp", "remote_ports": "80-443"}},
              {"name": "ef", "match": {"dscp": 46}}
            ]}"#,
        );
        let c = Classifier::new(&t);
        // testing::tcp_v4(src, sport, dst, dport): from the site to a server.
        let up = |src: &str, sport, dst: &str, dport| {
            let p = testing::tcp_v4(src, sport, dst, dport);
            c.classify(&PacketInfo::parse(&p).expect("packet"), Direction::Up)
        };
        assert_eq!(up("198.18.1.200", 40000, "203.0.113.5", 22), AppIdx(1));
        // Rule order decides: the LAN prefix comes before web.
        assert_eq!(up("198.18.1.10", 40000, "203.0.113.5", 443), AppIdx(2));
        assert_eq!(up("198.18.1.200", 40000, "203.0.113.5", 443), AppIdx(3));
        assert_eq!(
            up("198.18.1.200", 40000, "203.0.113.5", 444),
            AppIdx::DEFAULT
        );
        // Coming down, the remote port is the source port.
        let p = testing::tcp_v4("203.0.113.5", 22, "198.18.1.200", 40000);
        let info = PacketInfo::parse(&p).expect("packet");
        assert_eq!(c.classify(&info, Direction::Down), AppIdx(1));
        assert_eq!(c.classify(&info, Direction::Up), AppIdx::DEFAULT);
        // DSCP 46 (EF) on a packet no other rule takes.
        let mut p = testing::tcp_v4("198.18.1.200", 1, "203.0.113.5", 2);
        p[1] = 46 << 2;
        let info = PacketInfo::parse(&p).expect("packet");
        assert_eq!(c.classify(&info, Direction::Up), AppIdx(4));
    }

    proptest::proptest! {
        /// The port index finds exactly what testing every rule in order finds.
        #[test]
        fn the_index_agrees_with_a_linear_scan(
            rules in proptest::collection::vec((0u8..4, proptest::option::of((0u16..6, 0u16..3)), proptest::option::of(0u8..2)), 0..40),
            packets in proptest::collection::vec((0u16..8, 0u16..8, proptest::bool::ANY), 1..40),
        ) {
            let apps: Vec<String> = rules
                .iter()
                .enumerate()
                .map(|(i, (proto, ports, dscp))| {
                    let proto = ["tcp", "udp", "icmp", "any"][usize::from(*proto)];
                    let ports = ports.map_or(String::new(), |(first, extra)| {
                        format!(r#", "remote_ports": "{}-{}""#, first, first + extra)
                    });
                    let dscp = dscp.map_or(String::new(), |d| format!(r#", "dscp": {d}"#));
                    format!(r#"{{"name": "a{i}", "match": {{"proto": "{proto}"{ports}{dscp}}}}}"#)
                })
                .collect();
            let t = table(&format!(r#"{{"version": 1, "apps": [{}]}}"#, apps.join(",")));
            let c = Classifier::new(&t);
            for (sport, dport, up) in packets {
                let p = testing::tcp_v4("198.18.1.2", sport, "203.0.113.5", dport);
                let info = PacketInfo::parse(&p).expect("packet");
                let direction = if up { Direction::Up } else { Direction::Down };
                let linear = c
                    .rules
                    .iter()
                    .position(|r| {
                        let (local, remote, ports) = match direction {
                            Direction::Up => (info.src, info.dst, info.ports),
                            Direction::Down => (info.dst, info.src, info.ports.map(|(s, d)| (d, s))),
                        };
                        r.matches(&info, local, remote, ports)
                    })
                    .map_or(AppIdx::DEFAULT, |i| AppIdx(i as u32 + 1));
                proptest::prop_assert_eq!(c.classify(&info, direction), linear);
            }
        }
    }

    #[test]
    fn ports_rules_never_match_packets_without_ports() {
        let t = table(
            r#"{"version": 1, "apps": [{"name": "dns", "match": {"remote_ports": "53"}}, {"name": "icmp", "match": {"proto": "icmp"}}]}"#,
        );
        let c = Classifier::new(&t);
        let p = testing::icmp_echo_v4("198.18.1.2", "203.0.113.5");
        let info = PacketInfo::parse(&p).expect("packet");
        assert_eq!(c.classify(&info, Direction::Up), AppIdx(2));
        let p = testing::udp_v6(10);
        let info = PacketInfo::parse(&p).expect("packet");
        assert_eq!(c.classify(&info, Direction::Up), AppIdx::DEFAULT);
    }
}

//! A gateway's data path as the fuzz targets drive it: one site, a green and a blue
//! lane up on an uplink of known rate (shaped, DSD) and a blue lane on one of unknown
//! rate, a pacing table with a paced and a green application.

use std::time::Duration;

use braid::core::engine::{DataPath, EngineConfig, LaneUp, Role, SiteIdx, SiteSpec, UplinkPolicy};
use braid::core::lane::{Colour, LaneId, LaneSample};
use braid::core::pacing_table::PacingTable;
use braid::core::sched::Algorithm;
use braid::core::time::Instant;

const TABLE: &str = r#"{"version": 1, "apps": [
    {"name": "voice", "match": {"proto": "udp", "remote_ports": "5060-5080"}, "colour": "green"},
    {"name": "backup", "match": {"proto": "tcp", "remote_ports": "22"},
     "rate_up_kbps": 2000, "rate_down_kbps": 2000}]}"#;

/// A data path of `role` with its lanes up at time zero; the blue lane's id.
pub fn data_path(role: Role) -> (DataPath, LaneId) {
    let prefixes = match role {
        Role::Entry => Vec::new(),
        Role::Exit => vec![
            "198.18.1.0/24".parse().unwrap(),
            "fd00:1::/64".parse().unwrap(),
        ],
    };
    let config = EngineConfig::builder()
        .role(role)
        .sites(vec![SiteSpec {
            id: "site1".into(),
            prefixes,
        }])
        .tun_mtu(1426)
        .algorithm(Algorithm::Afmt)
        .flow_idle_timeout(Duration::from_secs(10))
        .max_flows(64)
        // Only the fuzzed inputs cross the lanes: the lane samples are fixed above,
        // so no input would reach the warm-up's padding.
        .warm_up_lanes(false)
        .build();
    let mut e = DataPath::new(config);
    let table = PacingTable::parse(TABLE.as_bytes()).expect("a valid table");
    e.handle_pacing_table(SiteIdx(0), table, Instant::ZERO);
    let mut blue = None;
    for (uplink, colour) in [
        ("up1", Colour::Blue),
        ("up1", Colour::Green),
        ("up2", Colour::Blue),
    ] {
        let up = LaneUp {
            site: "site1",
            uplink,
            colour,
            rank: 0,
            policy: UplinkPolicy::default(),
            rate_kbps: (uplink == "up1").then_some(10_000),
        };
        let id = e.handle_lane_up(up, Instant::ZERO).expect("site1");
        let sample = LaneSample {
            srtt: Duration::from_millis(20),
            cwnd: 100_000,
            max_datagram: 1400,
            rx_datagrams: 1,
            ..LaneSample::default()
        };
        e.handle_lane_sample(id, sample, Instant::ZERO);
        blue.get_or_insert(id);
    }
    (e, blue.expect("a lane"))
}

/// Lets time pass and takes everything the data path wants to send or write.
pub fn drain(e: &mut DataPath, now: Instant) {
    e.handle_timeout(now);
    while e.poll_transmit().is_some() {}
    while e.poll_tun_write().is_some() {}
    while e.poll_lane_close().is_some() {}
    while e.poll_lane_service().is_some() {}
}

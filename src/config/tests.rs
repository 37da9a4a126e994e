//! Unit tests of the validation helpers; whole files are tested through the command
//! line in `integration/cli.rs`.

use super::*;

fn net(s: &str) -> IpNet {
    s.parse().expect("prefix")
}

#[test]
fn prefixes_overlap_when_either_contains_the_other() {
    assert!(overlaps(&net("198.18.0.0/16"), &net("198.18.4.0/24")));
    assert!(overlaps(&net("198.18.4.0/24"), &net("198.18.0.0/16")));
    assert!(!overlaps(&net("198.18.4.0/24"), &net("198.18.5.0/24")));
    assert!(!overlaps(&net("198.18.0.0/16"), &net("fd00::/8")));
}

#[test]
fn host_port_accepts_names_and_literals_and_refuses_the_rest() {
    for ok in [
        "exit.example.net:4433",
        "198.19.200.1:4433",
        "[fd00::1]:4433",
    ] {
        assert!(check_host_port("x", ok).is_ok(), "{ok}");
    }
    for bad in ["198.19.200.1", ":4433", "exit:0", "exit:99999", "exit"] {
        let e = check_host_port("exit.address", bad).expect_err(bad);
        assert_eq!(e.path, "exit.address");
    }
}

#[test]
fn default_tun_mtu_follows_the_uplink_family() {
    let uplink = |peer: Option<&str>, source: Option<&str>| UplinkConfig {
        name: "a".into(),
        interface: "lo".into(),
        source: source.map(|s| s.parse().expect("ip")),
        peer: peer.map(String::from),
        rate_up_kbps: None,
        rate_down_kbps: None,
        delay_variation_ms: None,
        priority: 1,
        overflow: false,
        cold: false,
        max_rtt_ms: None,
        max_loss_bp: None,
        cut_off: Default::default(),
        cap: None,
    };
    let entry = |uplinks| {
        RoleConfig::Entry(EntryConfig {
            site: "s".into(),
            exit_address: "198.19.200.1:4433".into(),
            exit_name: "exit".into(),
            uplinks,
        })
    };
    assert_eq!(default_tun_mtu(&entry(vec![uplink(None, None)])), 1426);
    assert_eq!(
        default_tun_mtu(&entry(vec![uplink(Some("[fd00::1]:4433"), None)])),
        1406
    );
    assert_eq!(
        default_tun_mtu(&entry(vec![uplink(Some("exit.example.net:4433"), None)])),
        1406
    );
    let exit = |listen: &str| {
        RoleConfig::Exit(ExitConfig {
            listen: listen.parse().expect("addr"),
            sites: Vec::new(),
            threads: None,
            site_to_site: false,
        })
    };
    assert_eq!(default_tun_mtu(&exit("0.0.0.0:4433")), 1426);
    assert_eq!(default_tun_mtu(&exit("[::]:4433")), 1406);
}

#[test]
fn config_crate_origin_is_stripped_from_messages() {
    assert_eq!(
        strip_config_origin("invalid type: string \"x\", expected u32 for key `tun.mtu`"),
        "invalid type: string \"x\", expected u32"
    );
}

#[test]
fn a_configuration_given_as_text_is_validated_like_a_file() {
    let exit = include_str!("../../config/exit.toml");
    let base = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/config"));
    // Relative paths resolve against `base`, as against a file's directory: the
    // example's certificates are not there.
    let e = Config::parse(exit, base).expect_err("no certificates beside the example");
    assert_eq!(e.path, "tls.ca");
    assert!(e.problem.contains("/config/ca.pem"), "{e:?}");
    let e = Config::parse("role = [", base).expect_err("not TOML");
    assert_eq!(e.path, "configuration");
}

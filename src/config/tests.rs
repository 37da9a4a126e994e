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
            exits: vec![ExitPeer {
                address: "198.19.200.1:4433".into(),
                name: "exit".into(),
                hold: DEFAULT_EXIT_HOLD,
            }],
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

/// A CA and site "s"'s certificate, issued once for these tests.
fn certificates() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("braid-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        crate::cert::init_ca(&dir).expect("a CA");
        crate::cert::issue(&dir, "s").expect("a certificate");
        dir
    })
}

/// An entry's configuration with `exits` (TOML) in place of its exit.
fn entry_with(exits: &str, uplink_peer: &str) -> Result<Config, FieldError> {
    let toml = format!(
        "role = \"entry\"\nsite = \"s\"\n[tun]\n[tls]\nca = \"ca.pem\"\n\
         cert = \"s.pem\"\nkey = \"s.key\"\n{exits}\n\
         [[uplinks]]\nname = \"dsl\"\ninterface = \"eth1\"\n{uplink_peer}\n"
    );
    Config::parse(&toml, certificates())
}

fn exits_of(c: Config) -> Vec<ExitPeer> {
    match c.role {
        RoleConfig::Entry(e) => e.exits,
        RoleConfig::Exit(_) => panic!("an entry"),
    }
}

#[test]
fn one_exit_table_or_a_list_of_exits_in_order_of_preference() {
    let one = entry_with("[exit]\naddress = \"198.19.200.1:4433\"", "").expect("one table");
    assert_eq!(
        exits_of(one),
        vec![ExitPeer {
            address: "198.19.200.1:4433".into(),
            name: "exit".into(),
            hold: DEFAULT_EXIT_HOLD,
        }]
    );
    let two = entry_with(
        "[[exit]]\naddress = \"198.19.200.1:4433\"\nname = \"exit-a\"\n\
         [[exit]]\naddress = \"198.19.201.1:4433\"\nname = \"exit-b\"\nhold_ms = 5000",
        "",
    )
    .expect("a list");
    let exits = exits_of(two);
    assert_eq!(exits.len(), 2);
    assert_eq!(exits[0].name, "exit-a");
    assert_eq!(exits[1].address, "198.19.201.1:4433");
    assert_eq!(exits[1].hold, Duration::from_secs(5));
}

#[test]
fn a_wrong_exit_is_named_by_its_place_in_the_list() {
    let two = |second: &str| {
        entry_with(
            &format!("[[exit]]\naddress = \"198.19.200.1:4433\"\n[[exit]]\n{second}"),
            "",
        )
        .expect_err(second)
    };
    let e = two("address = \"198.19.201.1\"");
    assert_eq!(e.path, "exit[1].address");
    let e = two("address = \"198.19.200.1:4433\"");
    assert_eq!(e.path, "exit[1].address");
    assert!(e.problem.contains("exit[0]"), "{e:?}");
    let e = two("address = \"198.19.201.1:4433\"\nhold_ms = 100000000");
    assert_eq!(e.path, "exit[1].hold_ms");
    let e = two("address = \"198.19.201.1:4433\"\nname = \"a b\"");
    assert_eq!(e.path, "exit[1].name");
    let e = two("address = \"198.19.201.1:4433\"\nholdms = 1");
    assert!(e.problem.contains("holdms"), "{e:?}");
    // One table keeps its paths.
    let e = entry_with("[exit]\naddress = \"x\"", "").expect_err("no port");
    assert_eq!(e.path, "exit.address");
    let e = entry_with("", "").expect_err("no exit");
    assert_eq!(e.path, "exit");
}

#[test]
fn an_uplink_of_its_own_exit_address_needs_a_single_exit() {
    let peer = "peer = \"198.19.1.1:4433\"";
    entry_with("[exit]\naddress = \"198.19.200.1:4433\"", peer).expect("one exit");
    let e = entry_with(
        "[[exit]]\naddress = \"198.19.200.1:4433\"\n[[exit]]\naddress = \"198.19.201.1:4433\"",
        peer,
    )
    .expect_err("two exits");
    assert_eq!(e.path, "uplinks[0].peer");
}

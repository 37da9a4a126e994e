//! Configuration: TOML through the `config` crate with `BRAID__SECTION__KEY`
//! environment overrides, validated into typed structs.
//!
//! Raw serde structs (`raw.rs`) are turned into the types below by [`Config::load`];
//! a validated [`Config`] cannot be invalid, and every error names the offending key
//! (`uplinks[1].interface: no such interface "eth7"`). Relative file paths are taken
//! relative to the configuration file's directory.

mod raw;

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;

use crate::cert::TlsConfig;
use crate::core::background::{BackgroundSettings, MAX_INTERVAL, MIN_INTERVAL, Method};
use crate::core::cutoff::{CutOff, QualityLimits};
use crate::core::data_cap::{CapAction, CapPeriod, DataCap};
use crate::core::engine::{SiteSpec, UplinkPolicy, UplinkTier};
use crate::core::field_error::FieldError;
use crate::core::lane_cc;
use crate::core::sched::Algorithm;
use crate::core::shaper::{AbeScheduler, AbeSettings};
use crate::core::tiers::TierSettings;
use crate::core::wire::{MAX_RTT_LIMIT_MS, check_name};
use raw::RawConfig;

fn err<T>(path: impl Into<String>, problem: impl Into<String>) -> Result<T, FieldError> {
    Err(FieldError::new(path, problem))
}

/// `value`, or an error naming `path` when it is outside `range`.
fn within<T: PartialOrd + std::fmt::Display>(
    path: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, FieldError> {
    if range.contains(&value) {
        Ok(value)
    } else {
        err(
            path,
            format!("{value} is outside {}..={}", range.start(), range.end()),
        )
    }
}

/// A validated gateway configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub role: RoleConfig,
    pub tun: TunConfig,
    pub tls: TlsConfig,
    pub scheduler: SchedulerConfig,
    pub pacing: PacingConfig,
    pub abe: AbeConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
    /// How uplink tiers take over and give back (`[tiers]`).
    pub tiers: TierSettings,
    /// Where the entry keeps its uplinks' data cap counts (`caps.state_file`).
    pub caps_state_file: Option<PathBuf>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RoleConfig {
    Entry(EntryConfig),
    Exit(ExitConfig),
}

#[derive(Debug, Clone, PartialEq)]
pub struct EntryConfig {
    pub site: String,
    /// The exits, in order of preference (`[[exit]]`; one `[exit]` is a list of one):
    /// every lane goes to the first that answers (`core::exit_choice`).
    pub exits: Vec<ExitPeer>,
    pub uplinks: Vec<UplinkConfig>,
}

/// One exit an entry may send its lanes to.
#[derive(Debug, Clone, PartialEq)]
pub struct ExitPeer {
    /// `host:port`: every uplink's peer, unless the uplink names its own (one exit only).
    pub address: String,
    /// The name the exit's certificate must carry.
    pub name: String,
    /// How long the exit must answer again, after a failure, before the lanes return
    /// to it from an exit listed after it.
    pub hold: Duration,
}

/// How long a returning exit must answer before the lanes move back to it, unless its
/// `hold_ms` says otherwise: long enough that an exit restarting in a loop, or a
/// path that flaps, does not move every lane of the site back and forth.
pub const DEFAULT_EXIT_HOLD: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq)]
pub struct UplinkConfig {
    pub name: String,
    pub interface: String,
    pub source: Option<IpAddr>,
    /// `host:port` of the exit over this uplink, when it differs from `exit.address`.
    pub peer: Option<String>,
    pub rate_up_kbps: Option<u64>,
    pub rate_down_kbps: Option<u64>,
    /// How much the uplink's one-way delay varies by itself, lowest to highest (ms):
    /// the lanes' delay cap allows it (`core::lane_cc`).
    pub delay_variation_ms: Option<u64>,
    /// The uplink's tier, 1 highest (`core::tiers`), whether it also carries when
    /// the better tiers are full, and whether its lanes are dialled only when its
    /// tier is wanted (`standby = "cold"`).
    pub priority: u32,
    pub overflow: bool,
    pub cold: bool,
    /// The uplink's quality cut-off (`max_rtt_ms`, `max_loss_percent` in hundredths
    /// of a percent, `cut_off`; `core::cutoff`).
    pub max_rtt_ms: Option<u64>,
    pub max_loss_bp: Option<u32>,
    pub cut_off: CutOff,
    /// The uplink's data cap (`cap_mb` and the keys beside it; `core::data_cap`).
    pub cap: Option<DataCap>,
}

impl UplinkConfig {
    /// Its tier and quality limits, as its lanes carry them.
    pub fn policy(&self) -> UplinkPolicy {
        UplinkPolicy {
            priority: self.priority,
            overflow: self.overflow,
            quality: QualityLimits {
                max_rtt: self.max_rtt_ms.map(Duration::from_millis),
                max_loss_bp: self.max_loss_bp,
                cut_off: self.cut_off,
            },
        }
    }

    /// Its place in the tiers, as the engine takes it.
    pub fn tier(&self) -> UplinkTier {
        UplinkTier {
            name: self.name.clone(),
            priority: self.priority,
            overflow: self.overflow,
            cold: self.cold,
            off: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExitConfig {
    pub listen: SocketAddr,
    pub sites: Vec<SiteSpec>,
    /// Data-path threads (`listen.threads`); `None`: one per core, at most one per
    /// site at the start. See [`ExitConfig::data_path_threads`].
    pub threads: Option<usize>,
    /// Whether a site's packets to another site's prefixes are forwarded
    /// (`site_to_site`); refused and counted when not.
    pub site_to_site: bool,
}

/// The most data-path threads an exit runs (`listen.threads`).
pub const MAX_EXIT_THREADS: usize = 64;

impl ExitConfig {
    /// How many data-path threads serve the sites: `listen.threads`, else one per
    /// core but no more than there are sites (a thread without a site of its own
    /// would only hand the packets it reads over).
    pub fn data_path_threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            cores.min(self.sites.len()).clamp(1, MAX_EXIT_THREADS)
        })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TunConfig {
    pub name: String,
    pub addresses: Vec<IpNet>,
    pub mtu: u32,
    pub routes: Vec<IpNet>,
    /// Ask the kernel for TCP segmentation and checksum offloads (`tun.offload`,
    /// default true).
    pub offload: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    pub algorithm: Algorithm,
    pub flow_idle_timeout: Duration,
    pub max_flows: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct PacingConfig {
    pub state_file: Option<PathBuf>,
    pub default_rate_kbps: u64,
    /// How background applications find the spare capacity.
    pub background: BackgroundSettings,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AbeConfig {
    pub green_dscp: u8,
    pub blue_dscp: u8,
    pub green_inner_dscp: Vec<u8>,
    /// How uplinks of known rate are shaped and served.
    pub queues: AbeSettings,
}

/// `[log]`: what the daemon logs, as a tracing filter (`info`, `braid=debug`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub filter: String,
}

/// The log filter when `log.filter` is not set.
pub const DEFAULT_LOG_FILTER: &str = "info";

#[derive(Debug, Clone, PartialEq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    pub token_file: Option<PathBuf>,
}

/// Bytes QUIC adds around a DATAGRAM payload in a full-size packet (quinn's
/// current MTU minus `max_datagram_size()` is always 38), plus braid's own datagram
/// header (`wire::DATAGRAM_HEADER_LEN`).
pub const QUIC_DATAGRAM_OVERHEAD: u32 = 38 + crate::core::wire::DATAGRAM_HEADER_LEN as u32;
/// Largest UDP payload on a 1500-byte path.
pub const UDP_PAYLOAD_V4: u32 = 1500 - 20 - 8;
pub const UDP_PAYLOAD_V6: u32 = 1500 - 40 - 8;

impl Config {
    /// What is allowed but worth a word: uplinks whose interface does not exist
    /// (yet): their lanes wait for it.
    pub fn warnings(&self) -> Vec<String> {
        let RoleConfig::Entry(entry) = &self.role else {
            return Vec::new();
        };
        entry
            .uplinks
            .iter()
            .enumerate()
            .filter(|(_, u)| !Path::new("/sys/class/net").join(&u.interface).exists())
            .map(|(i, u)| {
                format!(
                    "uplinks[{i}].interface: no such interface {:?} now; its lanes wait for it",
                    u.interface
                )
            })
            .collect()
    }

    /// Reads, merges environment overrides into, and validates a configuration file.
    pub fn load(file: &Path) -> Result<Config, FieldError> {
        let file_label = file.display().to_string();
        if let Err(e) = std::fs::metadata(file) {
            return err(file_label, format!("cannot read: {e}"));
        }
        from_sources(
            file_sources(file, "BRAID"),
            &file_label,
            file.parent().unwrap_or(Path::new(".")),
        )
    }

    /// Validates a configuration given as TOML text, without environment overrides;
    /// relative paths in it are relative to `base`.
    pub fn parse(toml: &str, base: &Path) -> Result<Config, FieldError> {
        let sources = config::Config::builder()
            .add_source(config::File::from_str(toml, config::FileFormat::Toml));
        from_sources(sources, "configuration", base)
    }
}

/// Merges `sources` and validates the result; `label` names the whole in errors.
fn from_sources(
    sources: config::ConfigBuilder<config::builder::DefaultState>,
    label: &str,
    base: &Path,
) -> Result<Config, FieldError> {
    validate(deserialize(sources, label)?, base)
}

/// A TOML file with environment overrides `PREFIX__KEY` (`__` between nested keys),
/// as the gateway's and the controller's files are read.
pub fn file_sources(
    file: &Path,
    env_prefix: &str,
) -> config::ConfigBuilder<config::builder::DefaultState> {
    config::Config::builder()
        .add_source(config::File::from(file).format(config::FileFormat::Toml))
        .add_source(
            config::Environment::with_prefix(env_prefix)
                .prefix_separator("__")
                .separator("__")
                .try_parsing(true),
        )
}

/// Merges `sources` into the raw form `T`; errors carry the offending key's path
/// (`label` for the whole). The gateway's and the controller's files alike.
pub fn deserialize<T: serde::de::DeserializeOwned>(
    sources: config::ConfigBuilder<config::builder::DefaultState>,
    label: &str,
) -> Result<T, FieldError> {
    let merged = sources.build().map_err(|e| FieldError {
        path: label.to_string(),
        problem: e.to_string(),
    })?;
    serde_path_to_error::deserialize(merged).map_err(|e| {
        let path = e.path().to_string();
        FieldError {
            path: if path == "." { label.to_string() } else { path },
            problem: strip_config_origin(&e.into_inner().to_string()),
        }
    })
}

/// The `config` crate appends where a value came from; the path already says it.
fn strip_config_origin(message: &str) -> String {
    message
        .split(" for key ")
        .next()
        .unwrap_or(message)
        .to_string()
}

fn validate(raw: RawConfig, base: &Path) -> Result<Config, FieldError> {
    let role = match raw.role.as_str() {
        "entry" => RoleConfig::Entry(validate_entry(&raw)?),
        "exit" => RoleConfig::Exit(validate_exit(&raw)?),
        other => {
            return err(
                "role",
                format!("{other:?} is neither \"entry\" nor \"exit\""),
            );
        }
    };
    let tun = validate_tun(&raw, &role)?;
    let tls = TlsConfig {
        ca: existing_file("tls.ca", base, &raw.tls.ca)?,
        cert: existing_file("tls.cert", base, &raw.tls.cert)?,
        key: existing_file("tls.key", base, &raw.tls.key)?,
    };
    let cert_name = crate::cert::check_tls_files(&tls)?;
    if let RoleConfig::Entry(entry) = &role
        && cert_name != entry.site
    {
        return err(
            "tls.cert",
            format!(
                "the certificate is for {cert_name:?}, not for site {:?}",
                entry.site
            ),
        );
    }
    let caps_state_file = match (&role, &raw.caps.state_file) {
        (RoleConfig::Exit(_), Some(_)) => {
            return err(
                "caps.state_file",
                "only an entry gateway counts its uplinks' caps",
            );
        }
        (_, file) => file.as_deref().map(|p| base.join(p)),
    };
    Ok(Config {
        role,
        tun,
        tls,
        scheduler: validate_scheduler(&raw.scheduler)?,
        tiers: validate_tiers(&raw.tiers)?,
        caps_state_file,
        pacing: PacingConfig {
            state_file: raw.pacing.state_file.as_deref().map(|p| base.join(p)),
            default_rate_kbps: raw.pacing.default_rate_kbps.unwrap_or(0),
            background: validate_background(&raw.pacing)?,
        },
        abe: validate_abe(&raw.abe)?,
        admin: AdminConfig {
            listen: match &raw.admin.listen {
                None => SocketAddr::from(([127, 0, 0, 1], 9190)),
                Some(s) => s
                    .parse()
                    .or_else(|_| err("admin.listen", format!("{s:?} is not an address:port")))?,
            },
            token_file: raw
                .admin
                .token_file
                .as_deref()
                .map(|p| existing_file("admin.token_file", base, p))
                .transpose()?,
        },
        log: LogConfig {
            filter: validate_log_filter(raw.log.filter.as_deref())?,
        },
    })
}

fn validate_log_filter(filter: Option<&str>) -> Result<String, FieldError> {
    let filter = filter.unwrap_or(DEFAULT_LOG_FILTER);
    tracing_subscriber::EnvFilter::builder()
        .parse(filter)
        .or_else(|e| err("log.filter", format!("{filter:?} is not a log filter: {e}")))?;
    Ok(filter.to_string())
}

fn validate_entry(raw: &RawConfig) -> Result<EntryConfig, FieldError> {
    let Some(site) = &raw.site else {
        return err("site", "missing: an entry gateway needs its site id");
    };
    check_name("site", site).or_else(|e| err("site", e.to_string()))?;
    if raw.listen.is_some() {
        return err("listen", "only an exit gateway listens; remove [listen]");
    }
    if !raw.sites.is_empty() {
        return err("sites", "only an exit gateway serves [[sites]]");
    }
    if raw.site_to_site.is_some() {
        return err(
            "site_to_site",
            "only an exit gateway forwards between sites",
        );
    }
    let exits = validate_exits(&raw.exit.0)?;
    if raw.uplinks.is_empty() {
        return err("uplinks", "an entry gateway needs at least one [[uplinks]]");
    }
    let mut names = HashSet::new();
    let mut uplinks = Vec::new();
    for (i, u) in raw.uplinks.iter().enumerate() {
        let at = |key: &str| format!("uplinks[{i}].{key}");
        check_name("name", &u.name).or_else(|e| err(at("name"), e.to_string()))?;
        if !names.insert(u.name.as_str()) {
            return err(
                at("name"),
                format!("{:?} is used by another uplink", u.name),
            );
        }
        // An interface that does not exist yet is waited for (`Config::warnings`).
        if u.interface.is_empty()
            || u.interface.len() > 15
            || u.interface.contains(['/', ' '])
            || u.interface == "."
            || u.interface == ".."
        {
            return err(
                at("interface"),
                format!("{:?} is not an interface name", u.interface),
            );
        }
        let source = match &u.source {
            None => None,
            Some(s) => Some(
                s.parse::<IpAddr>()
                    .or_else(|_| err(at("source"), format!("{s:?} is not an IP address")))?,
            ),
        };
        if let Some(peer) = &u.peer {
            check_host_port(&at("peer"), peer)?;
            if exits.len() > 1 {
                return err(
                    at("peer"),
                    "an uplink's own exit address needs a single [exit]; with several, \
                     route each exit's address over every uplink",
                );
            }
        }
        for (key, rate) in [
            ("rate_up_kbps", u.rate_up_kbps),
            ("rate_down_kbps", u.rate_down_kbps),
        ] {
            if rate == Some(0) {
                return err(
                    at(key),
                    "must be positive; leave it out when the rate is unknown",
                );
            }
        }
        if u.delay_variation_ms
            .is_some_and(|v| v > lane_cc::MAX_DELAY_VARIATION_MS)
        {
            return err(
                at("delay_variation_ms"),
                format!(
                    "must be at most {} (ms, the one-way delay's spread from lowest \
                     to highest)",
                    lane_cc::MAX_DELAY_VARIATION_MS
                ),
            );
        }
        uplinks.push(UplinkConfig {
            name: u.name.clone(),
            interface: u.interface.clone(),
            source,
            peer: u.peer.clone(),
            rate_up_kbps: u.rate_up_kbps,
            rate_down_kbps: u.rate_down_kbps,
            delay_variation_ms: u.delay_variation_ms.filter(|&v| v > 0),
            priority: match u.priority {
                Some(0) => return err(at("priority"), "must be 1 (the highest) or more"),
                p => p.unwrap_or(1),
            },
            overflow: u.overflow.unwrap_or(false),
            cold: match u.standby.as_deref() {
                None | Some("warm") => false,
                Some("cold") => true,
                Some(other) => {
                    return err(
                        at("standby"),
                        format!("{other:?} is neither \"warm\" nor \"cold\""),
                    );
                }
            },
            max_rtt_ms: match u.max_rtt_ms {
                Some(ms) if ms == 0 || ms > MAX_RTT_LIMIT_MS => {
                    return err(
                        at("max_rtt_ms"),
                        format!("must be 1 to {MAX_RTT_LIMIT_MS} (ms)"),
                    );
                }
                ms => ms,
            },
            max_loss_bp: match u.max_loss_percent {
                Some(p) if !(p > 0.0 && p <= 100.0) => {
                    return err(at("max_loss_percent"), "must be above 0 and at most 100");
                }
                p => p.map(|p| ((p * 100.0).round() as u32).max(1)),
            },
            cut_off: match u.cut_off.as_deref() {
                None | Some("green") => CutOff::Green,
                Some("all") => CutOff::All,
                Some(other) => {
                    return err(
                        at("cut_off"),
                        format!("{other:?} is neither \"green\" nor \"all\""),
                    );
                }
            },
            cap: validate_cap(u, &at)?,
        });
    }
    Ok(EntryConfig {
        site: site.clone(),
        exits,
        uplinks,
    })
}

/// The `[exit]` table or `[[exit]]` list: each reachable at a `host:port`, certified
/// under a name (default "exit"); two may not be the same place.
fn validate_exits(raw: &[raw::RawExitPeer]) -> Result<Vec<ExitPeer>, FieldError> {
    if raw.is_empty() {
        return err("exit", "missing: an entry gateway needs [exit] address");
    }
    let mut exits: Vec<ExitPeer> = Vec::new();
    for (i, e) in raw.iter().enumerate() {
        // One table keeps the paths it always had.
        let at = |key: &str| match raw.len() {
            1 => format!("exit.{key}"),
            _ => format!("exit[{i}].{key}"),
        };
        check_host_port(&at("address"), &e.address)?;
        if let Some(k) = exits.iter().position(|o| o.address == e.address) {
            return err(
                at("address"),
                format!("{:?} is exit[{k}]'s address too", e.address),
            );
        }
        let name = e.name.clone().unwrap_or_else(|| "exit".to_string());
        check_name("name", &name).or_else(|x| err(at("name"), x.to_string()))?;
        let hold = match e.hold_ms {
            None => DEFAULT_EXIT_HOLD,
            Some(ms) if ms <= 86_400_000 => Duration::from_millis(ms),
            Some(_) => return err(at("hold_ms"), "must be at most a day"),
        };
        exits.push(ExitPeer {
            address: e.address.clone(),
            name,
            hold,
        });
    }
    Ok(exits)
}

fn validate_exit(raw: &RawConfig) -> Result<ExitConfig, FieldError> {
    if raw.site.is_some() {
        return err(
            "site",
            "only an entry gateway has a site id; an exit has [[sites]]",
        );
    }
    if !raw.exit.0.is_empty() {
        return err("exit", "only an entry gateway names its exit");
    }
    if !raw.uplinks.is_empty() {
        return err("uplinks", "only an entry gateway has [[uplinks]]");
    }
    let Some(listen) = &raw.listen else {
        return err("listen", "missing: an exit gateway needs [listen] address");
    };
    let threads = match listen.threads {
        None => None,
        Some(n) if (1..=MAX_EXIT_THREADS as u64).contains(&n) => Some(n as usize),
        Some(n) => {
            return err(
                "listen.threads",
                format!("{n} is out of range: 1 to {MAX_EXIT_THREADS} data-path threads"),
            );
        }
    };
    let listen = listen.address.parse().or_else(|_| {
        err(
            "listen.address",
            format!("{:?} is not an address:port", listen.address),
        )
    })?;
    if raw.sites.is_empty() {
        return err("sites", "an exit gateway needs at least one [[sites]]");
    }
    let mut sites: Vec<SiteSpec> = Vec::new();
    for (i, s) in raw.sites.iter().enumerate() {
        check_name("id", &s.id).or_else(|e| err(format!("sites[{i}].id"), e.to_string()))?;
        if sites.iter().any(|o| o.id == s.id) {
            return err(
                format!("sites[{i}].id"),
                format!("{:?} is used by another site", s.id),
            );
        }
        if s.prefixes.is_empty() {
            return err(
                format!("sites[{i}].prefixes"),
                "a site needs at least one prefix",
            );
        }
        let mut prefixes = Vec::new();
        for (j, p) in s.prefixes.iter().enumerate() {
            let at = format!("sites[{i}].prefixes[{j}]");
            let net = parse_prefix(&at, p)?;
            for (k, other) in sites.iter().enumerate() {
                if let Some(o) = other.prefixes.iter().find(|o| overlaps(o, &net)) {
                    return err(
                        at,
                        format!("{net} overlaps {o} of sites[{k}] ({:?})", other.id),
                    );
                }
            }
            prefixes.push(net);
        }
        sites.push(SiteSpec {
            id: s.id.clone(),
            prefixes,
        });
    }
    Ok(ExitConfig {
        listen,
        sites,
        threads,
        site_to_site: raw.site_to_site.unwrap_or(false),
    })
}

fn validate_tun(raw: &RawConfig, role: &RoleConfig) -> Result<TunConfig, FieldError> {
    let t = &raw.tun;
    let name = t.name.clone().unwrap_or_else(|| "braid0".to_string());
    if name.is_empty() || name.len() > 15 || name.contains(['/', ' ', '\0']) {
        return err(
            "tun.name",
            format!("{name:?} is not a valid interface name (1 to 15 bytes)"),
        );
    }
    let addresses = match &t.address {
        None => Vec::new(),
        Some(a) => {
            let list = match a {
                raw::OneOrMany::One(s) => vec![s.clone()],
                raw::OneOrMany::Many(v) => v.clone(),
            };
            list.iter()
                .enumerate()
                .map(|(i, s)| {
                    let at = if list.len() == 1 {
                        "tun.address".into()
                    } else {
                        format!("tun.address[{i}]")
                    };
                    s.parse::<IpNet>().or_else(|_| {
                        err(
                            at,
                            format!("{s:?} is not an address/prefix such as \"198.18.250.1/30\""),
                        )
                    })
                })
                .collect::<Result<_, _>>()?
        }
    };
    let mtu = match t.mtu {
        Some(m) => within("tun.mtu", m, 1280..=65535)?,
        None => default_tun_mtu(role),
    };
    let routes = t
        .routes
        .iter()
        .enumerate()
        .map(|(i, r)| parse_prefix(&format!("tun.routes[{i}]"), r))
        .collect::<Result<_, _>>()?;
    Ok(TunConfig {
        name,
        addresses,
        mtu,
        routes,
        offload: t.offload.unwrap_or(true),
    })
}

/// What one QUIC datagram carries over a 1500-byte path: 1426 bytes over IPv4 uplinks,
/// 1406 as soon as one uplink may be IPv6 (a host name may resolve to either).
fn default_tun_mtu(role: &RoleConfig) -> u32 {
    let v4_only = match role {
        RoleConfig::Entry(e) => e.uplinks.iter().all(|u| {
            let v4 = |peer: &str| peer.parse::<SocketAddr>().is_ok_and(|a| a.is_ipv4());
            let peer_v4 = match &u.peer {
                Some(peer) => v4(peer),
                None => e.exits.iter().all(|x| v4(&x.address)),
            };
            peer_v4 && u.source.is_none_or(|s| s.is_ipv4())
        }),
        RoleConfig::Exit(x) => x.listen.is_ipv4(),
    };
    let payload = if v4_only {
        UDP_PAYLOAD_V4
    } else {
        UDP_PAYLOAD_V6
    };
    payload - QUIC_DATAGRAM_OVERHEAD
}

fn validate_background(raw: &raw::RawPacing) -> Result<BackgroundSettings, FieldError> {
    let mut settings = BackgroundSettings::default();
    if let Some(name) = &raw.background_method {
        settings.method = Method::from_name(name).map_or_else(
            || {
                err(
                    "pacing.background_method",
                    format!(
                        "{name:?} is not one of {}, {}",
                        Method::BinarySearch.as_str(),
                        Method::StochasticApproximation.as_str()
                    ),
                )
            },
            Ok,
        )?;
    }
    if let Some(ms) = raw.background_interval_ms {
        let interval = Duration::from_millis(ms);
        if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&interval) {
            return err(
                "pacing.background_interval_ms",
                format!(
                    "must be {} to {}",
                    MIN_INTERVAL.as_millis(),
                    MAX_INTERVAL.as_millis()
                ),
            );
        }
        settings.interval = interval;
    }
    Ok(settings)
}

/// An uplink's data cap: `cap_mb` (absent: none) and the keys that only go with it.
fn validate_cap(
    u: &raw::RawUplink,
    at: &dyn Fn(&str) -> String,
) -> Result<Option<DataCap>, FieldError> {
    let Some(mb) = u.cap_mb else {
        for (key, set) in [
            ("cap_period", u.cap_period.is_some()),
            ("cap_reset_day", u.cap_reset_day.is_some()),
            ("cap_action", u.cap_action.is_some()),
            ("cap_warn_percent", u.cap_warn_percent.is_some()),
        ] {
            if set {
                return err(at(key), "goes with cap_mb, which is not set");
            }
        }
        return Ok(None);
    };
    if mb == 0 {
        return err(at("cap_mb"), "must be at least 1 (MB, 1,000,000 bytes)");
    }
    let reset_day = |max: u8, default: u8| match u.cap_reset_day {
        None => Ok(default),
        Some(d) if (1..=max).contains(&d) => Ok(d),
        Some(d) => err(at("cap_reset_day"), format!("{d} is not 1 to {max}")),
    };
    let period = match u.cap_period.as_deref() {
        None | Some("month") => CapPeriod::Month {
            day: reset_day(28, 1)?,
        },
        Some("week") => CapPeriod::Week {
            weekday: reset_day(7, 1)?,
        },
        Some(other) => {
            if u.cap_reset_day.is_some() {
                return err(
                    at("cap_reset_day"),
                    "goes with a month's or a week's period",
                );
            }
            match other {
                "day" => CapPeriod::Day,
                span => match span.strip_suffix('s').and_then(|n| n.parse::<u64>().ok()) {
                    Some(seconds) if seconds >= 10 => CapPeriod::Every { seconds },
                    _ => {
                        return err(
                            at("cap_period"),
                            format!(
                                "{span:?} is not \"month\", \"week\", \"day\" or a number of seconds (at least 10) like \"3600s\""
                            ),
                        );
                    }
                },
            }
        }
    };
    let action = match u.cap_action.as_deref() {
        None | Some("cold") => CapAction::Cold,
        Some("off") => CapAction::Off,
        Some(other) => {
            return err(
                at("cap_action"),
                format!("{other:?} is neither \"cold\" nor \"off\""),
            );
        }
    };
    let warn = u.cap_warn_percent.clone().unwrap_or_else(|| vec![80, 95]);
    if warn.iter().any(|&p| p == 0 || p > 99) || warn.windows(2).any(|w| w[0] >= w[1]) {
        return err(
            at("cap_warn_percent"),
            "must be percentages of 1 to 99, ascending",
        );
    }
    Ok(Some(DataCap {
        bytes: mb.saturating_mul(1_000_000),
        period,
        warn_at: warn.iter().map(|&p| f64::from(p) / 100.0).collect(),
        action,
    }))
}

fn validate_tiers(raw: &raw::RawTiers) -> Result<TierSettings, FieldError> {
    let defaults = TierSettings::default();
    let ms = |key: &str, v: Option<u64>, default: Duration| match v {
        Some(0) => err(format!("tiers.{key}"), "must be at least 1"),
        Some(ms) if ms > 3_600_000 => err(format!("tiers.{key}"), "must be at most an hour"),
        Some(ms) => Ok(Duration::from_millis(ms)),
        None => Ok(default),
    };
    Ok(TierSettings {
        hold: ms("hold_ms", raw.hold_ms, defaults.hold)?,
        overflow_after: ms(
            "overflow_after_ms",
            raw.overflow_after_ms,
            defaults.overflow_after,
        )?,
    })
}

fn validate_scheduler(raw: &raw::RawScheduler) -> Result<SchedulerConfig, FieldError> {
    let algorithm = match raw.algorithm.as_deref() {
        None => Algorithm::Afmt,
        Some(name) => match Algorithm::from_name(name) {
            Some(a) => a,
            None => {
                let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
                return err(
                    "scheduler.algorithm",
                    format!("{name:?} is not one of {}", names.join(", ")),
                );
            }
        },
    };
    if raw.flow_idle_timeout_ms == Some(0) {
        return err("scheduler.flow_idle_timeout_ms", "must be at least 1");
    }
    let max_flows = raw.max_flows.unwrap_or(65_536);
    if max_flows == 0 {
        return err("scheduler.max_flows", "must be at least 1");
    }
    Ok(SchedulerConfig {
        algorithm,
        flow_idle_timeout: Duration::from_millis(raw.flow_idle_timeout_ms.unwrap_or(10_000)),
        max_flows: usize::try_from(max_flows).unwrap_or(usize::MAX),
    })
}

fn validate_abe(raw: &raw::RawAbe) -> Result<AbeConfig, FieldError> {
    let dscp = |key: &str, v: Option<u8>, default: u8| match v {
        Some(d) if d > 63 => err(format!("abe.{key}"), format!("{d} is not a DSCP (0 to 63)")),
        Some(d) => Ok(d),
        None => Ok(default),
    };
    let green_inner_dscp = raw.green_inner_dscp.clone().unwrap_or_else(|| vec![46]);
    if let Some((i, d)) = green_inner_dscp.iter().enumerate().find(|(_, d)| **d > 63) {
        return err(
            format!("abe.green_inner_dscp[{i}]"),
            format!("{d} is not a DSCP (0 to 63)"),
        );
    }
    let defaults = AbeSettings::default();
    let scheduler = match raw.scheduler.as_deref() {
        None | Some("dsd") => AbeScheduler::Dsd,
        Some("fifo") => AbeScheduler::Fifo,
        Some(other) => {
            return err(
                "abe.scheduler",
                format!("{other:?} is neither \"dsd\" nor \"fifo\""),
            );
        }
    };
    // A green delay shorter than a packet's time on a slow uplink refuses all green;
    // a buffer smaller than two packets drops what one burst brings.
    let millis = |key: &str, value: Option<u64>, default: Duration, range| {
        value.map_or(Ok(default), |ms| {
            within(&format!("abe.{key}"), ms, range).map(Duration::from_millis)
        })
    };
    let buffer_bytes = raw.buffer_bytes.map_or(Ok(defaults.buffer_bytes), |b| {
        within("abe.buffer_bytes", b, 3_000..=100_000_000)
    })?;
    Ok(AbeConfig {
        green_dscp: dscp("green_dscp", raw.green_dscp, 45)?,
        blue_dscp: dscp("blue_dscp", raw.blue_dscp, 0)?,
        green_inner_dscp,
        queues: AbeSettings {
            scheduler,
            buffer_bytes,
            green_delay: millis(
                "green_delay_ms",
                raw.green_delay_ms,
                defaults.green_delay,
                1..=1000,
            )?,
            control_interval: millis(
                "control_interval_ms",
                raw.control_interval_ms,
                defaults.control_interval,
                10..=60_000,
            )?,
        },
    })
}

fn parse_prefix(at: &str, s: &str) -> Result<IpNet, FieldError> {
    s.parse::<IpNet>().map(|n| n.trunc()).or_else(|_| {
        err(
            at,
            format!("{s:?} is not a prefix such as \"198.18.0.0/24\""),
        )
    })
}

fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

fn check_host_port(at: &str, s: &str) -> Result<(), FieldError> {
    let ok = match s.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    };
    if ok || s.to_socket_addrs().is_ok() {
        Ok(())
    } else {
        err(at, format!("{s:?} is not host:port"))
    }
}

fn existing_file(at: &str, base: &Path, p: &str) -> Result<PathBuf, FieldError> {
    let path = base.join(p);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(path),
        Ok(_) => err(at, format!("{} is not a file", path.display())),
        Err(e) => err(at, format!("cannot read {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests;

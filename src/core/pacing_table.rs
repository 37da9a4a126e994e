//! The applications of a site (SPEC §4): the controller's table and its validation.
//!
//! Contract: [`PacingTable::parse`] accepts exactly the JSON of SPEC §4 and rejects
//! anything else with the path of the offending field; a table that parses is valid
//! (unique names, sane ranges), so applying it cannot fail.

use std::fmt;

use ipnet::IpNet;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::field_error::FieldError;
use super::lane::Colour;

/// The application of everything no rule matches; reserved as a table name.
pub const DEFAULT_APP: &str = "default";
/// Applications a table may hold: the 10,000 per gateway SPEC asks braid to scale to,
/// and a bound on what one request can make the gateway allocate. Each application
/// costs about 7 kB at rest (its pacer, classifier rule and metrics) and its metrics
/// about as much again while `/metrics` is rendered: 65,536 of them made an exit's
/// RSS 1 GB and its `/metrics` 37 MB; 10,000 make it 83 MB (173 MB after scrapes).
pub const MAX_APPS: usize = 10_000;
/// The longest application name (names are metric labels and log fields).
pub const MAX_NAME_LEN: usize = 64;
/// The fastest rate a table may give (100 Gbit/s).
pub const MAX_RATE_KBPS: u64 = 100_000_000;
/// A queue must hold at least one full-size packet.
pub const MIN_QUEUE_LIMIT: u64 = 1500;
/// The largest queue or burst an application may have (64 MiB).
pub const MAX_QUEUE_BYTES: u64 = 64 << 20;

/// Which way a packet travels relative to the site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the site's LAN to the remote side: paced by the entry (`rate_up_kbps`).
    Up,
    /// From the remote side to the site's LAN: paced by the exit (`rate_down_kbps`).
    Down,
}

impl Direction {
    /// The other way.
    pub fn reverse(self) -> Direction {
        match self {
            Direction::Up => Direction::Down,
            Direction::Down => Direction::Up,
        }
    }

    /// The `direction` label of the application metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Up => "up",
            Direction::Down => "down",
        }
    }
}

/// Index of an application in its site's table: 0 is `default`, `i + 1` the table's
/// `apps[i]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppIdx(pub u32);

impl AppIdx {
    pub const DEFAULT: AppIdx = AppIdx(0);
}

/// A controller's application table (SPEC §4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacingTable {
    pub version: u64,
    /// The version this table replaces: given, the table is refused unless that is
    /// the version in force (a controller's compare-and-swap; without it, any table
    /// not older than the one in force replaces it). Not kept with the table.
    #[serde(default, skip_serializing)]
    pub replaces: Option<u64>,
    #[serde(default)]
    pub apps: Vec<AppSpec>,
    /// The most the copies of `duplicate` applications may add to what this gateway
    /// sends for the site, in kbit/s; absent: [`DEFAULT_DUPLICATE_KBPS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duplicate_kbps: Option<u64>,
    /// The `braid controller` that wrote the table, by its `name`: another controller
    /// leaves the site to it while it keeps renewing the table
    /// (`core::allocation::lease`). The gateway keeps and reports it, nothing else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
}

impl PacingTable {
    /// Whether `other` paces the same applications the same way: only its version
    /// or writer differ (a controller renewing it).
    pub fn same_applications(&self, other: &PacingTable) -> bool {
        self.apps == other.apps && self.duplicate_kbps == other.duplicate_kbps
    }

    /// The table that follows this one, replacing it: the next version, the same
    /// content.
    pub fn successor(&self) -> PacingTable {
        PacingTable {
            version: self.version + 1,
            replaces: Some(self.version),
            ..self.clone()
        }
    }
}

/// The longest name of a controller (`controller`).
pub const MAX_CONTROLLER_LEN: usize = 64;

/// Whether `name` may name a controller: 1 to [`MAX_CONTROLLER_LEN`] bytes of ASCII
/// letters, digits, `-`, `_` and `.` (a host name will do).
pub fn is_controller_name(name: &str) -> bool {
    is_name(name, MAX_CONTROLLER_LEN, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')
    })
}

/// Whether `name` is 1 to `max` bytes, each of them `allowed`.
fn is_name(name: &str, max: usize, allowed: impl Fn(u8) -> bool) -> bool {
    !name.is_empty() && name.len() <= max && name.bytes().all(allowed)
}

/// The duplication budget of a site whose table gives none: a dozen calls of 64
/// kbit/s with their headers.
pub const DEFAULT_DUPLICATE_KBPS: u64 = 1000;

/// One application of a table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppSpec {
    pub name: String,
    #[serde(default, rename = "match")]
    pub matches: MatchSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_up_kbps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_down_kbps: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_limit_bytes: Option<u64>,
    /// Absent: the packet's inner DSCP decides (`abe.green_inner_dscp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub colour: Option<Colour>,
    /// The uplinks, by name, that carry the application's packets; absent: all of
    /// them (see [`AppSpec::allows`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplinks: Option<Vec<String>>,
    /// Uplinks, by name, that do not carry the application's packets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub avoid: Vec<String>,
    /// While none of the application's uplinks has a lane up, its packets are
    /// dropped instead of taking the others.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
    /// Each packet also goes, as a copy, over a second uplink, within the table's
    /// `duplicate_kbps`; the receiving gateway passes whichever arrives first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub duplicate: bool,
    /// `background`: the application gets only the capacity the site's others leave
    /// (`core/background.rs`); its `rate_*_kbps`, where given, cap it.
    #[serde(default, skip_serializing_if = "AppClass::is_foreground")]
    pub class: AppClass,
    /// Each flow of the application is worth something only if it carries `bytes`
    /// within `ms` of its first packet (`core/deadline.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<DeadlineSpec>,
    /// The controller's class of the application (`braid controller`'s catalogue,
    /// e.g. `voip`): the gateway reports it and does nothing else with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utility: Option<String>,
}

/// The longest name of a controller's class (`apps[].utility`).
pub const MAX_UTILITY_LEN: usize = 32;

/// Whether `name` may name a controller's class: 1 to [`MAX_UTILITY_LEN`] characters
/// of `a-z`, `0-9`, `-` and `_` (the table's `apps[].utility`, the controller's
/// `classes[].name`).
pub fn is_utility_name(name: &str) -> bool {
    is_name(name, MAX_UTILITY_LEN, |b| {
        b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_')
    })
}

/// An application's `deadline`: per flow, `ms` from its first packet to carry its
/// `bytes` of data (absent: the flow counts as done when it ends, TCP's FIN or RST).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadlineSpec {
    pub ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// The longest deadline a table may give: a day.
pub const MAX_DEADLINE_MS: u64 = 86_400_000;

/// What an application wants from the network beyond a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AppClass {
    /// Paced at its rate, if it has one, and otherwise carried as it comes.
    #[default]
    Foreground,
    /// Only spare capacity: its rate follows what the others leave.
    Background,
}

impl AppClass {
    pub fn is_foreground(&self) -> bool {
        *self == AppClass::Foreground
    }
}

impl AppSpec {
    pub fn is_background(&self) -> bool {
        self.class == AppClass::Background
    }

    /// The application keeps to some uplinks (`uplinks` or `avoid`).
    pub fn steered(&self) -> bool {
        self.uplinks.is_some() || !self.avoid.is_empty()
    }

    /// Whether the application's packets may take the uplink named `uplink`: it is
    /// among `uplinks` (where given) and not among `avoid`.
    pub fn allows(&self, uplink: &str) -> bool {
        self.uplinks
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|u| u == uplink))
            && !self.avoid.iter().any(|u| u == uplink)
    }

    /// The rate in the given direction, in bit/s; 0 means unpaced.
    pub fn rate_bps(&self, direction: Direction) -> u64 {
        let kbps = match direction {
            Direction::Up => self.rate_up_kbps,
            Direction::Down => self.rate_down_kbps,
        };
        kbps.unwrap_or(0) * 1000
    }
}

/// The match keys of an application; absent keys match everything.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proto: Option<Proto>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_prefix: Option<IpNet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_ports: Option<PortRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_prefix: Option<IpNet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_ports: Option<PortRange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Proto {
    Tcp,
    Udp,
    /// ICMP and ICMPv6.
    Icmp,
    Any,
}

impl Proto {
    pub fn matches(self, proto: u8) -> bool {
        match self {
            Proto::Tcp => proto == 6,
            Proto::Udp => proto == 17,
            Proto::Icmp => proto == 1 || proto == 58,
            Proto::Any => true,
        }
    }
}

/// An inclusive port range, written `"N"` or `"N-M"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    pub fn contains(self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

impl std::str::FromStr for PortRange {
    type Err = String;

    fn from_str(s: &str) -> Result<PortRange, String> {
        let port = |p: &str| {
            p.trim()
                .parse::<u16>()
                .map_err(|_| format!("\"{s}\" is not a port or a range \"N-M\" of ports"))
        };
        let (first, last) = match s.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(s)?, port(s)?),
        };
        if first > last {
            return Err(format!("\"{s}\": the range's first port is above its last"));
        }
        Ok(PortRange { first, last })
    }
}

impl Serialize for PortRange {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PortRange, D::Error> {
        /// A single port may also be written as a number.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(u64),
        }
        match Raw::deserialize(d)? {
            Raw::Text(s) => s.parse().map_err(D::Error::custom),
            Raw::Number(n) => u16::try_from(n)
                .map(|p| PortRange { first: p, last: p })
                .map_err(|_| D::Error::custom(format!("{n} is not a port"))),
        }
    }
}

fn refuse(path: impl Into<String>, problem: impl Into<String>) -> FieldError {
    FieldError::new(path, problem)
}

impl PacingTable {
    /// Parses and validates a table in its JSON form.
    pub fn parse(json: &[u8]) -> Result<PacingTable, FieldError> {
        let mut de = serde_json::Deserializer::from_slice(json);
        let table: PacingTable = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let path = if path == "." {
                "table".to_string()
            } else {
                path
            };
            refuse(path, e.into_inner().to_string())
        })?;
        de.end().map_err(|e| refuse("table", e.to_string()))?;
        table.validate()?;
        Ok(table)
    }

    /// Checks what the JSON form cannot express: unique names, ranges.
    pub fn validate(&self) -> Result<(), FieldError> {
        if self.apps.len() > MAX_APPS {
            return Err(refuse(
                "apps",
                format!(
                    "{} applications, at most {MAX_APPS} are allowed",
                    self.apps.len()
                ),
            ));
        }
        if self.replaces.is_some_and(|r| r >= self.version) {
            return Err(refuse(
                "replaces",
                format!("must be below the table's version, {}", self.version),
            ));
        }
        if self
            .controller
            .as_deref()
            .is_some_and(|c| !is_controller_name(c))
        {
            return Err(refuse(
                "controller",
                format!("must be 1 to {MAX_CONTROLLER_LEN} bytes of letters, digits, -, _ and ."),
            ));
        }
        if self.duplicate_kbps.is_some_and(|k| k > MAX_RATE_KBPS) {
            return Err(refuse(
                "duplicate_kbps",
                format!("at most {MAX_RATE_KBPS} (100 Gbit/s)"),
            ));
        }
        let mut names = super::hash::FixedSet::default();
        for (i, app) in self.apps.iter().enumerate() {
            let at = |field: &str| format!("apps[{i}].{field}");
            if app.name.is_empty() || app.name.len() > MAX_NAME_LEN {
                return Err(refuse(
                    at("name"),
                    format!("must be 1 to {MAX_NAME_LEN} bytes"),
                ));
            }
            if app.name.chars().any(|c| c.is_control()) {
                return Err(refuse(at("name"), "must not contain control characters"));
            }
            if app.name == DEFAULT_APP {
                return Err(refuse(
                    at("name"),
                    "\"default\" is reserved for traffic no application matches",
                ));
            }
            if !names.insert(app.name.as_str()) {
                return Err(refuse(
                    at("name"),
                    format!("\"{}\" is defined twice", app.name),
                ));
            }
            for (field, rate) in [
                ("rate_up_kbps", app.rate_up_kbps),
                ("rate_down_kbps", app.rate_down_kbps),
            ] {
                if rate.is_some_and(|r| r > MAX_RATE_KBPS) {
                    return Err(refuse(
                        at(field),
                        format!("at most {MAX_RATE_KBPS} (100 Gbit/s)"),
                    ));
                }
            }
            if let Some(limit) = app.queue_limit_bytes
                && !(MIN_QUEUE_LIMIT..=MAX_QUEUE_BYTES).contains(&limit)
            {
                return Err(refuse(
                    at("queue_limit_bytes"),
                    format!("must be {MIN_QUEUE_LIMIT} to {MAX_QUEUE_BYTES} bytes"),
                ));
            }
            if app.burst_bytes.is_some_and(|b| b > MAX_QUEUE_BYTES) {
                return Err(refuse(
                    at("burst_bytes"),
                    format!("at most {MAX_QUEUE_BYTES} bytes"),
                ));
            }
            if app.matches.dscp.is_some_and(|d| d > 63) {
                return Err(refuse(at("match.dscp"), "a DSCP is 0 to 63"));
            }
            validate_steering(app, &at)?;
            if let Some(utility) = &app.utility
                && !is_utility_name(utility)
            {
                return Err(refuse(
                    at("utility"),
                    format!("must be 1 to {MAX_UTILITY_LEN} characters of a-z, 0-9, - and _"),
                ));
            }
            if let Some(d) = app.deadline {
                if app.is_background() {
                    return Err(refuse(
                        at("deadline"),
                        "a background application gets only spare capacity; it cannot promise a deadline",
                    ));
                }
                if !(1..=MAX_DEADLINE_MS).contains(&d.ms) {
                    return Err(refuse(
                        at("deadline.ms"),
                        format!("must be 1 to {MAX_DEADLINE_MS} (a day)"),
                    ));
                }
                if d.bytes == Some(0) {
                    return Err(refuse(at("deadline.bytes"), "must be at least 1"));
                }
            }
            if app.is_background() && app.duplicate {
                return Err(refuse(
                    at("duplicate"),
                    "a background application gets only spare capacity; copies of its packets would take more",
                ));
            }
        }
        Ok(())
    }

    /// What copies of `duplicate` applications may add, in bit/s.
    pub fn duplicate_budget_bps(&self) -> u64 {
        self.duplicate_kbps.unwrap_or(DEFAULT_DUPLICATE_KBPS) * 1000
    }

    /// The application at `app` (`None` for `default`).
    pub fn app(&self, app: AppIdx) -> Option<&AppSpec> {
        (app.0 as usize)
            .checked_sub(1)
            .and_then(|i| self.apps.get(i))
    }

    /// The name of the application at `app`.
    pub fn name(&self, app: AppIdx) -> &str {
        self.app(app).map_or(DEFAULT_APP, |a| a.name.as_str())
    }
}

/// The most uplinks an application's `uplinks` or `avoid` may name.
pub const MAX_STEERING_UPLINKS: usize = 16;

/// `uplinks`, `avoid` and `strict`: uplink names as the entry's configuration spells
/// them, each list without repeats and at most [`MAX_STEERING_UPLINKS`] long, no
/// uplink in both, and `strict` only with one of them. A name no lane has (yet) is
/// accepted: a site's uplinks come and go, and at the exit they are known only once
/// their lanes connect.
fn validate_steering(app: &AppSpec, at: &dyn Fn(&str) -> String) -> Result<(), FieldError> {
    if app.uplinks.as_ref().is_some_and(Vec::is_empty) {
        return Err(refuse(
            at("uplinks"),
            "must name at least one uplink (leave it out for every uplink)",
        ));
    }
    for (field, names) in [
        ("uplinks", app.uplinks.as_deref().unwrap_or_default()),
        ("avoid", app.avoid.as_slice()),
    ] {
        if names.len() > MAX_STEERING_UPLINKS {
            return Err(refuse(
                at(field),
                format!("{} uplinks, at most {MAX_STEERING_UPLINKS}", names.len()),
            ));
        }
        for (j, name) in names.iter().enumerate() {
            let here = || at(&format!("{field}[{j}]"));
            if let Err(super::wire::WireError::Invalid { problem, .. }) =
                super::wire::check_name("uplink", name)
            {
                return Err(refuse(here(), problem));
            }
            if names[..j].contains(name) {
                return Err(refuse(here(), format!("\"{name}\" is listed twice")));
            }
        }
    }
    let allowed = app.uplinks.as_deref().unwrap_or_default();
    if let Some(j) = app.avoid.iter().position(|name| allowed.contains(name)) {
        return Err(refuse(
            at(&format!("avoid[{j}]")),
            format!("\"{}\" is also in uplinks", app.avoid[j]),
        ));
    }
    if app.strict && !app.steered() {
        return Err(refuse(at("strict"), "needs uplinks or avoid"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC_EXAMPLE: &str = r#"{
      "version": 7,
      "apps": [
        { "name": "voip",
          "match": { "proto": "udp", "remote_ports": "5060-5080", "dscp": 46 },
          "rate_up_kbps": 512, "rate_down_kbps": 512, "colour": "green" },
        { "name": "backup",
          "match": { "proto": "tcp", "remote_prefix": "203.0.113.0/24", "remote_ports": "22" },
          "rate_up_kbps": 20000, "rate_down_kbps": 2000,
          "burst_bytes": 30000, "queue_limit_bytes": 262144, "colour": "blue" }
      ]
    }"#;

    fn error(json: &str) -> String {
        PacingTable::parse(json.as_bytes())
            .expect_err("the table must be refused")
            .to_string()
    }

    #[test]
    fn the_spec_example_parses_and_round_trips() {
        let t = PacingTable::parse(SPEC_EXAMPLE.as_bytes()).expect("valid");
        assert_eq!(t.version, 7);
        assert_eq!(
            t.apps[0].matches.remote_ports,
            Some(PortRange {
                first: 5060,
                last: 5080
            })
        );
        assert_eq!(t.apps[1].rate_bps(Direction::Down), 2_000_000);
        assert_eq!(t.apps[0].colour, Some(Colour::Green));
        let again = serde_json::to_vec(&t).expect("serialise");
        assert_eq!(PacingTable::parse(&again).expect("valid"), t);
        assert_eq!(t.name(AppIdx(2)), "backup");
        assert_eq!(t.name(AppIdx::DEFAULT), "default");
    }

    fn refused_with(json: &str, start: &str) {
        let e = error(json);
        assert!(e.starts_with(start), "{e:?} does not start with {start:?}");
    }

    #[test]
    fn bad_tables_are_refused_naming_the_field() {
        refused_with(
            r#"{"version": 1, "apps": [{"name": "a", "match": {"remote_ports": "70000"}}]}"#,
            "apps[0].match.remote_ports: \"70000\" is not a port or a range \"N-M\" of ports at line 1",
        );
        refused_with(
            r#"{"version": 1, "apps": [{"name": "a", "match": {"proto": "sctp"}}]}"#,
            "apps[0].match.proto: unknown variant `sctp`",
        );
        refused_with(
            r#"{"version": 1, "apps": [{"name": "a", "rate": 5}]}"#,
            "apps[0].rate: unknown field `rate`",
        );
        refused_with(r#"{"apps": []}"#, "table: missing field `version`");
        refused_with(r#"{"version": -1}"#, "version: invalid value");
        refused_with("{\"version\": 1} x", "table: trailing characters");
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "a"}, {"name": "a"}]}"#),
            "apps[1].name: \"a\" is defined twice"
        );
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "default"}]}"#),
            "apps[0].name: \"default\" is reserved for traffic no application matches"
        );
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "a", "match": {"remote_ports": "90-80"}}]}"#)
                .split(" at line")
                .next(),
            Some("apps[0].match.remote_ports: \"90-80\": the range's first port is above its last")
        );
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "a", "match": {"dscp": 64}}]}"#),
            "apps[0].match.dscp: a DSCP is 0 to 63"
        );
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "a", "queue_limit_bytes": 100}]}"#),
            "apps[0].queue_limit_bytes: must be 1500 to 67108864 bytes"
        );
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "", "rate_up_kbps": 1}]}"#),
            "apps[0].name: must be 1 to 64 bytes"
        );
        refused_with(
            r#"{"version": 1, "apps": [{"name": "a", "match": {"local_prefix": "10.0.0.0/33"}}]}"#,
            "apps[0].match.local_prefix: invalid IP address syntax",
        );
    }

    #[test]
    fn steering_names_uplinks_and_bad_lists_are_refused_naming_the_entry() {
        let t = PacingTable::parse(
            br#"{"version": 1, "apps": [
                {"name": "voip", "uplinks": ["dsl", "lte"], "avoid": ["sat"], "strict": true},
                {"name": "backup", "avoid": ["lte"]},
                {"name": "web"}]}"#,
        )
        .expect("valid");
        let (voip, backup, web) = (&t.apps[0], &t.apps[1], &t.apps[2]);
        assert!(voip.allows("dsl") && voip.allows("lte"));
        assert!(!voip.allows("sat") && !voip.allows("cable"));
        assert!(!backup.allows("lte") && backup.allows("dsl"));
        assert!(voip.steered() && backup.steered() && !web.steered());
        assert!(web.allows("anything"));
        let again = serde_json::to_vec(&t).expect("serialise");
        assert_eq!(PacingTable::parse(&again).expect("valid"), t);
        let app =
            |fields: &str| format!(r#"{{"version": 1, "apps": [{{"name": "a", {fields}}}]}}"#);
        assert_eq!(
            error(&app(r#""uplinks": []"#)),
            "apps[0].uplinks: must name at least one uplink (leave it out for every uplink)"
        );
        assert_eq!(
            error(&app(r#""uplinks": ["dsl", "l te"]"#)),
            "apps[0].uplinks[1]: \"l te\" is not 1 to 63 characters of A-Z a-z 0-9 . _ -"
        );
        assert_eq!(
            error(&app(r#""avoid": ["lte", "lte"]"#)),
            "apps[0].avoid[1]: \"lte\" is listed twice"
        );
        assert_eq!(
            error(&app(
                r#""uplinks": ["dsl", "lte"], "avoid": ["sat", "lte"]"#
            )),
            "apps[0].avoid[1]: \"lte\" is also in uplinks"
        );
        assert_eq!(
            error(&app(r#""strict": true"#)),
            "apps[0].strict: needs uplinks or avoid"
        );
        let many: Vec<String> = (0..=MAX_STEERING_UPLINKS)
            .map(|i| format!("\"u{i}\""))
            .collect();
        assert_eq!(
            error(&app(&format!(r#""avoid": [{}]"#, many.join(",")))),
            "apps[0].avoid: 17 uplinks, at most 16"
        );
        refused_with(&app(r#""uplinks": "dsl""#), "apps[0].uplinks: invalid type");
    }

    #[test]
    fn duplication_has_a_budget_per_site_with_a_default() {
        let t = PacingTable::parse(
            br#"{"version": 1, "duplicate_kbps": 256, "apps": [{"name": "call", "duplicate": true}]}"#,
        )
        .expect("valid");
        assert!(t.apps[0].duplicate);
        assert_eq!(t.duplicate_budget_bps(), 256_000);
        let again = serde_json::to_vec(&t).expect("serialise");
        assert_eq!(PacingTable::parse(&again).expect("valid"), t);
        let plain =
            PacingTable::parse(br#"{"version": 1, "apps": [{"name": "web"}]}"#).expect("valid");
        assert!(!plain.apps[0].duplicate);
        assert_eq!(plain.duplicate_budget_bps(), DEFAULT_DUPLICATE_KBPS * 1000);
        assert_eq!(
            error(r#"{"version": 1, "duplicate_kbps": 100000001}"#),
            "duplicate_kbps: at most 100000000 (100 Gbit/s)"
        );
        refused_with(
            r#"{"version": 1, "apps": [{"name": "a", "duplicate": "yes"}]}"#,
            "apps[0].duplicate: invalid type",
        );
    }

    #[test]
    fn a_background_class_parses_and_is_checked() {
        let t = PacingTable::parse(
            br#"{"version": 1, "apps": [{"name": "updates", "class": "background", "rate_down_kbps": 20000},
                                        {"name": "web", "class": "foreground"}, {"name": "mail"}]}"#,
        )
        .expect("valid");
        assert!(t.apps[0].is_background());
        assert!(!t.apps[1].is_background() && !t.apps[2].is_background());
        let again = serde_json::to_vec(&t).expect("serialise");
        assert_eq!(PacingTable::parse(&again).expect("valid"), t);
        refused_with(
            r#"{"version": 1, "apps": [{"name": "a", "class": "bulk"}]}"#,
            "apps[0].class: unknown variant `bulk`, expected `foreground` or `background`",
        );
        assert_eq!(
            error(
                r#"{"version": 1, "apps": [{"name": "a", "class": "background", "duplicate": true}]}"#
            ),
            "apps[0].duplicate: a background application gets only spare capacity; copies of its packets would take more"
        );
    }

    #[test]
    fn a_table_may_name_the_version_it_replaces_and_each_applications_utility_class() {
        let t = PacingTable::parse(
            br#"{"version": 8, "replaces": 7, "apps": [{"name": "calls", "utility": "voip"}]}"#,
        )
        .unwrap();
        assert_eq!(t.replaces, Some(7));
        assert_eq!(t.apps[0].utility.as_deref(), Some("voip"));
        // What replaces it is the request's, not the table's.
        let kept = serde_json::to_string(&t).unwrap();
        assert!(!kept.contains("replaces"), "{kept}");
        assert!(kept.contains(r#""utility":"voip""#), "{kept}");
        assert_eq!(
            error(r#"{"version": 7, "replaces": 7, "apps": []}"#),
            "replaces: must be below the table's version, 7"
        );
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "a", "utility": "VoIP"}]}"#),
            "apps[0].utility: must be 1 to 32 characters of a-z, 0-9, - and _"
        );
        assert_eq!(
            error(r#"{"version": 1, "apps": [{"name": "a", "utility": ""}]}"#),
            "apps[0].utility: must be 1 to 32 characters of a-z, 0-9, - and _"
        );
    }

    #[test]
    fn a_table_names_the_controller_that_wrote_it_and_keeps_the_name() {
        let t =
            PacingTable::parse(br#"{"version": 3, "controller": "ctl-a.example.net"}"#).unwrap();
        assert_eq!(t.controller.as_deref(), Some("ctl-a.example.net"));
        let kept = serde_json::to_string(&t).unwrap();
        assert!(
            kept.contains(r#""controller":"ctl-a.example.net""#),
            "{kept}"
        );
        let unnamed = serde_json::to_string(&PacingTable::default()).unwrap();
        assert!(!unnamed.contains("controller"), "{unnamed}");
        let long = "c".repeat(65);
        for bad in ["", "a b", &long] {
            assert_eq!(
                error(&format!(r#"{{"version": 1, "controller": "{bad}"}}"#)),
                "controller: must be 1 to 64 bytes of letters, digits, -, _ and ."
            );
        }
    }

    #[test]
    fn a_deadline_gives_time_and_bytes_per_flow_and_is_checked() {
        let t = PacingTable::parse(
            br#"{"version": 1, "apps": [{"name": "reports", "deadline": {"ms": 600, "bytes": 250000}},
                                        {"name": "queries", "deadline": {"ms": 50}}]}"#,
        )
        .expect("valid");
        assert_eq!(
            t.apps[0].deadline,
            Some(DeadlineSpec {
                ms: 600,
                bytes: Some(250_000)
            })
        );
        assert_eq!(t.apps[1].deadline.and_then(|d| d.bytes), None);
        let again = serde_json::to_vec(&t).expect("serialise");
        assert_eq!(PacingTable::parse(&again).expect("valid"), t);
        let app =
            |fields: &str| format!(r#"{{"version": 1, "apps": [{{"name": "a", {fields}}}]}}"#);
        assert_eq!(
            error(&app(r#""deadline": {"ms": 0}"#)),
            "apps[0].deadline.ms: must be 1 to 86400000 (a day)"
        );
        assert_eq!(
            error(&app(r#""deadline": {"ms": 10, "bytes": 0}"#)),
            "apps[0].deadline.bytes: must be at least 1"
        );
        assert_eq!(
            error(&app(r#""class": "background", "deadline": {"ms": 10}"#)),
            "apps[0].deadline: a background application gets only spare capacity; it cannot promise a deadline"
        );
        refused_with(
            &app(r#""deadline": {"bytes": 10}"#),
            "apps[0].deadline: missing field `ms`",
        );
        refused_with(
            &app(r#""deadline": {"ms": 10, "by": 3}"#),
            "apps[0].deadline.by: unknown field `by`",
        );
    }

    #[test]
    fn a_table_holds_at_most_max_apps_applications() {
        let table = |n: usize| {
            let apps: Vec<String> = (0..n)
                .map(|i| format!(r#"{{"name": "a{i}", "rate_up_kbps": 100}}"#))
                .collect();
            format!(r#"{{"version": 1, "apps": [{}]}}"#, apps.join(","))
        };
        assert!(PacingTable::parse(table(MAX_APPS).as_bytes()).is_ok());
        assert_eq!(
            error(&table(MAX_APPS + 1)),
            "apps: 10001 applications, at most 10000 are allowed"
        );
    }
}

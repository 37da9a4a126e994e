//! `braid controller`'s configuration file (TOML, `BRAID_CONTROLLER__` overrides), in
//! the gateway's conventions: raw serde structs, then one validation whose errors
//! name the key (`gateways[1].url: ...`). Reference: docs/controller.md.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::core::allocation::catalogue::{self, Class};
use crate::core::allocation::plan::Settings;
use crate::core::allocation::utility::UtilityFunction;
use crate::core::field_error::FieldError;
use crate::core::lane::Colour;
use crate::core::pacing_table::{MAX_CONTROLLER_LEN, is_controller_name};

/// Which solver allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Solver {
    /// The exact solve, and the fast method where it does not finish within a
    /// quarter of the period.
    Auto,
    Exact,
    Fast,
}

impl Solver {
    /// Its name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Solver::Auto => "auto",
            Solver::Exact => "exact",
            Solver::Fast => "fast",
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    name: Option<String>,
    #[serde(default = "default_listen")]
    listen: SocketAddr,
    #[serde(default = "default_period_ms")]
    period_ms: u64,
    #[serde(default)]
    takeover_after_ms: Option<u64>,
    #[serde(default = "default_epsilon")]
    epsilon: f64,
    #[serde(default = "default_solver")]
    solver: String,
    #[serde(default = "default_class")]
    default_class: String,
    #[serde(default = "default_queue_from")]
    queue_from: f64,
    #[serde(default = "default_queue_ms")]
    queue_ms: f64,
    #[serde(default)]
    gateways: Vec<RawGateway>,
    #[serde(default)]
    classes: Vec<RawClass>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGateway {
    url: String,
    token_file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    name: String,
    colour: Option<Colour>,
    throughput_kbps: Option<Vec<f64>>,
    delay_ms: Option<Vec<f64>>,
    utility: Option<Vec<Vec<f64>>>,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9290))
}
fn default_period_ms() -> u64 {
    5000
}
fn default_epsilon() -> f64 {
    0.3
}
fn default_solver() -> String {
    "auto".to_string()
}
fn default_class() -> String {
    "download".to_string()
}
fn default_queue_from() -> f64 {
    0.5
}
fn default_queue_ms() -> f64 {
    20.0
}

/// A gateway of the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct Gateway {
    /// `http://HOST:PORT` of its admin API.
    pub url: String,
    pub token_file: PathBuf,
}

/// A validated controller configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerConfig {
    /// How its tables name it (`controller`).
    pub name: String,
    pub listen: SocketAddr,
    pub period: Duration,
    /// How long a table another controller wrote must stand still before this one
    /// takes its site over (`core::allocation::lease`).
    pub takeover_after: Duration,
    pub solver: Solver,
    pub gateways: Vec<Gateway>,
    pub settings: Settings,
}

/// The recompute period's bounds.
pub const MIN_PERIOD_MS: u64 = 500;
pub const MAX_PERIOD_MS: u64 = 3_600_000;

impl ControllerConfig {
    /// Reads, merges `BRAID_CONTROLLER__` overrides into and validates a file;
    /// relative token files are relative to its directory.
    pub fn load(file: &Path) -> Result<ControllerConfig, FieldError> {
        let label = file.display().to_string();
        if let Err(e) = std::fs::metadata(file) {
            return Err(FieldError::new(label, format!("cannot read: {e}")));
        }
        let sources = crate::config::file_sources(file, "BRAID_CONTROLLER");
        let raw = crate::config::deserialize(sources, &label)?;
        validate(raw, file.parent().unwrap_or(Path::new(".")))
    }

    /// Validates TOML text; relative paths are relative to `base`.
    pub fn parse(toml: &str, base: &Path) -> Result<ControllerConfig, FieldError> {
        let sources = config::Config::builder()
            .add_source(config::File::from_str(toml, config::FileFormat::Toml));
        validate(crate::config::deserialize(sources, "configuration")?, base)
    }
}

fn validate(raw: RawConfig, base: &Path) -> Result<ControllerConfig, FieldError> {
    if !(MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&raw.period_ms) {
        return Err(FieldError::new(
            "period_ms",
            format!("must be {MIN_PERIOD_MS} to {MAX_PERIOD_MS}"),
        ));
    }
    // Renewed every third of it, seen within a period each side: four periods at least.
    let takeover_after_ms = raw.takeover_after_ms.unwrap_or(6 * raw.period_ms);
    if takeover_after_ms < 4 * raw.period_ms {
        return Err(FieldError::new(
            "takeover_after_ms",
            format!("must be at least 4 periods ({} ms)", 4 * raw.period_ms),
        ));
    }
    let name = match raw.name {
        Some(name) => name,
        None => host_name().ok_or_else(|| {
            FieldError::new("name", "the host name cannot name the controller: set one")
        })?,
    };
    if !is_controller_name(&name) {
        return Err(FieldError::new(
            "name",
            format!(
                "{name:?}: must be 1 to {MAX_CONTROLLER_LEN} bytes of letters, digits, -, _ and ."
            ),
        ));
    }
    let solver = match raw.solver.as_str() {
        "auto" => Solver::Auto,
        "exact" => Solver::Exact,
        "fast" => Solver::Fast,
        _ => return Err(FieldError::new("solver", "must be auto, exact or fast")),
    };
    if !(0.0..=4.0).contains(&raw.epsilon) {
        return Err(FieldError::new("epsilon", "must be 0 to 4"));
    }
    if !(0.0..1.0).contains(&raw.queue_from) {
        return Err(FieldError::new("queue_from", "must be 0 to below 1"));
    }
    if !(0.0..=10_000.0).contains(&raw.queue_ms) {
        return Err(FieldError::new("queue_ms", "must be 0 to 10000"));
    }
    let mut gateways = Vec::new();
    for (i, g) in raw.gateways.into_iter().enumerate() {
        let authority = g.url.strip_prefix("http://").unwrap_or_default();
        if authority.is_empty() || authority.contains('/') || !authority.contains(':') {
            return Err(FieldError::new(
                format!("gateways[{i}].url"),
                "must be http://HOST:PORT (the admin API speaks plain HTTP)",
            ));
        }
        if gateways.iter().any(|o: &Gateway| o.url == g.url) {
            return Err(FieldError::new(
                format!("gateways[{i}].url"),
                "is listed twice",
            ));
        }
        gateways.push(Gateway {
            url: g.url,
            token_file: base.join(g.token_file),
        });
    }
    let (classes, colours) = classes(raw.classes)?;
    let default_class = classes
        .iter()
        .position(|c| c.name == raw.default_class)
        .ok_or_else(|| {
            FieldError::new(
                "default_class",
                format!("no class \"{}\"", raw.default_class),
            )
        })?;
    Ok(ControllerConfig {
        name,
        listen: raw.listen,
        period: Duration::from_millis(raw.period_ms),
        takeover_after: Duration::from_millis(takeover_after_ms),
        solver,
        gateways,
        settings: Settings {
            classes,
            colours,
            default_class,
            epsilon: raw.epsilon,
            queue_from: raw.queue_from,
            queue_ms: raw.queue_ms,
        },
    })
}

/// This machine's name, if it can name a controller.
fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_string()).filter(|n| is_controller_name(n))
}

/// The default catalogue (VoIP and the terminal green) with the file's classes: one
/// of the same name replaces its utility and colour, a new one adds to it.
fn classes(raw: Vec<RawClass>) -> Result<(Vec<Class>, Vec<Option<Colour>>), FieldError> {
    let mut classes = catalogue::defaults()?;
    let mut colours: Vec<Option<Colour>> = classes
        .iter()
        .map(|c| catalogue::default_colour(&c.name))
        .collect();
    for (i, c) in raw.into_iter().enumerate() {
        let at = |field: &str| format!("classes[{i}].{field}");
        if !crate::core::pacing_table::is_utility_name(&c.name) {
            return Err(FieldError::new(
                at("name"),
                "must be 1 to 32 characters of a-z, 0-9, - and _",
            ));
        }
        let known = classes.iter().position(|k| k.name == c.name);
        let utility = match (c.throughput_kbps, c.delay_ms, c.utility) {
            (Some(t), Some(d), Some(u)) => Some(
                UtilityFunction::new(t, d, u)
                    .map_err(|e| FieldError::new(at(&e.path), e.problem))?,
            ),
            (None, None, None) if known.is_some() => None,
            _ => {
                return Err(FieldError::new(
                    at("utility"),
                    "a class needs throughput_kbps, delay_ms and utility together (a default \
                     class may give only its colour)",
                ));
            }
        };
        match known {
            Some(k) => {
                if let Some(utility) = utility {
                    classes[k].utility = utility;
                }
                colours[k] = c.colour.or(colours[k]);
            }
            None => {
                if let Some(utility) = utility {
                    classes.push(Class {
                        name: c.name,
                        utility,
                    });
                    colours.push(c.colour);
                }
            }
        }
    }
    Ok((classes, colours))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> Result<ControllerConfig, String> {
        ControllerConfig::parse(toml, Path::new("/etc/braid")).map_err(|e| e.to_string())
    }

    #[test]
    fn a_fleet_and_its_classes_are_read_with_defaults_for_the_rest() {
        let c = parse(
            r#"
            period_ms = 2000
            [[gateways]]
            url = "http://10.0.0.1:9190"
            token_file = "entry.token"
            [[gateways]]
            url = "http://10.0.0.9:9190"
            token_file = "/secrets/exit.token"
            [[classes]]
            name = "gaming"
            colour = "green"
            throughput_kbps = [500, 2000]
            delay_ms = [10, 50]
            utility = [[3.0, 2.0], [5.0, 3.5]]
            [[classes]]
            name = "video"
            colour = "blue"
            "#,
        )
        .unwrap();
        assert_eq!(c.period, Duration::from_secs(2));
        assert_eq!(c.solver, Solver::Auto);
        assert_eq!(c.listen, default_listen());
        assert_eq!(
            c.gateways[0].token_file,
            Path::new("/etc/braid/entry.token")
        );
        assert_eq!(c.gateways[1].token_file, Path::new("/secrets/exit.token"));
        let names: Vec<&str> = c.settings.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            ["web", "download", "terminal", "video", "voip", "gaming"]
        );
        assert_eq!(c.settings.colours[5], Some(Colour::Green));
        assert_eq!(c.settings.colours[3], Some(Colour::Blue));
        assert_eq!(c.settings.colours[4], Some(Colour::Green));
        assert_eq!(c.settings.default_class, 1);
        assert_eq!(c.settings.epsilon, 0.3);
        // Six periods before taking over another controller's site; named after
        // the host unless named.
        assert_eq!(c.takeover_after, Duration::from_secs(12));
        assert_eq!(Some(c.name), host_name());
        let named = parse("name = \"ctl-b\"\ntakeover_after_ms = 60000").unwrap();
        assert_eq!(named.name, "ctl-b");
        assert_eq!(named.takeover_after, Duration::from_secs(60));
    }

    #[test]
    fn a_bad_key_is_named() {
        let cases = [
            ("period_ms = 10", "period_ms: must be 500 to 3600000"),
            (
                "default_class = \"gaming\"",
                "default_class: no class \"gaming\"",
            ),
            (
                "[[gateways]]\nurl = \"https://x:1\"\ntoken_file = \"t\"",
                "gateways[0].url: must be http://HOST:PORT (the admin API speaks plain HTTP)",
            ),
            (
                "[[classes]]\nname = \"gaming\"\ncolour = \"green\"",
                "classes[0].utility: a class needs throughput_kbps, delay_ms and utility together (a default class may give only its colour)",
            ),
            (
                "[[classes]]\nname = \"x\"\nthroughput_kbps = [1]\ndelay_ms = [0]\nutility = [[9.0]]",
                "classes[0].utility[0][0]: must be 1 to 5",
            ),
            ("epsilon = 7.0", "epsilon: must be 0 to 4"),
            (
                "period_ms = 1000\ntakeover_after_ms = 3000",
                "takeover_after_ms: must be at least 4 periods (4000 ms)",
            ),
            (
                "name = \"ctl b\"",
                "name: \"ctl b\": must be 1 to 64 bytes of letters, digits, -, _ and .",
            ),
            (
                "solver = \"genetic\"",
                "solver: must be auto, exact or fast",
            ),
        ];
        for (toml, expected) in cases {
            assert_eq!(parse(toml).unwrap_err(), expected, "{toml}");
        }
    }
}

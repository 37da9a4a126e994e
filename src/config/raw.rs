//! The configuration file as written, before validation. Every key of SPEC §8; unknown
//! keys are refused so that a typo never silently falls back to a default.

use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub role: String,
    pub site: Option<String>,
    pub site_to_site: Option<bool>,
    pub tun: RawTun,
    pub tls: RawTls,
    /// `[exit]`, or `[[exit]]` for several in order of preference.
    #[serde(default)]
    pub exit: RawExits,
    #[serde(default)]
    pub uplinks: Vec<RawUplink>,
    pub listen: Option<RawListen>,
    #[serde(default)]
    pub sites: Vec<RawSite>,
    #[serde(default)]
    pub scheduler: RawScheduler,
    #[serde(default)]
    pub pacing: RawPacing,
    #[serde(default)]
    pub abe: RawAbe,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub log: RawLog,
    #[serde(default)]
    pub tiers: RawTiers,
    #[serde(default)]
    pub caps: RawCaps,
}

/// A value that may be written as one string or a list of strings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTun {
    pub name: Option<String>,
    pub address: Option<OneOrMany>,
    pub mtu: Option<u32>,
    #[serde(default)]
    pub routes: Vec<String>,
    pub offload: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawExitPeer {
    pub address: String,
    pub name: Option<String>,
    pub hold_ms: Option<u64>,
}

/// The entry's exits: one `[exit]` table or a `[[exit]]` list. Not an untagged enum,
/// whose one error for both shapes would hide which key of a table is wrong.
#[derive(Debug, Default)]
pub struct RawExits(pub Vec<RawExitPeer>);

impl<'de> Deserialize<'de> for RawExits {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<RawExits, D::Error> {
        struct Exits;
        impl<'de> serde::de::Visitor<'de> for Exits {
            type Value = RawExits;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an [exit] table or a list of [[exit]] tables")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawExits, A::Error> {
                let one =
                    RawExitPeer::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawExits(vec![one]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<RawExits, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(RawExits)
            }
        }
        d.deserialize_any(Exits)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUplink {
    pub name: String,
    pub interface: String,
    pub source: Option<String>,
    pub peer: Option<String>,
    pub rate_up_kbps: Option<u64>,
    pub rate_down_kbps: Option<u64>,
    pub delay_variation_ms: Option<u64>,
    pub priority: Option<u32>,
    pub standby: Option<String>,
    pub overflow: Option<bool>,
    pub max_rtt_ms: Option<u64>,
    pub max_loss_percent: Option<f64>,
    pub cut_off: Option<String>,
    pub cap_mb: Option<u64>,
    pub cap_period: Option<String>,
    pub cap_reset_day: Option<u8>,
    pub cap_action: Option<String>,
    pub cap_warn_percent: Option<Vec<u8>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCaps {
    pub state_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTiers {
    pub hold_ms: Option<u64>,
    pub overflow_after_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawListen {
    pub address: String,
    pub threads: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSite {
    pub id: String,
    #[serde(default)]
    pub prefixes: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScheduler {
    pub algorithm: Option<String>,
    pub flow_idle_timeout_ms: Option<u64>,
    pub max_flows: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPacing {
    pub state_file: Option<String>,
    pub default_rate_kbps: Option<u64>,
    pub background_method: Option<String>,
    pub background_interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAbe {
    pub scheduler: Option<String>,
    pub green_dscp: Option<u8>,
    pub blue_dscp: Option<u8>,
    pub green_inner_dscp: Option<Vec<u8>>,
    pub green_delay_ms: Option<u64>,
    pub buffer_bytes: Option<u64>,
    pub control_interval_ms: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAdmin {
    pub listen: Option<String>,
    pub token_file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    pub filter: Option<String>,
}

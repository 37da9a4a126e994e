//! The reference in `docs/` against the code: every configuration key, `braid` and
//! `braid-linkemu` subcommand and flag, admin API endpoint and metric the code has
//! must be listed in its reference page, and every one a page lists must exist. A
//! test fails naming what is missing on which side.
//!
//! The code's side is taken from the code itself: the configuration keys by walking
//! the raw serde structs (`src/config/raw.rs`, compiled in here) with a deserializer
//! that records every field; the commands and flags from `braid --help` of every
//! subcommand; the endpoints from the admin router's match arms, each then asked
//! over a live connection; the metrics from the registry's exposition after every
//! family has a child, plus the names registered in `src/control/metrics.rs`.
//!
//! The pages' side is their tables: a row's first cell, in backticks, names the key,
//! flag, endpoint path (after the method) or metric.
#![allow(clippy::expect_used)] // helpers of tests: a failure is the test's

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

#[allow(dead_code)]
#[path = "../src/config/raw.rs"]
mod raw;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(repo().join(relative))
        .unwrap_or_else(|e| panic!("reading {relative}: {e}"))
}

/// The cells of every table row of a Markdown page (separator rows left out).
fn table_rows(markdown: &str) -> Vec<Vec<String>> {
    markdown
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('|') && !l.starts_with("|-") && !l.starts_with("| -"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The first `code span` of a cell, if it has one.
fn code_span(cell: &str) -> Option<&str> {
    let start = cell.find('`')? + 1;
    let len = cell[start..].find('`')?;
    Some(&cell[start..start + len])
}

/// Fails with both differences when `code` and `documented` differ.
fn same(what: &str, page: &str, code: &BTreeSet<String>, documented: &BTreeSet<String>) {
    let missing: Vec<&String> = code.difference(documented).collect();
    let extra: Vec<&String> = documented.difference(code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{page} and the code differ.\n  {what} in the code but not in {page}: {missing:?}\n  \
         {what} in {page} but not in the code: {extra:?}"
    );
}

// ---- Configuration keys -------------------------------------------------------------

mod record {
    //! A deserializer that feeds every struct every one of its fields, each with a
    //! placeholder value, and records the path of every leaf value it was asked for:
    //! `tun.mtu`, `uplinks[].name`, `tun.routes`.

    use std::cell::RefCell;
    use std::collections::BTreeSet;

    use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};

    type Error = de::value::Error;

    /// Keys written as one table or a list of tables (`[exit]` or `[[exit]]`): walked
    /// as a list of one, its keys named as the table's (`exit.address`).
    const TABLE_OR_LIST: &[&str] = &["exit"];

    pub struct Recorder<'a> {
        pub path: String,
        pub keys: &'a RefCell<BTreeSet<String>>,
    }

    impl Recorder<'_> {
        fn leaf(&self) {
            let key = self.path.trim_end_matches("[]").to_string();
            self.keys.borrow_mut().insert(key);
        }

        fn at(&self, child: &str) -> Recorder<'_> {
            let path = if self.path.is_empty() {
                child.to_string()
            } else {
                format!("{}{child}", self.path)
            };
            Recorder {
                path,
                keys: self.keys,
            }
        }
    }

    impl<'de> de::Deserializer<'de> for Recorder<'_> {
        type Error = Error;

        fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            if TABLE_OR_LIST.contains(&self.path.as_str()) {
                return visitor.visit_seq(Once(Some(self.at(""))));
            }
            self.leaf();
            visitor.visit_str("")
        }

        fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.leaf();
            visitor.visit_bool(false)
        }

        fn deserialize_u8<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.leaf();
            visitor.visit_u64(0)
        }

        fn deserialize_u16<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.deserialize_u8(visitor)
        }

        fn deserialize_u32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.deserialize_u8(visitor)
        }

        fn deserialize_u64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.deserialize_u8(visitor)
        }

        fn deserialize_i64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.leaf();
            visitor.visit_i64(0)
        }

        fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            self.leaf();
            visitor.visit_f64(0.0)
        }

        fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.visit_some(self)
        }

        fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            visitor.visit_seq(Once(Some(self.at("[]"))))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            visitor: V,
        ) -> Result<V::Value, Error> {
            visitor.visit_map(Fields {
                parent: self,
                fields: fields.iter(),
                current: "",
            })
        }

        serde::forward_to_deserialize_any! {
            i8 i16 i32 i128 u128 f32 char str string bytes byte_buf unit unit_struct
            newtype_struct tuple tuple_struct map enum identifier ignored_any
        }
    }

    /// A sequence of one element.
    struct Once<'a>(Option<Recorder<'a>>);

    impl<'de> SeqAccess<'de> for Once<'_> {
        type Error = Error;

        fn next_element_seed<T: DeserializeSeed<'de>>(
            &mut self,
            seed: T,
        ) -> Result<Option<T::Value>, Error> {
            self.0.take().map(|r| seed.deserialize(r)).transpose()
        }
    }

    struct Fields<'a> {
        parent: Recorder<'a>,
        fields: std::slice::Iter<'static, &'static str>,
        current: &'static str,
    }

    impl<'de> MapAccess<'de> for Fields<'_> {
        type Error = Error;

        fn next_key_seed<K: DeserializeSeed<'de>>(
            &mut self,
            seed: K,
        ) -> Result<Option<K::Value>, Error> {
            let Some(field) = self.fields.next() else {
                return Ok(None);
            };
            self.current = field;
            seed.deserialize(field.into_deserializer()).map(Some)
        }

        fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
            let child = if self.parent.path.is_empty() {
                self.current.to_string()
            } else {
                format!(".{}", self.current)
            };
            seed.deserialize(self.parent.at(&child))
        }
    }
}

/// Every key of the configuration file, from the raw structs.
fn config_keys_in_code() -> BTreeSet<String> {
    use serde::Deserialize;
    let keys = std::cell::RefCell::new(BTreeSet::new());
    let recorder = record::Recorder {
        path: String::new(),
        keys: &keys,
    };
    raw::RawConfig::deserialize(recorder).expect("the recorder walks every field");
    keys.into_inner()
}

#[test]
fn every_configuration_key_is_in_the_reference() {
    let code = config_keys_in_code();
    assert!(code.contains("uplinks[].delay_variation_ms"), "{code:?}");
    let page = read("docs/configuration.md");
    let documented: BTreeSet<String> = table_rows(&page)
        .iter()
        .filter_map(|row| code_span(row.first()?))
        .filter(|key| {
            key.chars()
                .all(|c| c.is_ascii_lowercase() || "_.[]".contains(c))
        })
        .map(str::to_string)
        .collect();
    same("keys", "docs/configuration.md", &code, &documented);
    // Each key's row says how a reload treats it.
    for row in table_rows(&page) {
        let Some(key) = row.first().and_then(|c| code_span(c)) else {
            continue;
        };
        if code.contains(key) {
            let reload = row.get(4).map(String::as_str).unwrap_or("");
            assert!(
                ["at reload", "at restart", "fixed"]
                    .iter()
                    .any(|r| reload.starts_with(r)),
                "docs/configuration.md: {key}: the fifth cell must say \"at reload\", \
                 \"at restart\" or \"fixed\", not {reload:?}"
            );
        }
    }
}

// ---- Command line ---------------------------------------------------------------------

/// The `Commands:`, `Options:` and `Arguments:` entries of a clap help text.
fn help_sections(help: &str) -> (Vec<String>, Vec<String>) {
    let (mut commands, mut flags) = (Vec::new(), Vec::new());
    let mut section = "";
    for line in help.lines() {
        if !line.starts_with(' ') {
            section = line.trim_end_matches(':');
            continue;
        }
        let Some(first) = line.split_whitespace().next() else {
            continue;
        };
        match section {
            "Commands" if first != "help" => commands.push(first.to_string()),
            "Options" => {
                // `-c, --config <CONFIG>` or `--json`: the long name.
                let long = line
                    .split_whitespace()
                    .find(|w| w.starts_with("--"))
                    .map(|w| w.trim_end_matches(','));
                if let Some(long) = long
                    && long != "--help"
                    && long != "--version"
                {
                    flags.push(long.to_string());
                }
            }
            "Arguments" => flags.push(first.to_string()),
            _ => {}
        }
    }
    (commands, flags)
}

/// Every command (`braid cert issue`) and flag (`braid cert issue --ca`) of `braid`.
fn cli_in_code() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_braid"))
            .args(&path)
            .arg("--help")
            .output()
            .expect("braid runs");
        let help = String::from_utf8_lossy(&out.stdout);
        let name = std::iter::once("braid".to_string())
            .chain(path.iter().cloned())
            .collect::<Vec<_>>()
            .join(" ");
        let (commands, flags) = help_sections(&help);
        for flag in flags {
            found.insert(format!("{name} {flag}"));
        }
        for command in commands {
            found.insert(format!("{name} {command}"));
            let mut deeper = path.clone();
            deeper.push(command);
            todo.push(deeper);
        }
    }
    // braid-linkemu reads its arguments by hand: its flags are the literals it matches.
    found.insert("braid-linkemu".to_string());
    let source = read("integration/linkemu.rs");
    for literal in source.split('"').skip(1).step_by(2) {
        if literal.starts_with("--")
            && literal.len() > 2
            && literal[2..]
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '-')
        {
            found.insert(format!("braid-linkemu {literal}"));
        }
    }
    found
}

/// The commands of `docs/cli.md` (headings naming `braid ...` in backticks) and their
/// flags (first cells of the table rows below each heading).
fn cli_in_reference() -> BTreeSet<String> {
    let page = read("docs/cli.md");
    let mut found = BTreeSet::new();
    let mut command: Option<String> = None;
    for line in page.lines() {
        if line.starts_with('#') {
            command = code_span(line)
                .filter(|c| *c == "braid" || c.starts_with("braid ") || c.starts_with("braid-"))
                .map(str::to_string);
            if let Some(c) = &command
                && c != "braid"
            {
                found.insert(c.clone());
            }
            continue;
        }
        let (Some(command), true) = (&command, line.trim_start().starts_with('|')) else {
            continue;
        };
        let rows = table_rows(line);
        let Some(flag) = rows
            .first()
            .and_then(|row| row.first())
            .and_then(|c| code_span(c))
            .and_then(|s| s.split_whitespace().next())
        else {
            continue;
        };
        if flag.starts_with("--") || flag.starts_with('<') {
            found.insert(format!("{command} {}", flag.trim_end_matches(',')));
        }
    }
    found
}

#[test]
fn every_command_and_flag_is_in_the_reference() {
    let code = cli_in_code();
    assert!(code.contains("braid run --config"), "{code:?}");
    same(
        "commands and flags",
        "docs/cli.md",
        &code,
        &cli_in_reference(),
    );
}

// ---- Admin API ------------------------------------------------------------------------

/// `METHOD /path` of every arm of the admin router (`(&Method::GET, ["v1", "sites",
/// site, "pacing"])` is `GET /v1/sites/{site}/pacing`).
fn endpoints_in_code() -> BTreeSet<String> {
    let source = read("src/control/admin.rs");
    let mut found = BTreeSet::new();
    for arm in source.split("(&Method::").skip(1) {
        let method: String = arm.chars().take_while(char::is_ascii_uppercase).collect();
        let (Some(open), Some(close)) = (arm.find('['), arm.find(']')) else {
            continue;
        };
        let segments: Vec<String> = arm[open + 1..close]
            .split(',')
            .map(str::trim)
            .map(|s| match s.strip_prefix('"') {
                Some(literal) => literal.trim_end_matches('"').to_string(),
                None => format!("{{{s}}}"),
            })
            .collect();
        found.insert(format!("{method} /{}", segments.join("/")));
    }
    found
}

fn endpoints_in_reference() -> BTreeSet<String> {
    table_rows(&read("docs/api.md"))
        .iter()
        .filter(|row| {
            row.len() > 1 && ["GET", "PUT", "POST", "DELETE", "PATCH"].contains(&row[0].as_str())
        })
        .filter_map(|row| Some(format!("{} {}", row[0], code_span(&row[1])?)))
        .collect()
}

#[tokio::test]
async fn every_endpoint_is_in_the_reference_and_answers() {
    let code = endpoints_in_code();
    assert!(code.contains("GET /metrics"), "{code:?}");
    let documented = endpoints_in_reference();
    same("endpoints", "docs/api.md", &code, &documented);
    // And the router routes each: no "no such resource", no 405.
    let (commands, _driver) = tokio::sync::mpsc::channel(1);
    let admin = Arc::new(
        braid::control::admin::Admin::detached(vec!["site1".into()], None, commands)
            .expect("admin"),
    );
    for endpoint in &documented {
        let (method, path) = endpoint.split_once(' ').expect("METHOD /path");
        let path = path.replace("{site}", "site1");
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let serving = tokio::spawn(braid::control::admin::serve_connection(
            server,
            admin.clone(),
        ));
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let request = format!(
            "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        );
        client.write_all(request.as_bytes()).await.expect("write");
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.expect("read");
        let _ = serving.await;
        let status = answer.split_whitespace().nth(1).unwrap_or("");
        assert!(
            status != "405" && !answer.contains("no such resource"),
            "{endpoint}: the router does not serve it: {answer}"
        );
    }
}

// ---- Metrics --------------------------------------------------------------------------

/// Every metric family the registry exposes once each family has a child: name to
/// (type, label names).
fn metrics_exposed() -> BTreeMap<String, (String, BTreeSet<String>)> {
    use braid::core::engine::{DataPath, EngineConfig, SiteSpec};
    use braid::core::lane::{Colour, LaneId};
    let metrics = Arc::new(braid::control::metrics::Metrics::new().expect("metrics"));
    let engine = DataPath::new(
        EngineConfig::builder()
            .sites(vec![SiteSpec {
                id: "s".into(),
                prefixes: Vec::new(),
            }])
            .tun_mtu(1400)
            .max_flows(16)
            .green_inner_dscp(Vec::new())
            .warm_up_lanes(false)
            .build(),
    );
    let mut export = braid::control::metrics::Export::new(metrics.clone(), &engine);
    export.lane_up(LaneId(0), "s", "u", Colour::Blue);
    export.copy(&engine);
    let _ = metrics.app("s", "a", "up");
    metrics.count_admin_request(200);
    let text = String::from_utf8(metrics.render()).expect("UTF-8");
    let mut families: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (words.next(), words.next()) {
                families.insert(name.to_string(), (kind.to_string(), BTreeSet::new()));
            }
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let series = line.split_whitespace().next().unwrap_or("");
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let family = ["", "_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                families.contains_key(base).then_some(base)
            })
            .unwrap_or(name)
            .to_string();
        if let Some((_, names)) = families.get_mut(&family) {
            for pair in labels.trim_end_matches('}').split(',') {
                if let Some((label, _)) = pair.split_once('=')
                    && label != "le"
                {
                    names.insert(label.to_string());
                }
            }
        }
    }
    families
}

/// The metric names `src/control/metrics.rs` registers: the name literal each constructor of
/// a family is called with. This also finds families that have no child yet.
fn metrics_registered() -> BTreeSet<String> {
    let source = read("src/control/metrics.rs");
    let constructors = [
        "Opts::new(",
        "IntCounter::new(",
        "IntGauge::new(",
        "Gauge::new(",
        "Counter::new(",
        "Histogram::new(",
        "HistogramOpts::new(",
        "by_colour(",
        "gauge(",
        "counter(",
        "counter_by(",
        "DelayHistograms::register(",
    ];
    let mut found = BTreeSet::new();
    for constructor in constructors {
        for (at, _) in source.match_indices(constructor) {
            let rest = source[at + constructor.len()..].trim_start();
            let rest = rest.strip_prefix("&registry,").unwrap_or(rest).trim_start();
            let Some(literal) = rest.strip_prefix('"') else {
                continue;
            };
            let name: String = literal.chars().take_while(|c| *c != '"').collect();
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                found.insert(format!("braid_{name}"));
            }
        }
    }
    found
}

#[test]
fn every_metric_is_in_the_reference() {
    let exposed = metrics_exposed();
    let registered = metrics_registered();
    let unseen: Vec<&String> = exposed
        .keys()
        .filter(|n| !registered.contains(*n))
        .collect();
    assert!(
        unseen.is_empty(),
        "metrics the source scan of src/control/metrics.rs misses (teach metrics_registered its \
         constructor): {unseen:?}"
    );
    let page = read("docs/metrics.md");
    let mut documented = BTreeMap::new();
    for row in table_rows(&page) {
        if let Some(name) = row.first().and_then(|c| code_span(c))
            && name.starts_with("braid_")
        {
            let kind = row.get(1).cloned().unwrap_or_default();
            let labels: BTreeSet<String> = row
                .get(2)
                .map(|c| {
                    c.split(|ch: char| !(ch.is_ascii_lowercase() || ch == '_'))
                        .filter(|w| !w.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            documented.insert(name.to_string(), (kind, labels));
        }
    }
    let names: BTreeSet<String> = documented.keys().cloned().collect();
    same("metrics", "docs/metrics.md", &registered, &names);
    for (name, (kind, labels)) in &exposed {
        let (doc_kind, doc_labels) = &documented[name];
        assert_eq!(doc_kind, kind, "docs/metrics.md: the type of {name}");
        assert_eq!(doc_labels, labels, "docs/metrics.md: the labels of {name}");
    }
}

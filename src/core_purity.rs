//! The check that keeps `src/core` pure (docs/architecture.md, rule 2): every path in
//! every core file, `use` trees flattened, must start at the standard library, the
//! core itself or a crate on the allow list below, and must not reach I/O, the clock,
//! the environment, threads or a randomly seeded hash map. It reads tokens, not
//! text: comments and strings cannot hide a path, and an import cannot dodge it by
//! leaving out a crate's name (`use ::tokio as t`, `use crate::clock::Clock`).

use std::path::{Path, PathBuf};

/// Crates the core may use: pure data structures, parsing, a linear programming
/// solver and (in tests) property testing.
const ALLOWED_CRATES: [&str; 10] = [
    "bytes",
    "etherparse",
    "foldhash",
    "good_lp",
    "hashlink",
    "ipnet",
    "proptest",
    "serde",
    "serde_json",
    "thiserror",
];
/// Modules of allowed crates that come in through a glob import (`prop` from
/// proptest's prelude) and helpers of allowed crates (`serde_path_to_error`).
const ALLOWED_HELPERS: [&str; 2] = ["prop", "serde_path_to_error"];
/// Primitive types, whose associated items are paths too (`u64::MAX`).
const PRIMITIVES: [&str; 17] = [
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32",
    "f64", "bool", "char", "str",
];
/// Paths of the standard library the core must not reach (by prefix).
const BANNED_STD: [&str; 14] = [
    "fs",
    "env",
    "thread",
    "process",
    "io",
    "os",
    "sync",
    "time::Instant",
    "time::SystemTime",
    "collections::HashMap",
    "collections::HashSet",
    "collections::hash_map",
    "collections::hash_set",
    "hash::RandomState",
];
/// The only items of `std::net` the core may name: addresses are data.
const ALLOWED_NET: [&str; 3] = ["IpAddr", "Ipv4Addr", "Ipv6Addr"];
/// The only item of `std::io` the core may name: a borrowed slice laid out for a
/// vectored write is data (the TUN writes `core::offload` prepares); the write is
/// the shell's.
const ALLOWED_IO: &str = "io::IoSlice";
/// Names that must not appear at all, however they were brought in: randomly seeded
/// maps (the core has `core::hash::FixedMap`) and macros that read the environment
/// or files at build time.
const BANNED_NAMES: [&str; 8] = [
    "HashMap",
    "HashSet",
    "RandomState",
    "env",
    "option_env",
    "include",
    "include_str",
    "include_bytes",
];
/// The file allowed to name std's maps: it defines the fixed-seed ones.
const HASH_FILE: &str = "hash.rs";

/// What is wrong with one core file, as `file: problem` lines.
pub fn violations(file: &str, source: &str, core_modules: &[String]) -> Vec<String> {
    let tokens = tokenize(source);
    let mut problems = Vec::new();
    let mut say = |p: String| problems.push(format!("{file}: {p}"));
    for (i, t) in tokens.iter().enumerate() {
        let next = tokens.get(i + 1).map(String::as_str);
        let is_maps_file = file.ends_with(HASH_FILE);
        if BANNED_NAMES.contains(&t.as_str()) {
            let is_macro = next == Some("!");
            let is_map = !t.starts_with(|c: char| c.is_lowercase());
            if (is_map && !is_maps_file) || (!is_map && is_macro) {
                say(format!("names `{t}`"));
            }
        }
        if t == "#" && tokens.get(i + 2).is_some_and(|a| a == "path") {
            say("uses a #[path] attribute".into());
        }
    }
    let Paths {
        uses,
        others,
        locals,
    } = paths(&tokens);
    let from_use = uses.iter().map(|p| (p, true));
    for (path, in_use) in from_use.chain(others.iter().map(|p| (p, false))) {
        let segments: Vec<&str> = path.split("::").collect();
        let root = segments[0];
        let rest = segments[1..].join("::");
        let lowercase = root.starts_with(|c: char| c.is_lowercase() || c == '_');
        let ok = match root {
            "std" | "core" | "alloc" => {
                let banned = BANNED_STD
                    .iter()
                    .any(|b| rest == *b || rest.starts_with(&format!("{b}::")))
                    && !(file.ends_with(HASH_FILE) && rest.starts_with("collections::Hash"))
                    && rest != ALLOWED_IO;
                let net = rest
                    .strip_prefix("net::")
                    .is_some_and(|item| !ALLOWED_NET.contains(&item))
                    || rest == "net";
                !banned && !net
            }
            "crate" => segments.get(1) == Some(&"core"),
            "super" | "self" | "Self" => true,
            _ if !lowercase => true,
            _ => {
                ALLOWED_CRATES.contains(&root)
                    || ALLOWED_HELPERS.contains(&root)
                    || PRIMITIVES.contains(&root)
                    || core_modules.iter().any(|m| m == root)
                    // Brought in by a `use`, whose own path is checked without this.
                    || (!in_use && locals.iter().any(|l| l == root))
            }
        };
        if !ok {
            say(format!("reaches `{path}`"));
        }
    }
    problems
}

/// Identifiers and punctuation, without comments, strings and character literals.
fn tokenize(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && char_at(&chars, i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && char_at(&chars, i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && char_at(&chars, i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r'
            && (char_at(&chars, i + 1) == '"'
                || (char_at(&chars, i + 1) == '#'
                    && (char_at(&chars, i + 2) == '"' || char_at(&chars, i + 2) == '#')))
        {
            // A raw string: r"..." or r#"..."#.
            let mut hashes = 0;
            i += 1;
            while chars.get(i) == Some(&'#') {
                hashes += 1;
                i += 1;
            }
            i += 1;
            loop {
                if i >= chars.len() {
                    break;
                }
                if chars[i] == '"' && (0..hashes).all(|h| chars.get(i + 1 + h) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\''
            && (char_at(&chars, i + 2) == '\''
                || (char_at(&chars, i + 1) == '\\'
                    && (char_at(&chars, i + 3) == '\'' || char_at(&chars, i + 1) == '\\')))
        {
            // A character literal ('a', '\n', '\u{..}'); lifetimes stay tokens.
            i += 1;
            while i < chars.len() && chars[i] != '\'' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && char_at(&chars, i + 1) == ':' {
            tokens.push("::".into());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// The paths in the tokens, `use` trees flattened (`use a::{b, c::d}` gives `a::b`
/// and `a::c::d`), `extern crate x` as `x`, absolute paths (`::x::y`) as `x::y`.
fn paths(tokens: &[String]) -> Paths {
    let mut uses = Vec::new();
    let mut out = Vec::new();
    let mut locals = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        if t == "use" {
            i += 1;
            use_tree(tokens, &mut i, String::new(), &mut uses, &mut locals);
            continue;
        }
        if t == "extern" && tokens.get(i + 1).is_some_and(|c| c == "crate") {
            if let Some(name) = tokens.get(i + 2) {
                uses.push(name.clone());
            }
            i += 3;
            continue;
        }
        // `x::y`, not a turbofish (`collect::<T>`).
        let starts_path = is_ident(t)
            && tokens.get(i + 1).is_some_and(|n| n == "::")
            && tokens.get(i + 2).is_some_and(|n| is_ident(n))
            && (i == 0 || tokens[i - 1] != "::");
        let absolute = t == "::" && (i == 0 || !is_ident(&tokens[i - 1]) && tokens[i - 1] != ">");
        if starts_path || absolute {
            let mut path = Vec::new();
            if absolute {
                i += 1;
            }
            while i < tokens.len() && is_ident(&tokens[i]) {
                path.push(tokens[i].clone());
                if tokens.get(i + 1).is_some_and(|n| n == "::")
                    && tokens.get(i + 2).is_some_and(|n| is_ident(n))
                {
                    i += 2;
                } else {
                    i += 1;
                    break;
                }
            }
            if !path.is_empty() {
                out.push(path.join("::"));
            }
            continue;
        }
        i += 1;
    }
    Paths {
        uses,
        others: out,
        locals,
    }
}

/// The paths of a file: those of its `use` items (and `extern crate`), the others,
/// and the names its `use` items bring into scope.
struct Paths {
    uses: Vec<String>,
    others: Vec<String>,
    locals: Vec<String>,
}

/// Reads one `use` tree at `tokens[*i]` under `prefix`, up to its `;`, `,` or `}`;
/// the names it brings into scope go to `locals`.
fn use_tree(
    tokens: &[String],
    i: &mut usize,
    prefix: String,
    out: &mut Vec<String>,
    locals: &mut Vec<String>,
) {
    let mut path = prefix;
    if tokens.get(*i).is_some_and(|t| t == "::") {
        *i += 1; // `use ::x`: the crate x
    }
    while let Some(t) = tokens.get(*i) {
        match t.as_str() {
            "{" => {
                *i += 1;
                loop {
                    match tokens.get(*i).map(String::as_str) {
                        Some("}") => {
                            *i += 1;
                            break;
                        }
                        Some(",") => *i += 1,
                        None => return,
                        _ => use_tree(tokens, i, path.clone(), out, locals),
                    }
                }
                return;
            }
            "::" => *i += 1,
            ";" | "," | "}" => break,
            "as" => break,
            name => {
                if !path.is_empty() {
                    path.push_str("::");
                }
                path.push_str(name);
                *i += 1;
                if tokens.get(*i).is_none_or(|t| t != "::") {
                    break;
                }
            }
        }
    }
    if path == "self" || path.ends_with("::self") {
        path.truncate(path.len().saturating_sub("::self".len()));
    }
    if tokens.get(*i).is_some_and(|t| t == "as") {
        if let Some(alias) = tokens.get(*i + 1) {
            locals.push(alias.clone());
        }
        *i += 2;
    } else if let Some(last) = path.rsplit("::").next() {
        locals.push(last.to_string());
    }
    if !path.is_empty() {
        out.push(path);
    }
    if tokens.get(*i).is_some_and(|t| t == ";") {
        *i += 1;
    }
}

fn char_at(chars: &[char], i: usize) -> char {
    chars.get(i).copied().unwrap_or('\0')
}

fn is_ident(t: &str) -> bool {
    t.starts_with(|c: char| c.is_alphabetic() || c == '_') || t == "*"
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("read the core's directory") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn core_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("src/core")
    }

    /// Module names of the core, which paths inside it may start with.
    fn core_modules() -> Vec<String> {
        rust_files(&core_dir())
            .iter()
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_string))
            .chain(["sched".to_string()])
            .collect()
    }

    #[test]
    fn the_core_reaches_no_io_clock_environment_thread_or_random_map() {
        let modules = core_modules();
        let mut problems = Vec::new();
        let files = rust_files(&core_dir());
        assert!(files.len() > 20, "found the core's files");
        for path in files {
            let source = std::fs::read_to_string(&path).expect("read a core file");
            problems.extend(violations(&path.display().to_string(), &source, &modules));
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn the_check_catches_every_way_out_of_the_core() {
        let modules = core_modules();
        let caught = |source: &str| !violations("x.rs", source, &modules).is_empty();
        for bad in [
            "use tokio::net::UdpSocket;",
            "use ::tokio as t;",
            "use quinn;",
            "extern crate tokio;",
            "use crate::clock::Clock;",
            "use crate::{core::time::Instant, driver::Driver};",
            "fn f() { let t = std::time::Instant::now(); }",
            "use std::time::{Duration, Instant};",
            "use std::{env, fmt};",
            "fn f() { let _ = std::env::var(\"HOME\"); }",
            "fn f() -> &'static str { env!(\"HOME\") }",
            "use std::thread;",
            "fn f() { std::thread::spawn(|| ()); }",
            "use std::fs::File;",
            "use std::io::{IoSlice, Write};",
            "use std::io;",
            "use std::net::UdpSocket;",
            "use std::net::*;",
            "fn f() { let m: std::collections::HashMap<u8, u8> = Default::default(); }",
            "use std::collections::{BTreeMap, HashSet};",
            "use hashlink::LinkedHashMap as M; fn f(m: HashMap<u8, u8>) {}",
            "fn f() { let _ = prometheus::IntCounter::new(\"a\", \"b\"); }",
            "fn f() { tracing::info!(\"x\"); }",
            "#[path = \"../driver.rs\"] mod d;",
        ] {
            assert!(caught(bad), "not caught: {bad}");
        }
        for good in [
            "use std::net::{IpAddr, Ipv6Addr};",
            "use std::io::IoSlice; fn f(p: &[IoSlice<'_>]) {}",
            "use std::time::Duration; use super::time::Instant;",
            "use crate::core::flow::FlowTable; use super::{lane::LaneId, sched::Pick};",
            "fn f() -> u64 { u64::MAX } // std::thread::spawn in a comment",
            "const S: &str = \"use tokio::net\"; const R: &str = r#\"std::env\"#;",
            "fn f<'a>(x: &'a str) -> char { let _ = ':'; 'x' }",
            "use bytes::{Bytes, BytesMut}; use super::hash::FixedMap;",
        ] {
            assert!(
                !caught(good),
                "wrongly caught: {good}: {:?}",
                violations("x.rs", good, &modules)
            );
        }
    }
}

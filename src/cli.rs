//! The command line: `braid run | check-config | cert | status | pacing | controller | loadgen | demo`. Exit codes: 0 success, 2 a
//! configuration error, 1 any other failure; errors are one line `error: ...`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{Config, RoleConfig};
use crate::core::field_error::FieldError;

#[derive(Parser)]
#[command(name = "braid", version, about = "Multipath tunnelling gateway")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Run {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Validate a configuration and print a summary.
    CheckConfig {
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Manage the deployment's private CA.
    #[command(subcommand)]
    Cert(CertCommand),
    /// Show what a running gateway is doing: lanes, applications, flows, drops.
    Status {
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: String,
        /// Print the API's JSON document instead of the table.
        #[arg(long)]
        json: bool,
        /// Refresh every second, like top, until Ctrl-C.
        #[arg(long)]
        watch: bool,
        /// Only this site (an exit's of many).
        #[arg(long)]
        site: Option<String>,
    },
    /// Read or replace a site's application table (the controller's client).
    #[command(subcommand)]
    Pacing(PacingCommand),
    /// Run the pacing controller: allocate each site's uplinks among its applications
    /// from utility functions and put the tables to the fleet's gateways.
    Controller {
        #[arg(long, short)]
        config: PathBuf,
        /// Check the configuration and the token files it names, print a summary and
        /// exit (2 on an error) instead of running.
        #[arg(long)]
        check: bool,
    },
    /// Many sites against one exit from one process, to size an exit (issued
    /// certificates, real lanes; docs/scale-out.md).
    #[command(subcommand)]
    Loadgen(LoadgenCommand),
    /// Build a namespace testbed with three uplinks, run both gateways and three
    /// downloads, and show a live per-uplink table (root; Ctrl-C stops and cleans up).
    Demo {
        /// Stop after this many seconds instead of at Ctrl-C.
        #[arg(long)]
        seconds: Option<u64>,
        /// The scheduling algorithm of both gateways.
        #[arg(long, default_value = "afmt")]
        scheduler: String,
    },
}

#[derive(Subcommand)]
enum CertCommand {
    /// Write a new CA: DIR/ca.pem and DIR/ca.key.
    Init { dir: PathBuf },
    /// Issue DIR/NAME.pem and DIR/NAME.key for a site (or the exit) from the CA in DIR.
    Issue {
        #[arg(long)]
        ca: PathBuf,
        #[arg(long)]
        name: String,
    },
}

#[derive(Subcommand)]
enum LoadgenCommand {
    /// Print the exit's `[[sites]]` for the generator's first COUNT sites.
    Sites { count: usize },
    /// Run COUNT sites: each dials a green and a blue lane over every uplink; JSON
    /// lines on stdout.
    Run {
        /// The exit's address:port.
        #[arg(long)]
        exit: String,
        /// The name in the exit's certificate.
        #[arg(long, default_value = "exit")]
        exit_name: String,
        /// The CA directory; each site's certificate is issued there unless it exists.
        #[arg(long)]
        ca: PathBuf,
        #[arg(long)]
        sites: usize,
        /// The uplinks' interfaces, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        uplinks: Vec<String>,
        /// Stop after this many seconds (else at Ctrl-C or SIGTERM).
        #[arg(long)]
        seconds: Option<u64>,
        /// How many sites send, each to the next, at SIGUSR1.
        #[arg(long, default_value_t = 0)]
        send_sites: usize,
        /// What each sending site sends (kbit/s).
        #[arg(long, default_value_t = 1000)]
        rate_kbps: u64,
        /// What the first sending site sends instead (kbit/s): whether one busy site
        /// takes the others' share of the exit.
        #[arg(long)]
        busy_kbps: Option<u64>,
        /// How long the sending sites' goodput is measured over.
        #[arg(long, default_value_t = 10)]
        send_seconds: u64,
    },
}

#[derive(Subcommand)]
enum PacingCommand {
    /// Print the site's current table as JSON.
    Get {
        /// The site; may be left out when the gateway serves one site.
        #[arg(long)]
        site: Option<String>,
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: String,
    },
    /// Replace the site's table with the one in FILE (JSON, SPEC §4).
    Put {
        file: PathBuf,
        #[arg(long)]
        site: Option<String>,
        #[arg(long, default_value = DEFAULT_ADMIN)]
        admin: String,
        /// File holding the admin token (else the BRAID_ADMIN_TOKEN variable).
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
}

const DEFAULT_ADMIN: &str = "http://127.0.0.1:9190";
const EXIT_CONFIG: u8 = 2;
const EXIT_FAILURE: u8 = 1;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    crate::logging::init();
    let result = match cli.command {
        Command::Run { config } => run(config),
        Command::CheckConfig { config } => check_config(&config),
        Command::Demo { seconds, scheduler } => crate::demo::run(seconds, &scheduler),
        Command::Controller {
            config,
            check: false,
        } => crate::controller::run(&config),
        Command::Controller {
            config,
            check: true,
        } => crate::controller::check(&config),
        Command::Status {
            admin,
            json,
            watch,
            site,
        } => crate::control::admin_client::status(&admin, json, watch, site.as_deref()),
        Command::Pacing(PacingCommand::Get { site, admin }) => {
            crate::control::admin_client::get(&admin, site)
        }
        Command::Pacing(PacingCommand::Put {
            file,
            site,
            admin,
            token_file,
        }) => crate::control::admin_client::put(&admin, site, &file, token_file),
        Command::Loadgen(LoadgenCommand::Sites { count }) => {
            print!("{}", crate::loadgen::exit_sites(count));
            Ok(())
        }
        Command::Loadgen(LoadgenCommand::Run {
            exit,
            exit_name,
            ca,
            sites,
            uplinks,
            seconds,
            send_sites,
            rate_kbps,
            busy_kbps,
            send_seconds,
        }) => crate::loadgen::run(crate::loadgen::Options {
            exit,
            exit_name,
            ca,
            sites,
            interfaces: uplinks,
            seconds,
            send_sites,
            rate_kbps,
            busy_kbps,
            send_seconds,
        }),
        Command::Cert(CertCommand::Init { dir }) => crate::cert::init_ca(&dir)
            .map(|()| println!("wrote {0}/ca.pem and {0}/ca.key", dir.display())),
        Command::Cert(CertCommand::Issue { ca, name }) => crate::cert::issue(&ca, &name)
            .map(|(c, k)| println!("wrote {} and {}", c.display(), k.display())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            if e.downcast_ref::<FieldError>().is_some() {
                ExitCode::from(EXIT_CONFIG)
            } else {
                ExitCode::from(EXIT_FAILURE)
            }
        }
    }
}

fn run(path: PathBuf) -> anyhow::Result<()> {
    let config = Config::load(&path)?;
    crate::logging::configure(&config.log.filter);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("starting the runtime: {e}"))?;
    runtime.block_on(crate::app::run(config, path))
}

fn check_config(path: &std::path::Path) -> anyhow::Result<()> {
    let c = Config::load(path)?;
    match &c.role {
        RoleConfig::Entry(e) => {
            let exits: Vec<String> = e
                .exits
                .iter()
                .map(|x| format!("{} ({:?})", x.address, x.name))
                .collect();
            println!(
                "role: entry, site {:?}, exit {}",
                e.site,
                exits.join(", then ")
            );
            for u in &e.uplinks {
                let variation = u
                    .delay_variation_ms
                    .map(|v| format!(", delay varying by {v} ms"))
                    .unwrap_or_default();
                let tier = format!(
                    ", priority {}{}{}",
                    u.priority,
                    if u.cold { ", cold standby" } else { "" },
                    if u.overflow { ", overflow" } else { "" }
                );
                println!(
                    "uplink {:?}: interface {}, peer {}, rate up {} / down {}{variation}{tier}",
                    u.name,
                    u.interface,
                    u.peer
                        .as_deref()
                        .unwrap_or_else(|| e.exits.first().map_or("", |x| x.address.as_str())),
                    rate(u.rate_up_kbps),
                    rate(u.rate_down_kbps),
                );
            }
        }
        RoleConfig::Exit(x) => {
            println!(
                "role: exit, listening on {}, {} data-path thread(s){}",
                x.listen,
                x.data_path_threads(),
                if x.threads.is_some() {
                    ""
                } else {
                    " (one per core, at most one per site)"
                }
            );
            for s in &x.sites {
                let prefixes: Vec<String> = s.prefixes.iter().map(ToString::to_string).collect();
                println!("site {:?}: {}", s.id, prefixes.join(", "));
            }
        }
    }
    let routes: Vec<String> = c.tun.routes.iter().map(ToString::to_string).collect();
    println!(
        "tun {}: mtu {}, routes [{}]; scheduler {}; admin {}",
        c.tun.name,
        c.tun.mtu,
        routes.join(", "),
        c.scheduler.algorithm.as_str(),
        c.admin.listen
    );
    for warning in c.warnings() {
        eprintln!("warning: {warning}");
    }
    println!("configuration OK");
    Ok(())
}

fn rate(kbps: Option<u64>) -> String {
    kbps.map_or_else(|| "unknown".to_string(), |k| format!("{k} kbit/s"))
}

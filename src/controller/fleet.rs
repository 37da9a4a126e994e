//! The controller's side of the gateways' admin API: what a gateway reports (its
//! status, with each site's lanes and applications, and each site's table in force)
//! and putting a table.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, bail};
use hyper::{Method, StatusCode};

use super::config;
use crate::control::admin_client::AdminClient;
use crate::control::status::{SiteStatus, Status};
use crate::core::allocation::plan::LaneSeen;
use crate::core::pacing_table::PacingTable;

/// A gateway of the fleet.
pub struct Gateway {
    pub url: String,
    client: AdminClient,
}

/// What a gateway reported in one cycle.
#[derive(Debug, Clone)]
pub struct Observed {
    pub status: Status,
    pub sites: BTreeMap<String, SiteSeen>,
}

/// One site as a gateway reported it.
#[derive(Debug, Clone)]
pub struct SiteSeen {
    pub status: SiteStatus,
    pub table: PacingTable,
}

/// What became of a table put to a gateway.
pub enum PushOutcome {
    Taken,
    /// The gateway refused it (409: another table came first); its answer.
    Refused(String),
}

impl Gateway {
    /// The gateway of `config` (the configuration's `gateways[index]`), with its token
    /// read from its file.
    pub fn new(config: &config::Gateway, index: usize) -> anyhow::Result<Gateway> {
        let token = crate::control::admin::read_token_named(
            &config.token_file,
            &format!("gateways[{index}].token_file"),
        )?;
        Ok(Gateway {
            url: config.url.clone(),
            client: AdminClient::new(&config.url, Some(token))?,
        })
    }

    /// Its status and every site's table, all within `within`.
    pub async fn observe(&self, within: Duration) -> anyhow::Result<Observed> {
        tokio::time::timeout(within, async {
            let status: Status = serde_json::from_str(&self.get("/v1/status").await?)
                .context("GET /v1/status: unexpected answer")?;
            let mut sites = BTreeMap::new();
            for site in &status.sites {
                let path = format!("/v1/sites/{}/pacing", site.site);
                let table = PacingTable::parse(self.get(&path).await?.as_bytes())
                    .with_context(|| format!("GET {path}: unexpected answer"))?;
                sites.insert(
                    site.site.clone(),
                    SiteSeen {
                        status: site.clone(),
                        table,
                    },
                );
            }
            Ok(Observed { status, sites })
        })
        .await
        .with_context(|| format!("no answer within {within:?}"))?
    }

    async fn get(&self, path: &str) -> anyhow::Result<String> {
        let (status, body) = self.client.request(Method::GET, path, Vec::new()).await?;
        if status != StatusCode::OK {
            bail!("GET {path}: {status}: {body}");
        }
        Ok(body)
    }

    /// Puts `table` as `site`'s.
    pub async fn push(&self, site: &str, table: &PacingTable) -> anyhow::Result<PushOutcome> {
        let mut body = serde_json::to_value(table)?;
        // `replaces` is the request's, not the table's: serialising leaves it out.
        if let Some(replaces) = table.replaces {
            body["replaces"] = replaces.into();
        }
        let path = format!("/v1/sites/{site}/pacing");
        let (status, answer) = tokio::time::timeout(
            Duration::from_secs(5),
            self.client
                .request(Method::PUT, &path, serde_json::to_vec(&body)?),
        )
        .await
        .context("no answer within 5 s")??;
        match status {
            StatusCode::OK => Ok(PushOutcome::Taken),
            StatusCode::CONFLICT => Ok(PushOutcome::Refused(answer)),
            _ => bail!("PUT {path}: {status}: {answer}"),
        }
    }
}

impl Observed {
    /// The lanes the gateway reports for `site`.
    pub fn lanes(&self, site: &str) -> Vec<LaneSeen> {
        let entry = self.status.role == "entry";
        self.sites.get(site).map_or_else(Vec::new, |s| {
            s.status
                .lanes
                .iter()
                .map(|l| LaneSeen {
                    uplink: l.uplink.clone(),
                    up: l.state == "up",
                    min_srtt_ms: l.min_srtt_ms,
                    srtt_ms: l.srtt_ms,
                    cwnd_bytes: l.cwnd_bytes,
                    rate_kbps: l.rate_kbps,
                    sent_bps: if entry {
                        l.rate_up_bps
                    } else {
                        l.rate_down_bps
                    },
                })
                .collect()
        })
    }
}

impl SiteSeen {
    /// The flows of the application `name` the gateway saw lately.
    pub fn flows(&self, name: &str) -> u64 {
        self.status
            .apps
            .iter()
            .find(|a| a.name == name)
            .map_or(0, |a| a.flows)
    }
}

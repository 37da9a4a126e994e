//! `braid status` and `braid pacing get|put`: command-line clients of the admin API.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;

/// The admin API of a gateway, e.g. `http://127.0.0.1:9190`.
pub struct AdminClient {
    /// host:port
    authority: String,
    token: Option<String>,
}

/// Where a token comes from: `--token-file`, else the `BRAID_ADMIN_TOKEN` variable.
pub fn token(token_file: Option<&Path>) -> anyhow::Result<Option<String>> {
    if let Some(path) = token_file {
        return crate::control::admin::read_token(path).map(Some);
    }
    Ok(std::env::var("BRAID_ADMIN_TOKEN")
        .ok()
        .filter(|t| !t.is_empty()))
}

impl AdminClient {
    pub fn new(url: &str, token: Option<String>) -> anyhow::Result<AdminClient> {
        let Some(rest) = url.strip_prefix("http://") else {
            bail!("--admin: {url:?} is not an http:// URL (the admin API speaks plain HTTP)");
        };
        let authority = rest.trim_end_matches('/').to_string();
        if authority.is_empty() || authority.contains('/') {
            bail!("--admin: {url:?} must be http://HOST:PORT");
        }
        Ok(AdminClient { authority, token })
    }

    /// One request; returns the status and the body.
    pub(crate) async fn request(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<(StatusCode, String)> {
        let stream = tokio::net::TcpStream::connect(&self.authority)
            .await
            .with_context(|| format!("connecting to the admin API at {}", self.authority))?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .context("talking HTTP to the admin API")?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(hyper::header::HOST, &self.authority)
            .header(hyper::header::CONTENT_TYPE, "application/json");
        if let Some(token) = &self.token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let response = sender
            .send_request(req.body(Full::new(Bytes::from(body)))?)
            .await
            .context("sending the request")?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok((
            status,
            String::from_utf8_lossy(&body).trim_end().to_string(),
        ))
    }

    /// The site to talk about: the one given, or the gateway's only site.
    async fn site(&self, site: Option<String>) -> anyhow::Result<String> {
        if let Some(site) = site {
            return Ok(site);
        }
        let (status, body) = self.request(Method::GET, "/v1/sites", Vec::new()).await?;
        if status != StatusCode::OK {
            bail!("GET /v1/sites: {status}: {body}");
        }
        let sites: serde_json::Value = serde_json::from_str(&body)?;
        match sites["sites"].as_array().map(Vec::as_slice) {
            Some([one]) => match one.as_str() {
                Some(site) => Ok(site.to_string()),
                None => bail!("GET /v1/sites: unexpected answer {body}"),
            },
            Some(many) if many.len() > 1 => {
                bail!("the gateway serves {} sites: pass --site", many.len())
            }
            _ => bail!("GET /v1/sites: unexpected answer {body}"),
        }
    }
}

/// `braid status`: prints the gateway's status (of `site` alone, if given) as a
/// table (`json`: the API's document), once or (`watch`) every second in place
/// until interrupted.
pub fn status(admin: &str, json: bool, watch: bool, site: Option<&str>) -> anyhow::Result<()> {
    if let Some(site) = site {
        crate::core::wire::check_name("site", site)?;
    }
    let path = match site {
        Some(site) => format!("/v1/sites/{site}/status"),
        None => "/v1/status".to_string(),
    };
    runtime()?.block_on(async {
        let client = AdminClient::new(admin, None)?;
        loop {
            let (status, body) = client.request(Method::GET, &path, Vec::new()).await?;
            if status != StatusCode::OK {
                bail!("GET {path}: {status}: {body}");
            }
            let text = if json {
                body
            } else {
                let document: crate::control::status::Status = serde_json::from_str(&body)
                    .with_context(|| format!("GET {path}: unexpected answer {body}"))?;
                crate::control::status::table(&document)
            };
            if !watch {
                println!("{}", text.trim_end());
                return Ok(());
            }
            // Like top: home, clear, then the new screen.
            print!("\x1b[H\x1b[2J{}", text);
            std::io::Write::flush(&mut std::io::stdout())?;
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    })
}

/// `braid pacing get`: prints the site's table.
pub fn get(admin: &str, site: Option<String>) -> anyhow::Result<()> {
    runtime()?.block_on(async {
        let client = AdminClient::new(admin, None)?;
        let site = client.site(site).await?;
        let (status, body) = client
            .request(Method::GET, &format!("/v1/sites/{site}/pacing"), Vec::new())
            .await?;
        if status != StatusCode::OK {
            bail!("{status}: {body}");
        }
        println!("{body}");
        Ok(())
    })
}

/// `braid pacing put FILE`: sends a table; the gateway's refusal is the error.
pub fn put(
    admin: &str,
    site: Option<String>,
    file: &Path,
    token_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    let table = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    // Checked here too, so that a typo is reported before anything is sent.
    crate::core::pacing_table::PacingTable::parse(&table)
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let token = token(token_file.as_deref())?;
    if token.is_none() {
        bail!("no token: pass --token-file or set BRAID_ADMIN_TOKEN");
    }
    runtime()?.block_on(async {
        let client = AdminClient::new(admin, token)?;
        let site = client.site(site).await?;
        let (status, body) = client
            .request(Method::PUT, &format!("/v1/sites/{site}/pacing"), table)
            .await?;
        if status != StatusCode::OK {
            bail!("{status}: {body}");
        }
        println!("{body}");
        Ok(())
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")
}

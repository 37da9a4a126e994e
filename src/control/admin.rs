//! The admin HTTP server on `admin.listen`: `GET /metrics` (Prometheus text format),
//! `GET /healthz` (200 while at least one lane is up, 503 otherwise), `GET
//! /v1/status` (what `braid status` shows), and the pacing API of SPEC §9: `GET
//! /v1/sites` (the sites served here), `GET`/`PUT
//! /v1/sites/{site}/pacing` and `GET /v1/sites/{site}/apps`.
//!
//! Writes need `Authorization: Bearer TOKEN` with the token of `admin.token_file`;
//! without a token file they are refused (403). Answers: 400 with the reason for a
//! malformed or invalid table, 401 for a missing or wrong token, 404 for a site not
//! served here, 409 for a version older than the current one, 413 for a body over
//! [`MAX_BODY`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::control::command::DriverCommand;
use crate::control::metrics::Metrics;
use crate::control::pacing_control::{PacingControl, PutError};
use crate::control::status::{Status, StatusBoard};
use crate::core::field_error::FieldError;
use crate::core::pacing_table::PacingTable;

/// The largest request body taken: a table of 10,000 applications is about 2 MB.
pub const MAX_BODY: usize = 16 << 20;

/// What the admin server serves.
pub struct Admin {
    pub metrics: Arc<Metrics>,
    pub pacing: Arc<PacingControl>,
    /// The bearer token writes need; `None` refuses every write.
    pub token: Option<String>,
    /// The data path's status (`GET /v1/status`): renewed every second, and when
    /// asked for through `driver`.
    pub status: Arc<StatusBoard>,
    pub driver: mpsc::Sender<DriverCommand>,
}

impl Admin {
    /// An admin API of its own, for tests and the fuzz target: a fresh registry, the
    /// given sites without tables or a state file, tables sent to `commands`.
    pub fn detached(
        sites: Vec<String>,
        token: Option<String>,
        commands: mpsc::Sender<DriverCommand>,
    ) -> anyhow::Result<Admin> {
        Ok(Admin {
            metrics: Arc::new(Metrics::new()?),
            pacing: Arc::new(PacingControl::new(
                sites,
                Default::default(),
                None,
                commands.clone(),
                Arc::default(),
            )),
            token,
            status: Arc::new(StatusBoard::new(1)),
            driver: commands,
        })
    }
}

/// Reads `admin.token_file`: its first line, which must not be empty.
pub fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    Ok(read_token_named(path, "admin.token_file")?)
}

/// Reads a token file's first line, which must not be empty; errors begin with
/// `key`, the setting that named the file.
pub fn read_token_named(path: &std::path::Path, key: &str) -> Result<String, FieldError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| FieldError::new(key, format!("cannot read {}: {e}", path.display())))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    if token.is_empty() {
        return Err(FieldError::new(key, format!("{} is empty", path.display())));
    }
    Ok(token)
}

/// Binds the admin port (before anything else starts, so a busy port fails the start).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("admin.listen: cannot listen on {addr}"))
}

/// Admin connections served at once; more are closed at once, so that a flood of
/// connections cannot exhaust tasks or memory.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send a request's headers: a client that sends
/// nothing cannot hold a slot for long.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves admin requests until `shutdown`; connections still open then are ended.
pub async fn serve(listener: TcpListener, admin: Arc<Admin>, shutdown: CancellationToken) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "admin API listening");
    }
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    debug!(error = %e, "admin accept failed");
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = shutdown.cancelled() => break,
        };
        if connections.len() >= MAX_CONNECTIONS {
            debug!(%peer, "admin connection refused: {MAX_CONNECTIONS} already open");
            admin.metrics.count_admin_connection_failed();
            continue; // dropping the stream closes it
        }
        let admin = admin.clone();
        connections.spawn(async move {
            if let Err(e) = serve_connection(stream, admin).await {
                debug!(%peer, error = %e, "admin connection failed");
            }
        });
    }
    connections.shutdown().await;
}

/// Serves the requests of one connection (a TCP stream, or any byte stream: the
/// fuzz target feeds it raw bytes) until the client is done.
pub async fn serve_connection(
    stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    admin: Arc<Admin>,
) -> hyper::Result<()> {
    let metrics = admin.metrics.clone();
    let service = hyper::service::service_fn(move |req| {
        let admin = admin.clone();
        async move {
            let response = handle(req, &admin).await;
            admin
                .metrics
                .count_admin_request(response.status().as_u16());
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if served.is_err() {
        metrics.count_admin_connection_failed();
    }
    served
}

/// How long `GET /v1/status` waits for the data path to publish what it knows now; a
/// data path busier than that is answered with the status it published last (at most
/// a second old).
const STATUS_WAIT: Duration = Duration::from_millis(200);

/// The status as the data path knows it when asked: each of its threads publishes its
/// part on request, so that a lane that just came up, or a flow that just started,
/// shows at once.
async fn fresh_status(admin: &Admin) -> Status {
    let threads = admin.status.threads();
    let (done, mut published) = mpsc::channel(threads.max(1));
    // Not `send`: a data path whose command queue is full would hold the request
    // beyond any wait; it is answered with the last status instead.
    if admin
        .driver
        .try_send(DriverCommand::PublishStatus(done))
        .is_ok()
    {
        let all = async {
            for _ in 0..threads {
                if published.recv().await.is_none() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(STATUS_WAIT, all).await;
    }
    admin.status.current()
}

async fn handle(req: Request<Incoming>, admin: &Admin) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (req.method(), segments.as_slice()) {
        (&Method::GET, ["metrics"]) => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            admin.metrics.render(),
        ),
        (&Method::GET, ["healthz"]) => {
            let up = admin.metrics.lanes_up();
            if up > 0 {
                text(StatusCode::OK, format!("ok: {up} lanes up"))
            } else {
                text(StatusCode::SERVICE_UNAVAILABLE, "no lane is up".into())
            }
        }
        (&Method::GET, ["v1", "status"]) => match page_query(req.uri().query()) {
            Ok((after, limit)) => json(
                StatusCode::OK,
                &fresh_status(admin).await.page(after.as_deref(), limit),
            ),
            Err(problem) => text(StatusCode::BAD_REQUEST, problem),
        },
        (&Method::GET, ["v1", "sites", site, "status"]) => {
            match fresh_status(admin).await.of_site(site) {
                Some(status) => json(StatusCode::OK, &status),
                None => no_site(site),
            }
        }
        (&Method::GET, ["v1", "sites"]) => json(
            StatusCode::OK,
            &serde_json::json!({ "sites": admin.pacing.sites() }),
        ),
        (&Method::GET, ["v1", "sites", site, "pacing"]) => match admin.pacing.get(site).await {
            Some(table) => json(StatusCode::OK, &table),
            None => no_site(site),
        },
        (&Method::PUT, ["v1", "sites", site, "pacing"]) => {
            let site = site.to_string();
            put_pacing(req, &site, admin).await
        }
        (&Method::GET, ["v1", "sites", site, "apps"]) => match admin.pacing.report(site) {
            Some(report) => json(StatusCode::OK, &report),
            None => no_site(site),
        },
        (
            _,
            ["metrics" | "healthz"]
            | ["v1", "status" | "sites"]
            | ["v1", "sites", _, "apps" | "status"],
        ) => text(StatusCode::METHOD_NOT_ALLOWED, "only GET".into()),
        (_, ["v1", "sites", _, "pacing"]) => {
            text(StatusCode::METHOD_NOT_ALLOWED, "only GET and PUT".into())
        }
        _ => text(StatusCode::NOT_FOUND, "no such resource".into()),
    }
}

async fn put_pacing(req: Request<Incoming>, site: &str, admin: &Admin) -> Response<Full<Bytes>> {
    let Some(token) = &admin.token else {
        return text(
            StatusCode::FORBIDDEN,
            "writes are disabled: this gateway has no admin.token_file".into(),
        );
    };
    let offered = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if !offered.is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes())) {
        let mut r = text(
            StatusCode::UNAUTHORIZED,
            "a valid bearer token is required".into(),
        );
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Bearer"),
        );
        return r;
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the table is larger than {MAX_BODY} bytes"),
            );
        }
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("reading the body: {e}")),
    };
    let table = match PacingTable::parse(&body) {
        Ok(table) => table,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("invalid table: {e}")),
    };
    let (version, apps) = (table.version, table.apps.len());
    match admin.pacing.put(site, table).await {
        Ok(()) => json(
            StatusCode::OK,
            &serde_json::json!({ "version": version, "apps": apps }),
        ),
        Err(PutError::UnknownSite) => no_site(site),
        Err(PutError::Stale { current }) => text(
            StatusCode::CONFLICT,
            format!("version {version} is older than the current version {current}"),
        ),
        Err(PutError::NotReplacing { current, replaces }) => text(
            StatusCode::CONFLICT,
            format!(
                "version {version} replaces version {replaces}, but version {current} is in force"
            ),
        ),
        Err(PutError::Failed(e)) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the table was not applied, the previous one stays: {e}"),
        ),
    }
}

/// The most sites one page of `GET /v1/status` may ask for.
pub const MAX_STATUS_PAGE: usize = 1000;

/// `GET /v1/status`'s query: `after=SITE` (the page after that site) and `limit=N`
/// (at most N sites), both optional.
fn page_query(query: Option<&str>) -> Result<(Option<String>, Option<usize>), String> {
    let (mut after, mut limit) = (None, None);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("after", site)) => after = Some(site.to_string()),
            Some(("limit", n)) => match n.parse::<usize>() {
                Ok(n) if (1..=MAX_STATUS_PAGE).contains(&n) => limit = Some(n),
                _ => return Err(format!("limit {n:?} is not 1 to {MAX_STATUS_PAGE} sites")),
            },
            _ => return Err(format!("{pair:?} is not after=SITE or limit=N")),
        }
    }
    Ok((after, limit))
}

/// Compares without leaking where the first difference is.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn no_site(site: &str) -> Response<Full<Bytes>> {
    text(
        StatusCode::NOT_FOUND,
        format!("site \"{site}\" is not served by this gateway"),
    )
}

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    reply(status, "text/plain", format!("{body}\n").into_bytes())
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<Full<Bytes>> {
    match serde_json::to_vec_pretty(value) {
        Ok(mut body) => {
            body.push(b'\n');
            reply(status, "application/json", body)
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn get_healthz(addr: SocketAddr) -> std::io::Result<String> {
        let mut s = TcpStream::connect(addr).await?;
        s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").await?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).await?;
        Ok(answer)
    }

    #[tokio::test]
    async fn a_flood_of_connections_is_bounded_and_the_api_answers_after_it() {
        let listener = bind("127.0.0.1:0".parse().expect("addr"))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (commands, _driver) = tokio::sync::mpsc::channel(1);
        let admin = Arc::new(Admin::detached(vec!["site1".into()], None, commands).expect("admin"));
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(listener, admin.clone(), shutdown.clone()));
        // Clients that connect and say nothing hold every slot...
        let mut idle = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            idle.push(TcpStream::connect(addr).await.expect("connect"));
        }
        // ...so the next one is closed at once, without an answer.
        let refused = tokio::time::timeout(Duration::from_secs(2), get_healthz(addr))
            .await
            .expect("closed at once, not left hanging");
        assert!(
            refused.as_ref().is_ok_and(String::is_empty) || refused.is_err(),
            "{refused:?}"
        );
        let failed = String::from_utf8(admin.metrics.render()).expect("UTF-8");
        assert!(
            failed.contains("braid_admin_connections_failed_total 1"),
            "counted: {failed}"
        );
        drop(idle);
        // Slots free up as the idle clients leave.
        let answer = loop {
            match get_healthz(addr).await {
                Ok(a) if !a.is_empty() => break a,
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        };
        assert!(answer.starts_with("HTTP/1.0 503"), "{answer}");
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(2), server)
            .await
            .expect("the server and its connections end on shutdown")
            .expect("server task");
    }

    #[tokio::test]
    async fn the_status_is_what_the_data_path_knows_when_asked() {
        let (commands, mut driver) = mpsc::channel(1);
        let admin = Admin::detached(vec!["site1".into()], None, commands).expect("admin");
        let board = admin.status.clone();
        tokio::spawn(async move {
            while let Some(command) = driver.recv().await {
                if let DriverCommand::PublishStatus(done) = command {
                    let flows = 7;
                    board.publish(
                        0,
                        Status {
                            flows,
                            ..Status::default()
                        },
                    );
                    let _ = done.try_send(());
                }
            }
        });
        assert_eq!(
            fresh_status(&admin).await.flows,
            7,
            "not the last second's 0"
        );
    }

    #[test]
    fn a_status_page_is_asked_for_by_site_and_count() {
        assert_eq!(page_query(None), Ok((None, None)));
        assert_eq!(
            page_query(Some("limit=100&after=branch-07")),
            Ok((Some("branch-07".into()), Some(100)))
        );
        for bad in ["limit=0", "limit=1001", "limit=x", "page=2", "after"] {
            let e = page_query(Some(bad)).expect_err(bad);
            assert!(e.contains("limit") || e.contains("after"), "{e}");
        }
    }

    #[tokio::test]
    async fn a_data_path_that_does_not_answer_leaves_the_last_status() {
        let (commands, _held_but_never_read) = mpsc::channel(1);
        let admin = Admin::detached(vec!["site1".into()], None, commands).expect("admin");
        admin.status.publish(
            0,
            Status {
                flows: 3,
                ..Status::default()
            },
        );
        let clock = crate::clock::Clock::new();
        let asked = clock.now();
        assert_eq!(fresh_status(&admin).await.flows, 3);
        let waited = clock.now().saturating_since(asked);
        assert!(waited < STATUS_WAIT * 2, "{waited:?}");
    }
}

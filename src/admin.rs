//! The admin HTTP server on `admin.listen`: `GET /metrics` (Prometheus text format) and
//! `GET /healthz` (200 while at least one lane is up, 503 otherwise).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::metrics::Metrics;

/// Binds the admin port (before anything else starts, so a busy port fails the start).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("admin.listen: cannot listen on {addr}"))
}

/// Serves admin requests until `shutdown`.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, shutdown: CancellationToken) {
    if let Ok(addr) = listener.local_addr() {
        info!(%addr, "admin API listening");
    }
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    debug!(error = %e, "admin accept failed");
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&req, &metrics)) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                debug!(%peer, error = %e, "admin connection failed");
            }
        });
    }
}

fn handle(req: &Request<Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/metrics") => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4",
            metrics.render(),
        ),
        (&Method::GET, "/healthz") => {
            let up = metrics.lanes_up();
            let (status, body) = if up > 0 {
                (StatusCode::OK, format!("ok: {up} lanes up\n"))
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no lane is up\n".to_string(),
                )
            };
            reply(status, "text/plain", body.into_bytes())
        }
        (_, "/metrics" | "/healthz") => reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            b"only GET\n".to_vec(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            "text/plain",
            b"no such resource\n".to_vec(),
        ),
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

//! The accept loop: each connection served by hyper's HTTP/1 server with a header-read
//! timeout (which also closes a connection that sends no request for as long), at most
//! `max_connections` at once (more wait in the kernel's backlog), until shutdown: then no
//! more are accepted, idle ones close, and requests in flight are answered.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::Limits;

/// Longest wait, once shutdown begins, for the requests in flight to be answered.
const DRAIN_PATIENCE: Duration = Duration::from_secs(60);

pub(crate) async fn serve_connections(
    listener: TcpListener,
    app: Router,
    limits: &Limits,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let slots = limits.max_connections.max(1);
    let open = Arc::new(Semaphore::new(slots));
    let (closing, close) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        // A slot first: past the cap, connections wait in the backlog, not in memory.
        let slot = tokio::select! {
            slot = Arc::clone(&open).acquire_owned() => slot,
            () = &mut shutdown => break,
        };
        let Ok(slot) = slot else { break };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: pass, rather than spin.
                    log::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Without TCP_NODELAY a response written in two pieces waits for the client's
        // delayed ACK (measured on loopback, k=100 searches, one client: 103 -> 135 QPS).
        if let Err(e) = stream.set_nodelay(true) {
            log::debug!("TCP_NODELAY not set: {e}");
        }
        let service = TowerToHyperService::new(app.clone());
        let header_read = limits.header_read;
        let mut close = close.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(header_read);
            let conn = http.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                served = conn.as_mut() => {
                    if let Err(e) = served {
                        log::debug!("connection closed: {e}");
                    }
                }
                () = async { let _ = close.wait_for(|c| *c).await; } => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    let _ = closing.send(true);
    // Every slot back: every connection has closed.
    let drained = tokio::time::timeout(DRAIN_PATIENCE, open.acquire_many(slots as u32)).await;
    if drained.is_err() {
        log::warn!(
            "shutting down with requests still in flight after {} s",
            DRAIN_PATIENCE.as_secs()
        );
    }
    Ok(())
}

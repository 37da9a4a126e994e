//! The systemd notification protocol (`sd_notify`): `READY=1`, `STATUS=`,
//! `WATCHDOG=1`, `RELOADING=1` and `STOPPING=1` as datagrams to `$NOTIFY_SOCKET`.
//! Without that variable (not started by systemd) every call does nothing; a failed
//! send is logged at debug level and never stops the gateway.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use tracing::debug;

/// Where notifications go, and how often the service manager wants a watchdog ping.
#[derive(Debug, Default)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace) and
    /// `$WATCHDOG_USEC` (honoured unless `$WATCHDOG_PID` names another process).
    pub fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let path = path.to_string_lossy().into_owned();
            let address = match path.strip_prefix('@') {
                Some(name) => {
                    use std::os::linux::net::SocketAddrExt;
                    SocketAddr::from_abstract_name(name.as_bytes())
                }
                None => SocketAddr::from_pathname(&path),
            };
            match (UnixDatagram::unbound(), address) {
                (Ok(socket), Ok(address)) => Some((socket, address)),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(socket = path, error = %e, "NOTIFY_SOCKET unusable; not notifying systemd");
                    None
                }
            }
        });
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|pid| pid == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|usec| *usec > 0 && for_us)
            .map(Duration::from_micros);
        Notifier { target, watchdog }
    }

    /// How often the service manager expects `WATCHDOG=1`, if it does.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    pub fn ready(&self) {
        self.send("READY=1");
    }

    pub fn status(&self, text: &str) {
        self.send(&format!("STATUS={text}"));
    }

    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    /// A reload begins; `monotonic_usec` is `CLOCK_MONOTONIC` now, as systemd wants.
    pub fn reloading(&self, monotonic_usec: u64) {
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={monotonic_usec}"));
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    fn send(&self, message: &str) {
        if let Some((socket, address)) = &self.target
            && let Err(e) = socket.send_to_addr(message.as_bytes(), address)
        {
            debug!(error = %e, message, "notifying systemd");
        }
    }
}

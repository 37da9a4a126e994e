//! Raw bytes on an admin API connection: HTTP parsing (hyper), routing, the bearer
//! token check and a pacing table PUT, through the same code that serves a TCP
//! connection.
#![no_main]

use std::sync::{Arc, OnceLock};

use braid::control::admin::{Admin, serve_connection};
use braid::control::command::DriverCommand;
use libfuzzer_sys::fuzz_target;
use tokio::io::AsyncWriteExt;
use tokio::runtime::Runtime;

/// The token the seed corpus's writes carry.
const TOKEN: &str = "fuzz-token";

fn setup() -> &'static (Runtime, Arc<Admin>) {
    static SETUP: OnceLock<(Runtime, Arc<Admin>)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Stands in for the data path: every table is applied at once.
        let (commands, mut driver) = tokio::sync::mpsc::channel(16);
        runtime.spawn(async move {
            while let Some(command) = driver.recv().await {
                if let DriverCommand::ApplyPacing { done, .. } = command {
                    let _ = done.send(());
                }
            }
        });
        let admin = Admin::detached(vec!["site1".into()], Some(TOKEN.into()), commands);
        (runtime, Arc::new(admin.expect("admin")))
    })
}

fuzz_target!(|data: &[u8]| {
    let (runtime, admin) = setup();
    runtime.block_on(async {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (mut from_server, mut to_server) = tokio::io::split(client);
        // Whatever the server answers is read and thrown away, so that it never
        // blocks on a full pipe.
        let drain = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_server, &mut tokio::io::sink()).await;
        });
        let request = data.to_vec();
        let send = tokio::spawn(async move {
            let _ = to_server.write_all(&request).await;
            let _ = to_server.shutdown().await;
        });
        let _ = serve_connection(server, admin.clone()).await;
        let _ = send.await;
        let _ = drain.await;
    });
});

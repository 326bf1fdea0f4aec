//! ggml-rpc: devices on other machines, over TCP, speaking llama.cpp's RPC
//! protocol 7.0.0 (llama.cpp build 0c1e570) byte for byte, so that our
//! client works with llama.cpp's `rpc-server` and llama.cpp's clients with
//! ours.
//!
//! - Client: [`add_server`] connects to `host:port`, asks how many devices
//!   it serves and registers one device per remote device (`RPC0`, `RPC1`,
//!   ... numbered across servers, described by the endpoint) under the
//!   registry entry `RPC`. Their buffers live on the server; set/get/copy/
//!   clear/memset become commands; a graph is serialized as ggml tensors
//!   (`graph_encode.rs`, op numbers and params in `ops.rs`) and sent again
//!   as GRAPH_RECOMPUTE when it is byte for byte the same. Weight uploads
//!   over 10 MiB first offer their hash so a server with a cache skips them.
//! - Server ([`server::Server`], binary `rpc-server`): serves local devices
//!   to one client at a time. Every length, handle, address, shape and op
//!   parameter of a message is checked before use (`server.rs`,
//!   `server_graph.rs`): a hostile client gets disconnected, never memory.
//!
//! The protocol has no authentication: bind servers to loopback or a
//! trusted network only.

#![warn(missing_docs)]

pub mod client;
pub mod conn;
pub mod error;
pub mod graph_encode;
pub mod ops;
pub mod proto;
pub mod server;
pub mod server_graph;

use std::sync::{Arc, Mutex};

use ggml_core::{BackendReg, Device};

pub use client::{RpcBackend, RpcBuffer, RpcBufferType, RpcDevice};
pub use conn::{set_timeout, traffic, Conn};
pub use error::{Result, RpcError};
pub use server::Server;

/// The registry entry of every remote device.
pub struct RpcReg {
    servers: Mutex<Vec<(String, Vec<Arc<RpcDevice>>)>>,
}

static REG: std::sync::OnceLock<Arc<RpcReg>> = std::sync::OnceLock::new();

fn reg() -> Arc<RpcReg> {
    REG.get_or_init(|| {
        Arc::new(RpcReg {
            servers: Mutex::new(Vec::new()),
        })
    })
    .clone()
}

impl BackendReg for RpcReg {
    fn name(&self) -> &str {
        "RPC"
    }

    fn devices(&self) -> Vec<Arc<dyn Device>> {
        let servers = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        servers
            .iter()
            .flat_map(|(_, d)| d.iter().map(|d| d.clone() as Arc<dyn Device>))
            .collect()
    }
}

/// Registers the RPC entry in ggml-core's registry (idempotent); it has no
/// device until [`add_server`] is called.
pub fn register() {
    ggml_core::registry::register(reg());
}

/// Connects to the server at `endpoint` (`host:port`) and registers its
/// devices; returns them. A server already added returns its devices again.
pub fn add_server(endpoint: &str) -> Result<Vec<Arc<RpcDevice>>> {
    register();
    let reg = reg();
    let mut servers = reg.servers.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, devs)) = servers.iter().find(|(e, _)| e == endpoint) {
        return Ok(devs.clone());
    }
    let conn = Arc::new(Conn::connect(endpoint)?);
    let rsp = conn.call(proto::Cmd::DeviceCount, &[], Some(4))?;
    let count = u32::from_le_bytes([rsp[0], rsp[1], rsp[2], rsp[3]]);
    if count == 0 || count > 256 {
        return Err(RpcError::Malformed(format!(
            "{endpoint}: server reports {count} devices"
        )));
    }
    let first: usize = servers.iter().map(|(_, d)| d.len()).sum();
    let devs = (0..count)
        .map(|i| RpcDevice::new(conn.clone(), i, format!("RPC{}", first + i as usize)))
        .collect::<Result<Vec<_>>>()?;
    servers.push((endpoint.to_string(), devs.clone()));
    Ok(devs)
}

/// Adds every server of a comma-separated `host:port` list.
pub fn add_servers(list: &str) -> Result<Vec<Arc<RpcDevice>>> {
    let mut all = Vec::new();
    for ep in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        all.extend(add_server(ep)?);
    }
    if all.is_empty() {
        return Err(RpcError::Rejected(format!(
            "'{list}' names no RPC server (expected host:port[,host:port...])"
        )));
    }
    Ok(all)
}

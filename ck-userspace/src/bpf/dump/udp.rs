//! A UDP group's own maps for `ck maps`: `udp_stats` (datagrams by route, summed over CPUs)
//! and `flows` (the kernel's hash of a flow -> slot, with the flow's client), decoded.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use aya::maps::{HashMap, MapData, PerCpuArray};
use ck_common::{
    MAX_SLOTS, STATS_NO_SLOT,
    udp::{Client, FlowKey, FlowValue, Handshake, PendingKey, UdpStats, route, udp_mode},
};

use super::{DumpError, Reader, read_err};

/// The most flows `ck maps` lists one by one (all are counted).
pub const FLOWS_LISTED: usize = 4096;

/// A UDP group's own maps, decoded.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct UdpEntry {
    /// `config.udp_mode` as a word (`flow`, `stateless`).
    pub mode: String,
    /// `udp_stats`, summed over CPUs: datagrams by route of every slot with one.
    pub routes: Vec<RoutesEntry>,
    /// `udp_stats[128]`: datagrams no slot could take, by route.
    pub no_slot: Vec<(String, u64)>,
    /// Flows in `flows`.
    pub flows: usize,
    /// The first [`FLOWS_LISTED`] of them, by client.
    pub flows_listed: Vec<FlowEntry>,
    /// QUIC handshakes in `pending` (`quic` mode: by original destination connection ID).
    #[serde(default)]
    pub pending: usize,
}

/// One slot's datagrams by route.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct RoutesEntry {
    /// Slot index.
    pub slot: u32,
    /// (route, datagrams), every route.
    pub routes: Vec<(String, u64)>,
}

/// One remembered flow.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct FlowEntry {
    /// The client (address and port) of the flow's first datagram.
    pub client: String,
    /// The slot it goes to.
    pub slot: u32,
    /// The slot's `sock_gens` generation it was given under.
    pub generation: u32,
}

fn named(stats: &UdpStats) -> Vec<(String, u64)> {
    route::NAMES
        .iter()
        .zip(stats.routes)
        .map(|(name, n)| (name.to_string(), n))
        .collect()
}

fn client(key: &Client) -> String {
    let ip = match key.v6 {
        0 => IpAddr::V4(Ipv4Addr::new(
            key.addr[0],
            key.addr[1],
            key.addr[2],
            key.addr[3],
        )),
        _ => IpAddr::V6(Ipv6Addr::from(key.addr)),
    };
    SocketAddr::new(ip, u16::from_be(key.port)).to_string()
}

/// The mode word of a `config.udp_mode` code.
pub fn mode_word(code: u32) -> String {
    match code {
        udp_mode::FLOW => "flow".into(),
        udp_mode::STATELESS => "stateless".into(),
        udp_mode::QUIC => "quic".into(),
        other => format!("unknown ({other})"),
    }
}

/// Reads a UDP group's `udp_stats` and `flows` (`mode`: its `config.udp_mode`).
pub(super) fn read(reader: &mut Reader<'_>, mode: u32) -> Result<UdpEntry, DumpError> {
    let (path, stats): (_, PerCpuArray<MapData, UdpStats>) =
        reader.typed("udp_stats", "per-CPU array of UdpStats")?;
    let summed = |slot: u32| -> Result<UdpStats, DumpError> {
        let values = stats.get(&slot, 0).map_err(read_err(&path, slot))?;
        let mut total = UdpStats::default();
        values.iter().for_each(|v| total.add(v));
        Ok(total)
    };
    let mut routes = Vec::new();
    for slot in 0..MAX_SLOTS {
        let counted = summed(slot)?;
        if counted.total() > 0 {
            routes.push(RoutesEntry {
                slot,
                routes: named(&counted),
            });
        }
    }
    let no_slot = named(&summed(STATS_NO_SLOT)?);
    let (_, flows_map): (_, HashMap<MapData, FlowKey, FlowValue>) =
        reader.typed("flows", "LRU hash of FlowKey to FlowValue")?;
    let mut flows: Vec<FlowValue> = flows_map
        .iter()
        .filter_map(Result::ok)
        .map(|(_, value)| value)
        .collect();
    let count = flows.len();
    let (_, pending_map): (_, HashMap<MapData, PendingKey, Handshake>) =
        reader.typed("pending", "LRU hash of PendingKey to Handshake")?;
    let pending = pending_map.keys().filter(Result::is_ok).count();
    flows.sort_unstable_by_key(|f| (f.client.v6, f.client.addr, u16::from_be(f.client.port)));
    Ok(UdpEntry {
        mode: mode_word(mode),
        routes,
        no_slot,
        flows: count,
        pending,
        flows_listed: flows
            .iter()
            .take(FLOWS_LISTED)
            .map(|flow| FlowEntry {
                client: client(&flow.client),
                slot: flow.to.slot,
                generation: flow.to.generation,
            })
            .collect(),
    })
}

//! Where `ck run` listens: `--port`'s parser, one listen address (`tcp://` or `udp://`
//! HOST:PORT, a group of `SO_REUSEPORT` sockets) and the list of groups `--port` and `--listen`
//! make together.
use std::{fmt, net::SocketAddr, str::FromStr};

use super::ConfigError;
use crate::settings::defaults;

/// Why a listen port cannot be 0, and the fix.
pub(super) const PORT_ZERO: &str = "port 0 asks the kernel for any free port, and each of ck's sockets \
     would get a different one, so the workers would not share a port and clients would not \
     know it; give a port from 1 to 65535, e.g. 8080";

/// `--port`'s value parser: a TCP port from 1 to 65535 (0 is explained: see [`PORT_ZERO`]).
///
/// # Errors
/// A message naming what is wrong and the range, for clap to print after the option.
pub fn parse_port(text: &str) -> Result<u16, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err(PORT_ZERO.to_string()),
        Ok(port) => u16::try_from(port).map_err(|_| {
            format!("{port} is out of range: ports go from 1 to 65535; give e.g. 8080")
        }),
        Err(_) => Err(format!(
            "{text:?} is not a port: give a number from 1 to 65535, e.g. 8080 (an address goes \
             in --listen tcp://HOST:PORT)"
        )),
    }
}

/// A listen group's transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Proto {
    /// TCP: listening sockets; the program picks a socket for each new connection.
    Tcp,
    /// UDP: bound sockets; the program picks a socket for every datagram (`--udp-mode`).
    Udp,
}

impl Proto {
    /// `tcp` or `udp`, as in the address's scheme and the group's name.
    pub fn word(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// One listen address: a group of `SO_REUSEPORT` sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenAddr {
    /// Address and port to bind.
    pub addr: SocketAddr,
    /// TCP or UDP.
    pub proto: Proto,
}

impl ListenAddr {
    /// `tcp://0.0.0.0:PORT`.
    pub fn tcp4_any(port: u16) -> Self {
        ListenAddr {
            addr: SocketAddr::from(([0, 0, 0, 0], port)),
            proto: Proto::Tcp,
        }
    }

    /// Whether the group is UDP.
    pub fn is_udp(&self) -> bool {
        self.proto == Proto::Udp
    }

    /// The group's name in pins and `LISTEN_FDNAMES`: `tcp4-8080`, `tcp6-8080`, `udp6-443`, and
    /// for a specific host `tcp4-127_0_0_1-8080` (bpffs names may not contain dots).
    pub fn group_name(&self) -> String {
        let v = if self.addr.is_ipv4() { "4" } else { "6" };
        let family = format!("{}{v}", self.proto.word());
        if self.addr.ip().is_unspecified() {
            format!("{family}-{}", self.addr.port())
        } else {
            let host: String = self
                .addr
                .ip()
                .to_string()
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            format!("{family}-{host}-{}", self.addr.port())
        }
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.proto.word(), self.addr)
    }
}

impl FromStr for ListenAddr {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (proto, rest) = match (s.strip_prefix("tcp://"), s.strip_prefix("udp://")) {
            (Some(rest), _) => (Proto::Tcp, rest),
            (_, Some(rest)) => (Proto::Udp, rest),
            _ => return Err(ConfigError::BadListen(s.to_string())),
        };
        let addr: SocketAddr = rest
            .parse()
            .map_err(|_| ConfigError::BadListen(s.to_string()))?;
        if addr.port() == 0 {
            return Err(ConfigError::ListenPortZero(s.to_string()));
        }
        Ok(ListenAddr { addr, proto })
    }
}

/// Combines `--port` and `--listen` into the list of groups, refusing duplicates; with neither,
/// the one group is `tcp://0.0.0.0:8080`.
pub fn listen_addrs(ports: &[u16], listen: &[ListenAddr]) -> Result<Vec<ListenAddr>, ConfigError> {
    let mut all: Vec<ListenAddr> = Vec::new();
    for addr in ports
        .iter()
        .map(|p| ListenAddr::tcp4_any(*p))
        .chain(listen.iter().copied())
    {
        if addr.addr.port() == 0 {
            return Err(ConfigError::ListenPortZero(addr.to_string()));
        }
        if all.contains(&addr) {
            return Err(ConfigError::DuplicateListen(addr));
        }
        all.push(addr);
    }
    if all.is_empty() {
        all.push(ListenAddr::tcp4_any(defaults::PORT));
    }
    Ok(all)
}

//! QUIC under `ck run --udp-mode quic`: the connection IDs a server chooses carry its cookie, so
//! that ck's program sends every packet of a connection to this worker, whatever the client's
//! address (migration, NAT rebinding), across rolls and other workers' deaths.
//!
//! ck gives each worker its server ID in `CK_QUIC_SERVER_ID` (hex). A connection ID is then laid
//! out as QUIC-LB's plaintext server ID encoding (draft-ietf-quic-load-balancers):
//!
//! | octets | content |
//! | --- | --- |
//! | 0 | top three bits 0 (the configuration), low five bits the ID's length less one |
//! | 1..=2 | the server ID: the slot, then the low byte of the worker's generation |
//! | 3.. | random (at least 4 octets) |
//!
//! [`CookieCids`] makes such IDs; with the `quinn` feature it is a quinn
//! `ConnectionIdGenerator` (`EndpointConfig::cid_generator`). Other stacks: choose the IDs the
//! same way (aioquic: `connection_id_length` and a `QuicConnection` subclass, ngtcp2: its
//! `get_new_connection_id` callback), or run in `flow` mode.
/// Octets of the server ID.
pub const SERVER_ID_LEN: usize = 2;
/// The fewest random octets after the server ID.
pub const MIN_NONCE: usize = 4;
/// The default length of the IDs [`CookieCids`] makes (the length quinn uses by default).
pub const DEFAULT_CID_LEN: usize = 8;
/// The longest QUIC connection ID.
pub const MAX_CID_LEN: usize = 20;

/// Why `CK_QUIC_SERVER_ID` or a length could not be used.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    /// `CK_QUIC_SERVER_ID` is not 2 octets of hex.
    #[error("CK_QUIC_SERVER_ID is {0:?}: expected 4 hex digits (ck sets it with --udp-mode quic)")]
    BadServerId(String),
    /// A connection ID length that cannot hold the cookie.
    #[error("a connection ID of {0} octets cannot carry the cookie: give 7 to 20")]
    BadLength(usize),
}

/// The worker's server ID from `CK_QUIC_SERVER_ID` (None when ck did not set it: not under
/// `--udp-mode quic`).
///
/// # Errors
/// When it is set but is not 4 hex digits.
pub fn server_id() -> Result<Option<[u8; SERVER_ID_LEN]>, QuicError> {
    match std::env::var("CK_QUIC_SERVER_ID") {
        Ok(hex) => parse_server_id(&hex).map(Some),
        Err(_) => Ok(None),
    }
}

fn parse_server_id(hex: &str) -> Result<[u8; SERVER_ID_LEN], QuicError> {
    let bad = || QuicError::BadServerId(hex.to_string());
    if hex.len() != 2 * SERVER_ID_LEN || !hex.is_ascii() {
        return Err(bad());
    }
    let mut id = [0u8; SERVER_ID_LEN];
    for (i, octet) in id.iter_mut().enumerate() {
        *octet = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(id)
}

/// Makes connection IDs that carry a server ID (see the module's table).
#[derive(Clone, Debug)]
pub struct CookieCids {
    server_id: [u8; SERVER_ID_LEN],
    len: usize,
}

impl CookieCids {
    /// IDs of `len` octets (7 to 20) for server ID `server_id`.
    ///
    /// # Errors
    /// When `len` cannot hold the first octet, the server ID and 4 random octets.
    pub fn new(server_id: [u8; SERVER_ID_LEN], len: usize) -> Result<CookieCids, QuicError> {
        if !(1 + SERVER_ID_LEN + MIN_NONCE..=MAX_CID_LEN).contains(&len) {
            return Err(QuicError::BadLength(len));
        }
        Ok(CookieCids { server_id, len })
    }

    /// The generator for this worker (`CK_QUIC_SERVER_ID`), IDs of [`DEFAULT_CID_LEN`] octets;
    /// None when ck did not set it.
    ///
    /// # Errors
    /// When `CK_QUIC_SERVER_ID` is malformed.
    pub fn from_env() -> Result<Option<CookieCids>, QuicError> {
        server_id()?
            .map(|id| CookieCids::new(id, DEFAULT_CID_LEN))
            .transpose()
    }

    /// The length of the IDs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: an ID has at least 7 octets.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// A new ID: the first octet, the server ID, then random octets.
    pub fn generate(&self) -> Vec<u8> {
        let mut cid = vec![0u8; self.len];
        cid[0] = ((self.len - 1) & 0x1f) as u8;
        cid[1..=SERVER_ID_LEN].copy_from_slice(&self.server_id);
        fill_random(&mut cid[1 + SERVER_ID_LEN..]);
        cid
    }

    /// Whether `cid` carries this generator's cookie.
    pub fn carries_cookie(&self, cid: &[u8]) -> bool {
        cid.len() == self.len && cid[0] >> 5 == 0 && cid[1..=SERVER_ID_LEN] == self.server_id
    }
}

/// Fills `buf` from the kernel's random source (`/dev/urandom`: no `unsafe` in this crate
/// beyond taking the inherited descriptors).
fn fill_random(buf: &mut [u8]) {
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(buf))
        // No random source: nothing sane to put in a connection ID.
        .expect("reading /dev/urandom");
}

#[cfg(feature = "quinn")]
impl quinn_proto::ConnectionIdGenerator for CookieCids {
    fn generate_cid(&mut self) -> quinn_proto::ConnectionId {
        quinn_proto::ConnectionId::new(&self.generate())
    }

    fn validate(&self, cid: &quinn_proto::ConnectionId) -> Result<(), quinn_proto::InvalidCid> {
        match self.carries_cookie(cid) {
            true => Ok(()),
            false => Err(quinn_proto::InvalidCid),
        }
    }

    fn cid_len(&self) -> usize {
        self.len
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_carry_the_server_id_after_the_first_octet() {
        let cids = CookieCids::new([3, 7], 8).unwrap();
        let a = cids.generate();
        let b = cids.generate();
        assert_eq!(a.len(), 8);
        assert_eq!(a[0], 7, "configuration 0, length less one");
        assert_eq!(&a[1..3], &[3, 7]);
        assert_ne!(a[3..], b[3..], "random after the server ID");
        assert!(cids.carries_cookie(&a));
        assert!(!CookieCids::new([4, 7], 8).unwrap().carries_cookie(&a));
    }

    #[test]
    fn the_server_id_and_length_are_checked() {
        assert_eq!(parse_server_id("0a1f").unwrap(), [10, 31]);
        assert!(parse_server_id("0a1").is_err());
        assert!(parse_server_id("zz00").is_err());
        assert!(CookieCids::new([0, 0], 6).is_err());
        assert!(CookieCids::new([0, 0], 21).is_err());
        assert!(CookieCids::new([0, 0], 20).is_ok());
    }
}

//! The `sticky` policy's lookup table and client key, shared by the program (one lookup per
//! connection) and the supervisor (which fills the table with Maglev's algorithm at a publish).
//!
//! The key is the client's source IP address (IPv4 or IPv6, as on the wire): it needs no
//! header of the application protocol, and every connection of a client carries it. Clients
//! behind one NAT share an address, so they share a worker.

/// Entries of one half of the table. A prime (2^16 + 1): Maglev's permutations step through
/// the table by a skip in `[1, TABLE_SIZE)`, which visits every entry only when the size is
/// prime. 65537 entries are 512 per slot at `MAX_SLOTS` workers, so Maglev's balance (each
/// slot holds `TABLE_SIZE / N` entries, give or take one) is within 0.2 % there.
pub const TABLE_SIZE: usize = 65_537;

/// The entry of a table built from an empty set: no slot (the program then uses the hash
/// policy).
pub const NO_SLOT: u8 = u8::MAX;

/// One half of the double-buffered `sticky` map: table position -> slot index (a `u8`, as
/// slots are below `MAX_SLOTS` = 128; [`NO_SLOT`] when the set was empty). The half that
/// `Config::live_half` names belongs with the live half of `active`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StickyTable {
    /// Slot of each position.
    pub slots: [u8; TABLE_SIZE],
}

impl StickyTable {
    /// A table that names no slot.
    pub const EMPTY: StickyTable = StickyTable {
        slots: [NO_SLOT; TABLE_SIZE],
    };
}

/// The table position of a client whose source address is `addr`: an IPv4 address in the
/// first 4 bytes and zeros after it (`v6` false), or an IPv6 address (`v6` true). A
/// murmur3-style mix of the address words, scaled onto the table by a multiply and a shift
/// (no divide, as the program runs it for every connection).
#[inline(always)]
pub fn position(addr: &[u8; 16], v6: bool) -> u32 {
    scaled(mix(addr, if v6 { 0x6b43_a9b5 } else { 0x2f0b_3c61 }))
}

/// The table position of a UDP flow whose datagrams the kernel hashed to `hash` (the reuseport
/// hash of the addresses and ports, already mixed): scaled onto the table.
#[inline(always)]
pub fn hash_position(hash: u32) -> u32 {
    scaled(hash)
}

/// A murmur3-style mix of the address words from `seed`.
#[inline(always)]
fn mix(addr: &[u8; 16], seed: u32) -> u32 {
    // Constant indices only: no bounds check is left for the BPF target.
    let word = |k: usize| u32::from_ne_bytes([addr[k], addr[k + 1], addr[k + 2], addr[k + 3]]);
    let mut h = seed;
    for w in [word(0), word(4), word(8), word(12)] {
        h = (h ^ w)
            .wrapping_mul(0xcc9e_2d51)
            .rotate_left(15)
            .wrapping_mul(0x1b87_3593);
    }
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// `h` scaled onto the table by a multiply and a shift.
#[inline(always)]
fn scaled(h: u32) -> u32 {
    ((u64::from(h) * TABLE_SIZE as u64) >> 32) as u32
}

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, `Copy`, one array of `u8`: no padding, every bit pattern valid.
unsafe impl aya::Pod for StickyTable {}

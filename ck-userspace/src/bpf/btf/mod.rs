//! A small reader of BTF, the kernel's type information (`/sys/kernel/btf/vmlinux`): enough
//! to find where a field lies in a kernel struct (`sk_ack_backlog` in `struct sock`, ...), so
//! that the select program can read it with `bpf_probe_read_kernel` at offsets resolved at
//! load. aya 0.14 keeps its BTF lookups crate-private, and ck's program has no CO-RE
//! relocations, hence this reader: the header, the type section (every kind's record is
//! skipped by its size; structs and unions keep their members with bit offsets) and the string
//! section. Split BTF (modules) is not read: only the kernel's own.
use std::{ops::Range, path::Path};

/// Where the running kernel publishes its BTF.
pub const KERNEL_BTF: &str = "/sys/kernel/btf/vmlinux";

const MAGIC: u16 = 0xeb9f;
/// Bytes of the fixed header (`struct btf_header`).
const HEADER_LEN: usize = 24;
/// Bytes of the common record every type starts with (`struct btf_type`).
const TYPE_LEN: usize = 12;
/// Kinds, as in the kernel's `include/uapi/linux/btf.h`.
mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const FWD: u32 = 7;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const VAR: u32 = 14;
    pub const DATASEC: u32 = 15;
    pub const FLOAT: u32 = 16;
    pub const DECL_TAG: u32 = 17;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}
/// How deep typedefs, modifiers and anonymous members may nest before the reader gives up
/// (real kernels nest a handful; a loop in a corrupt blob must not hang ck).
const MAX_DEPTH: usize = 32;

/// Why BTF could not be read, or a field not found in it.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The file could not be read.
    #[error(
        "reading the kernel's BTF at {path}: {error}; the kernel needs CONFIG_DEBUG_INFO_BTF=y"
    )]
    Read {
        /// The file.
        path: String,
        /// What the system said.
        error: std::io::Error,
    },
    /// The data is not BTF, or is cut short.
    #[error("malformed BTF: {0}")]
    Malformed(String),
    /// No struct of that name.
    #[error("the kernel's BTF has no struct {0}")]
    NoStruct(String),
    /// No member of that name in the struct (or in its anonymous members).
    #[error("the kernel's BTF has no member {member} in struct {within}")]
    NoMember {
        /// The struct (or member path) searched.
        within: String,
        /// The member.
        member: String,
    },
    /// The field is not a whole number of bytes (a bitfield), or not of the expected size.
    #[error("{field} in the kernel's BTF is {found}, not {expected}")]
    Unexpected {
        /// The field (`struct.member`).
        field: String,
        /// What it is.
        found: String,
        /// What ck reads there.
        expected: String,
    },
}

/// One member of a struct or union.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Member {
    name_off: u32,
    type_id: u32,
    bit_offset: u32,
    /// 0 for a member that is not a bitfield.
    bitfield_size: u32,
}

/// One type: its common record, and its members when it is a struct or union.
#[derive(Clone, Debug)]
struct Type {
    kind: u32,
    name_off: u32,
    /// `size` for sized kinds, `type` for the kinds that refer to another.
    size_or_type: u32,
    members: Range<usize>,
    /// For an array: (element type, element count).
    array: Option<(u32, u32)>,
}

/// A field found in a struct: where it lies from the struct's start, and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// Offset in bytes.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A parsed BTF blob: its types (id 1 is `types[0]`; id 0 is `void`) and strings.
#[derive(Debug)]
pub struct Btf {
    types: Vec<Type>,
    members: Vec<Member>,
    strings: Vec<u8>,
}

/// Reads numbers of one byte order out of a byte slice, with bounds checks.
struct Reader<'a> {
    bytes: &'a [u8],
    big_endian: bool,
}

impl Reader<'_> {
    fn u32_at(&self, at: usize) -> Result<u32, BtfError> {
        let raw: [u8; 4] = at
            .checked_add(4)
            .and_then(|end| self.bytes.get(at..end))
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| BtfError::Malformed(format!("cut short at byte {at}")))?;
        Ok(match self.big_endian {
            true => u32::from_be_bytes(raw),
            false => u32::from_le_bytes(raw),
        })
    }
}

impl Btf {
    /// Reads and parses the running kernel's BTF ([`KERNEL_BTF`]).
    pub fn kernel() -> Result<Btf, BtfError> {
        Btf::read(Path::new(KERNEL_BTF))
    }

    /// Reads and parses the BTF file at `path`.
    pub fn read(path: &Path) -> Result<Btf, BtfError> {
        let bytes = std::fs::read(path).map_err(|error| BtfError::Read {
            path: path.display().to_string(),
            error,
        })?;
        Btf::parse(&bytes)
    }

    /// Parses a BTF blob (either byte order, told by its magic number).
    pub fn parse(bytes: &[u8]) -> Result<Btf, BtfError> {
        let magic = bytes
            .get(..2)
            .ok_or_else(|| BtfError::Malformed("empty".into()))?;
        let big_endian = match [magic[0], magic[1]] {
            m if m == MAGIC.to_le_bytes() => false,
            m if m == MAGIC.to_be_bytes() => true,
            m => return Err(BtfError::Malformed(format!("bad magic {m:02x?}"))),
        };
        let header = Reader { bytes, big_endian };
        let hdr_len = header.u32_at(4)? as usize;
        if hdr_len < HEADER_LEN {
            return Err(BtfError::Malformed(format!("header of {hdr_len} bytes")));
        }
        let section = |off_at: usize, what: &str| -> Result<&[u8], BtfError> {
            let off = header.u32_at(off_at)? as usize;
            let len = header.u32_at(off_at + 4)? as usize;
            hdr_len
                .checked_add(off)
                .and_then(|start| Some(start..start.checked_add(len)?))
                .and_then(|range| bytes.get(range))
                .ok_or_else(|| BtfError::Malformed(format!("{what} section out of the data")))
        };
        let type_section = section(8, "type")?;
        let strings = section(16, "string")?.to_vec();
        let mut btf = Btf {
            types: Vec::new(),
            members: Vec::new(),
            strings,
        };
        btf.parse_types(&Reader {
            bytes: type_section,
            big_endian,
        })?;
        Ok(btf)
    }

    fn parse_types(&mut self, r: &Reader<'_>) -> Result<(), BtfError> {
        let mut at = 0;
        while at < r.bytes.len() {
            let name_off = r.u32_at(at)?;
            let info = r.u32_at(at + 4)?;
            let size_or_type = r.u32_at(at + 8)?;
            let kind = (info >> 24) & 0x1f;
            let vlen = (info & 0xffff) as usize;
            let kind_flag = info >> 31 == 1;
            let data = at + TYPE_LEN;
            let start = self.members.len();
            let mut array = None;
            let extra = match kind {
                kind::INT | kind::VAR | kind::DECL_TAG => 4,
                kind::PTR
                | kind::FWD
                | kind::TYPEDEF
                | kind::VOLATILE
                | kind::CONST
                | kind::RESTRICT
                | kind::FUNC
                | kind::FLOAT
                | kind::TYPE_TAG => 0,
                kind::ARRAY => {
                    // struct btf_array { type, index_type, nelems }
                    array = Some((r.u32_at(data)?, r.u32_at(data + 8)?));
                    12
                }
                kind::STRUCT | kind::UNION => {
                    for i in 0..vlen {
                        let m = data + i * 12;
                        let offset = r.u32_at(m + 8)?;
                        let (bit_offset, bitfield_size) = match kind_flag {
                            true => (offset & 0x00ff_ffff, offset >> 24),
                            false => (offset, 0),
                        };
                        self.members.push(Member {
                            name_off: r.u32_at(m)?,
                            type_id: r.u32_at(m + 4)?,
                            bit_offset,
                            bitfield_size,
                        });
                    }
                    vlen * 12
                }
                kind::ENUM | kind::FUNC_PROTO => vlen * 8,
                kind::DATASEC | kind::ENUM64 => vlen * 12,
                other => {
                    return Err(BtfError::Malformed(format!(
                        "unknown kind {other} at type {}",
                        self.types.len() + 1
                    )));
                }
            };
            self.types.push(Type {
                kind,
                name_off,
                size_or_type,
                members: start..self.members.len(),
                array,
            });
            at = data + extra;
        }
        if at != r.bytes.len() {
            return Err(BtfError::Malformed("the last type is cut short".into()));
        }
        Ok(())
    }

    /// Number of types (ids `1..=len`).
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// Whether there is no type at all.
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    fn name(&self, off: u32) -> &str {
        let tail = self.strings.get(off as usize..).unwrap_or_default();
        let end = tail.iter().position(|b| *b == 0).unwrap_or(tail.len());
        std::str::from_utf8(&tail[..end]).unwrap_or_default()
    }

    fn get(&self, id: u32) -> Option<&Type> {
        self.types.get((id as usize).checked_sub(1)?)
    }

    /// The id of the struct named `name` (the first, if several).
    pub fn struct_named(&self, name: &str) -> Option<u32> {
        self.types
            .iter()
            .position(|t| t.kind == kind::STRUCT && self.name(t.name_off) == name)
            .map(|i| i as u32 + 1)
    }

    /// `id` with typedefs and modifiers (`const`, `volatile`, `restrict`, type tags) peeled off.
    fn resolve(&self, mut id: u32) -> Option<u32> {
        for _ in 0..MAX_DEPTH {
            let t = self.get(id)?;
            match t.kind {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    id = t.size_or_type
                }
                _ => return Some(id),
            }
        }
        None
    }

    /// The size in bytes of type `id` (pointers: 8, the kernels ck runs on are 64-bit).
    pub fn size_of(&self, id: u32) -> Option<u32> {
        let t = self.get(self.resolve(id)?)?;
        match t.kind {
            kind::INT
            | kind::STRUCT
            | kind::UNION
            | kind::ENUM
            | kind::ENUM64
            | kind::FLOAT
            | kind::DATASEC => Some(t.size_or_type),
            kind::PTR => Some(8),
            kind::ARRAY => {
                let (elem, count) = t.array?;
                self.size_of(elem)?.checked_mul(count)
            }
            _ => None,
        }
    }

    /// Finds member `name` of struct or union `id`, looking into its anonymous members too:
    /// its type and bit offset from the start of `id`.
    fn member_of(&self, id: u32, name: &str, depth: usize) -> Option<Member> {
        let t = self.get(self.resolve(id)?)?;
        if !matches!(t.kind, kind::STRUCT | kind::UNION) || depth > MAX_DEPTH {
            return None;
        }
        let members = self.members.get(t.members.clone())?;
        if let Some(m) = members.iter().find(|m| self.name(m.name_off) == name) {
            return Some(*m);
        }
        members
            .iter()
            .filter(|m| m.name_off == 0 || self.name(m.name_off).is_empty())
            .find_map(|anon| {
                let inner = self.member_of(anon.type_id, name, depth + 1)?;
                Some(Member {
                    bit_offset: anon.bit_offset + inner.bit_offset,
                    ..inner
                })
            })
    }

    /// [`Btf::field`], refused unless it is `size` bytes (the size a program reads it as).
    pub fn sized_field(&self, within: &str, path: &[&str], size: u32) -> Result<Field, BtfError> {
        let field = self.field(within, path)?;
        if field.size != size {
            return Err(BtfError::Unexpected {
                field: format!("{within}.{}", path.join(".")),
                found: format!("{} bytes", field.size),
                expected: format!("{size} bytes"),
            });
        }
        Ok(field)
    }

    /// Where `path` (member names, each within the previous one's type) lies in struct
    /// `within`: its byte offset from the struct's start and its size. A bitfield anywhere on
    /// the path is refused (it cannot be read as whole bytes).
    pub fn field(&self, within: &str, path: &[&str]) -> Result<Field, BtfError> {
        let mut id = self
            .struct_named(within)
            .ok_or_else(|| BtfError::NoStruct(within.into()))?;
        let mut bits = 0u32;
        let mut walked = within.to_string();
        for name in path {
            let m = self
                .member_of(id, name, 0)
                .ok_or_else(|| BtfError::NoMember {
                    within: walked.clone(),
                    member: (*name).into(),
                })?;
            walked = format!("{walked}.{name}");
            if m.bitfield_size != 0 || m.bit_offset % 8 != 0 {
                return Err(BtfError::Unexpected {
                    field: walked,
                    found: format!("a bitfield at bit {}", bits + m.bit_offset),
                    expected: "whole bytes".into(),
                });
            }
            bits += m.bit_offset;
            id = m.type_id;
        }
        let size = self.size_of(id).ok_or_else(|| BtfError::Unexpected {
            field: walked,
            found: "of no known size".into(),
            expected: "a sized type".into(),
        })?;
        Ok(Field {
            offset: bits / 8,
            size,
        })
    }
}

#[cfg(test)]
mod tests;

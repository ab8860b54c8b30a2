//! The BTF reader against a small hand-built blob (every kind of record it must skip, nesting,
//! typedefs and modifiers, anonymous members, a bitfield, both byte orders, broken data), and
//! against the running kernel's BTF, member by member as `bpftool` reads it.
use std::collections::BTreeMap;
use std::process::Command;

use super::*;

/// A BTF blob built by hand: type records as 32-bit words, and a string section.
struct Blob {
    words: Vec<u32>,
    strings: Vec<u8>,
}

impl Blob {
    fn new() -> Blob {
        Blob {
            words: Vec::new(),
            strings: vec![0],
        }
    }

    fn name(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            return 0;
        }
        let off = self.strings.len() as u32;
        self.strings.extend_from_slice(name.as_bytes());
        self.strings.push(0);
        off
    }

    /// One type record: common part, then `extra` words.
    fn ty(&mut self, name: &str, kind: u32, vlen: u32, kind_flag: bool, sot: u32, extra: &[u32]) {
        let name_off = self.name(name);
        let info = (u32::from(kind_flag) << 31) | (kind << 24) | vlen;
        self.words.extend_from_slice(&[name_off, info, sot]);
        self.words.extend_from_slice(extra);
    }

    /// A struct or union with `members` (name, type, offset word).
    fn composite(
        &mut self,
        kind: u32,
        name: &str,
        size: u32,
        flag: bool,
        members: &[(&str, u32, u32)],
    ) {
        let mut extra = Vec::new();
        for (member, type_id, offset) in members {
            extra.extend_from_slice(&[self.name(member), *type_id, *offset]);
        }
        self.ty(name, kind, members.len() as u32, flag, size, &extra);
    }

    fn bytes(&self, big_endian: bool) -> Vec<u8> {
        let word = |w: u32| match big_endian {
            true => w.to_be_bytes(),
            false => w.to_le_bytes(),
        };
        let types: Vec<u8> = self.words.iter().flat_map(|w| word(*w)).collect();
        let mut out = Vec::new();
        let magic = match big_endian {
            true => MAGIC.to_be_bytes(),
            false => MAGIC.to_le_bytes(),
        };
        out.extend_from_slice(&magic);
        out.extend_from_slice(&[1, 0]);
        let (tlen, slen) = (types.len() as u32, self.strings.len() as u32);
        for w in [HEADER_LEN as u32, 0, tlen, tlen, slen] {
            out.extend_from_slice(&word(w));
        }
        out.extend_from_slice(&types);
        out.extend_from_slice(&self.strings);
        out
    }
}

/// Types 1..=11: `int`, `struct inner {int a; int b;}`, `typedef inner inner_t`,
/// `const inner_t`, `inner *`, `union {int deep;}`, `struct outer` (kind_flag: offsets carry
/// bitfield sizes) with a pointer, a const typedef'd struct, the anonymous union, a 3-bit
/// bitfield and an array; then an array, an enum, a function prototype, a var and a float to skip.
fn sample() -> Blob {
    let mut b = Blob::new();
    b.ty("int", kind::INT, 0, false, 4, &[32]); // 1
    b.composite(
        kind::STRUCT,
        "inner",
        8,
        false,
        &[("a", 1, 0), ("b", 1, 32)],
    ); // 2
    b.ty("inner_t", kind::TYPEDEF, 0, false, 2, &[]); // 3
    b.ty("", kind::CONST, 0, false, 3, &[]); // 4
    b.ty("", kind::PTR, 0, false, 2, &[]); // 5
    b.composite(kind::UNION, "", 4, false, &[("deep", 1, 0)]); // 6
    b.composite(
        kind::STRUCT,
        "outer",
        40,
        true,
        &[
            ("p", 5, 0),
            ("in", 4, 64),
            ("", 6, 192),
            ("flags", 1, (3 << 24) | 224),
            ("arr", 8, 256),
        ],
    ); // 7
    b.ty("", kind::ARRAY, 0, false, 0, &[1, 1, 2]); // 8
    let (one, two) = (b.name("ONE"), b.name("TWO"));
    b.ty("e", kind::ENUM, 2, false, 4, &[one, 1, two, 2]); // 9
    b.ty("", kind::FUNC_PROTO, 1, false, 1, &[0, 1]); // 10
    b.ty("v", kind::VAR, 0, false, 1, &[1]); // 11
    b.ty("float", kind::FLOAT, 0, false, 4, &[]); // 12
    b
}

#[test]
fn finds_fields_through_typedefs_modifiers_and_anonymous_members() {
    for big_endian in [false, true] {
        let btf = Btf::parse(&sample().bytes(big_endian)).expect("parses");
        assert_eq!(btf.len(), 12);
        let field = |path: &[&str]| btf.field("outer", path).expect("found");
        assert_eq!(field(&["p"]), Field { offset: 0, size: 8 });
        assert_eq!(field(&["in"]), Field { offset: 8, size: 8 });
        assert_eq!(
            field(&["in", "b"]),
            Field {
                offset: 12,
                size: 4
            }
        );
        assert_eq!(
            field(&["deep"]),
            Field {
                offset: 24,
                size: 4
            }
        );
        assert_eq!(
            field(&["arr"]),
            Field {
                offset: 32,
                size: 8
            }
        );
        assert_eq!(btf.struct_named("inner"), Some(2));
        assert_eq!(btf.size_of(4), Some(8));
        assert_eq!(btf.size_of(9), Some(4));
    }
}

#[test]
fn refuses_bitfields_and_names_what_is_missing() {
    let btf = Btf::parse(&sample().bytes(false)).unwrap();
    let err = btf.field("outer", &["flags"]).unwrap_err();
    assert!(
        matches!(&err, BtfError::Unexpected { field, .. } if field == "outer.flags"),
        "{err:?}"
    );
    let err = btf.field("outer", &["in", "c"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the kernel's BTF has no member c in struct outer.in"
    );
    // A union is not a struct to start from; a pointer has no members to walk into.
    assert!(matches!(btf.field("e", &[]), Err(BtfError::NoStruct(_))));
    assert!(matches!(
        btf.field("outer", &["p", "a"]),
        Err(BtfError::NoMember { .. })
    ));
}

#[test]
fn refuses_broken_data() {
    let good = sample().bytes(false);
    let malformed = |bytes: &[u8]| matches!(Btf::parse(bytes), Err(BtfError::Malformed(_)));
    assert!(malformed(&[]));
    assert!(malformed(&good[..10]), "header cut short");
    assert!(malformed(&good[..good.len() - 1]), "strings cut short");
    let mut bad_magic = good.clone();
    bad_magic[0] = 0;
    assert!(malformed(&bad_magic));
    // The type section ends in the middle of a record.
    let mut b = sample();
    b.words.pop();
    assert!(malformed(&b.bytes(false)));
    // An unknown kind cannot be skipped.
    let mut b = sample();
    b.ty("", 31, 0, false, 0, &[]);
    assert!(malformed(&b.bytes(false)));
}

/// `bpftool btf dump ... format raw`'s members of struct `name`: member name -> bit offset
/// (bitfields left out).
fn bpftool_members(raw: &str, name: &str) -> BTreeMap<String, u32> {
    let head = format!("] STRUCT '{name}' ");
    let mut lines = raw.lines().skip_while(|l| !l.contains(&head));
    assert!(lines.next().is_some(), "bpftool shows no struct {name}");
    lines
        .take_while(|l| l.starts_with('\t'))
        .filter(|l| !l.contains("bitfield_size"))
        .filter_map(|l| {
            let member = l.trim().strip_prefix('\'')?.split('\'').next()?;
            let bits = l.split("bits_offset=").nth(1)?.trim().parse().ok()?;
            (!member.is_empty() && member != "(anon)").then(|| (member.to_string(), bits))
        })
        .collect()
}

/// Every named member of the structs ck reads lies where bpftool (libbpf's reader) says.
#[test]
fn the_kernels_structs_read_as_bpftool_reads_them() {
    let btf = Btf::kernel().expect("this machine's kernel has BTF");
    assert!(btf.len() > 1000, "{} types", btf.len());
    let bpftool = ["/usr/sbin/bpftool", "/sbin/bpftool", "bpftool"]
        .into_iter()
        .find(|p| !p.starts_with('/') || Path::new(p).exists())
        .unwrap();
    let out = Command::new(bpftool)
        .args(["btf", "dump", "file", KERNEL_BTF, "format", "raw"])
        .output()
        .expect("bpftool runs (cargo xtask installs it)");
    assert!(out.status.success(), "{out:?}");
    let raw = String::from_utf8_lossy(&out.stdout);
    for name in [
        "sk_reuseport_kern",
        "sock",
        "inet_connection_sock",
        "request_sock_queue",
    ] {
        let members = bpftool_members(&raw, name);
        assert!(members.len() >= 3, "{name}: {members:?}");
        for (member, bits) in &members {
            let field = btf
                .field(name, &[member])
                .unwrap_or_else(|e| panic!("{name}.{member}: {e}"));
            assert_eq!(field.offset * 8, *bits, "{name}.{member}");
        }
    }
}

/// The fields the select program reads have the sizes it reads, inside their structs.
#[test]
fn the_queue_fields_are_plausible() {
    let btf = Btf::kernel().expect("this machine's kernel has BTF");
    let size = |s: &str| btf.size_of(btf.struct_named(s).unwrap()).unwrap();
    let selected = btf.field("sk_reuseport_kern", &["selected_sk"]).unwrap();
    assert_eq!(selected.size, 8);
    assert!(selected.offset + 8 <= size("sk_reuseport_kern"));
    let backlog = btf.field("sock", &["sk_ack_backlog"]).unwrap();
    assert_eq!(backlog.size, 4);
    assert!(backlog.offset + 4 <= size("sock"));
    // A struct sock is the start of an inet_connection_sock: offsets from either agree.
    let sock = btf
        .field("inet_connection_sock", &["icsk_inet", "sk"])
        .unwrap();
    assert_eq!(sock.offset, 0);
    let qlen = btf
        .field("inet_connection_sock", &["icsk_accept_queue", "qlen"])
        .unwrap();
    assert_eq!(qlen.size, 4, "atomic_t");
    assert!(qlen.offset >= size("sock") && qlen.offset + 4 <= size("inet_connection_sock"));
    let queue = btf
        .field("inet_connection_sock", &["icsk_accept_queue"])
        .unwrap();
    let inner = btf.field("request_sock_queue", &["qlen"]).unwrap();
    assert_eq!(qlen.offset, queue.offset + inner.offset);
}

//! The one thing the tests and `cargo xtask dist` read from an ELF file: its program interpreter
//! (`PT_INTERP`, the dynamic loader a dynamically linked program names), absent in a static
//! binary (static-pie included).
use std::io;
use std::path::Path;

/// The program header type of the interpreter's path.
const PT_INTERP: u32 = 3;

/// The interpreter `path` names (`/lib64/ld-linux-x86-64.so.2`), or `None` for a statically
/// linked program; an error when it is not a little-endian 64-bit ELF file.
pub fn interpreter(path: &Path) -> io::Result<Option<String>> {
    let bytes = std::fs::read(path)?;
    interpreter_of(&bytes).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a 64-bit little-endian ELF file", path.display()),
        )
    })
}

/// [`interpreter`] of the file's bytes; `None` when they are not ELF64 LE.
fn interpreter_of(bytes: &[u8]) -> Option<Option<String>> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?));
    // Magic, ELFCLASS64, ELFDATA2LSB.
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let phoff = usize::try_from(u64_at(0x20)?).ok()?;
    let (phentsize, phnum) = (usize::from(u16_at(0x36)?), usize::from(u16_at(0x38)?));
    for header in (0..phnum).map(|i| phoff + i * phentsize) {
        if u32_at(header)? == PT_INTERP {
            let offset = usize::try_from(u64_at(header + 8)?).ok()?;
            let size = usize::try_from(u64_at(header + 32)?).ok()?;
            let text = bytes.get(offset..offset + size)?;
            let text = String::from_utf8_lossy(text);
            return Some(Some(text.trim_end_matches('\0').to_string()));
        }
    }
    Some(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_program_names_its_loader() {
        // The test binary itself is linked dynamically against glibc.
        let me = std::env::current_exe().unwrap();
        let interp = interpreter(&me)
            .unwrap()
            .expect("a dynamically linked test binary");
        assert!(interp.contains("ld-linux"), "{interp}");
    }

    #[test]
    fn not_elf_is_an_error() {
        assert!(interpreter_of(b"#!/bin/sh\n").is_none());
        assert!(interpreter_of(b"\x7fELF\x01\x01").is_none());
    }
}

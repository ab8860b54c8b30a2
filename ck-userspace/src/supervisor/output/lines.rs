//! Splitting a worker's byte stream into lines: what arrives in chunks of any size becomes
//! whole lines (without their `\n` or `\r\n`, invalid UTF-8 replaced), pieces of at most a
//! bound for longer ones, and a last partial line at the end of the stream.

/// Bytes of a stream waiting for their line's end (never more than the bound).
pub struct Splitter {
    pending: Vec<u8>,
    max: usize,
}

impl Splitter {
    /// A splitter whose lines are at most `max` bytes.
    pub fn new(max: usize) -> Splitter {
        Splitter {
            pending: Vec::new(),
            max,
        }
    }

    /// The lines that `bytes` completes, each with whether it is a piece of a longer line.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<(String, bool)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            let room = self.max - self.pending.len();
            match bytes.iter().take(room + 1).position(|b| *b == b'\n') {
                Some(end) => {
                    self.pending.extend_from_slice(&bytes[..end]);
                    out.push((self.take(), false));
                    bytes = &bytes[end + 1..];
                }
                None if bytes.len() >= room => {
                    self.pending.extend_from_slice(&bytes[..room]);
                    out.push((self.take(), true));
                    bytes = &bytes[room..];
                }
                None => {
                    self.pending.extend_from_slice(bytes);
                    bytes = &[];
                }
            }
        }
        out
    }

    /// The last line, if the stream ended without a newline.
    pub fn finish(&mut self) -> Option<String> {
        (!self.pending.is_empty()).then(|| self.take())
    }

    fn take(&mut self) -> String {
        let mut line = std::mem::take(&mut self.pending);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        String::from_utf8(line).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_whole_whatever_the_chunks() {
        let mut s = Splitter::new(100);
        assert!(s.push(b"one\ntw").iter().map(|l| &l.0).eq(["one"]));
        assert!(
            s.push(b"o\r\nthree\n\nfo")
                .iter()
                .map(|l| &l.0)
                .eq(["two", "three", ""])
        );
        assert_eq!(s.finish().as_deref(), Some("fo"));
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn a_long_line_is_split_at_the_bound_and_marked() {
        let mut s = Splitter::new(4);
        let out = s.push(b"abcdefghij\nxy");
        assert_eq!(
            out,
            vec![
                ("abcd".to_string(), true),
                ("efgh".to_string(), true),
                ("ij".to_string(), false)
            ]
        );
        let out = s.push(b"zw\n");
        assert_eq!(out, vec![("xyzw".to_string(), false)], "exactly the bound");
        assert_eq!(s.push(b"\xffok\n"), vec![("\u{fffd}ok".to_string(), false)]);
    }
}

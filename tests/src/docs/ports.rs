//! The ports a page shows (8080-8089 and 9090-9099) and the free ports that stand in for them
//! when it runs: substituted in every block's text, and mapped back in what the commands print
//! before it is shown or compared.

use crate::sys::free_port;

/// Whether `port` is one the docs may show and the test replaces.
pub fn is_doc_port(port: u32) -> bool {
    (8080..=8089).contains(&port) || (9090..=9099).contains(&port)
}

/// The page's ports and the free ports standing in for them.
#[derive(Debug, Clone, Default)]
pub struct PortMap {
    /// (shown, used), in the order first seen.
    pairs: Vec<(u16, u16)>,
}

impl PortMap {
    /// An empty map.
    pub fn new() -> PortMap {
        PortMap::default()
    }

    /// The free port for `shown`, picking one the first time.
    fn used_for(&mut self, shown: u16) -> u16 {
        if let Some((_, used)) = self.pairs.iter().find(|(s, _)| *s == shown) {
            return *used;
        }
        let used = loop {
            let port = free_port();
            if !self.pairs.iter().any(|(_, u)| *u == port) {
                break port;
            }
        };
        self.pairs.push((shown, used));
        used
    }

    /// The port used for the page's `shown` port, if the page named it so far.
    pub fn get(&self, shown: u16) -> Option<u16> {
        self.pairs
            .iter()
            .find(|(s, _)| *s == shown)
            .map(|(_, u)| *u)
    }

    /// The (shown, used) pairs, in the order first seen.
    pub fn pairs(&self) -> &[(u16, u16)] {
        &self.pairs
    }

    /// `text` with every doc port (a whole number: no digit next to it) replaced by its free
    /// port.
    pub fn substitute(&mut self, text: &str) -> String {
        replace_numbers(text, |n| {
            let shown = u16::try_from(n)
                .ok()
                .filter(|p| is_doc_port(u32::from(*p)))?;
            Some(self.used_for(shown))
        })
    }

    /// `text` with every free port of the map (a whole number) replaced by the port the page
    /// shows.
    pub fn map_back(&self, text: &str) -> String {
        replace_numbers(text, |n| {
            self.pairs
                .iter()
                .find(|(_, used)| u64::from(*used) == n)
                .map(|(shown, _)| *shown)
        })
    }
}

/// `text` with each maximal run of ASCII digits whose value `replace` maps replaced by the
/// mapped value.
fn replace_numbers(text: &str, mut replace: impl FnMut(u64) -> Option<u16>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        out.push_str(&rest[..start]);
        let digits = &rest[start..];
        let len = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        let number = &digits[..len];
        match number.parse::<u64>().ok().and_then(&mut replace) {
            // A number with leading zeros is not a port.
            Some(port) if !number.starts_with('0') => out.push_str(&port.to_string()),
            _ => out.push_str(number),
        }
        rest = &digits[len..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_whole_doc_ports_and_maps_back() {
        let mut map = PortMap::new();
        let text = "ck run --port 8080 --metrics 127.0.0.1:9090 -- x 18080 80801; curl :8080/";
        let run = map.substitute(text);
        let (p, m) = (map.get(8080).unwrap(), map.get(9090).unwrap());
        assert_ne!(p, m);
        assert_eq!(
            run,
            format!("ck run --port {p} --metrics 127.0.0.1:{m} -- x 18080 80801; curl :{p}/")
        );
        assert_eq!(map.map_back(&run), text);
        assert_eq!(map.pairs().len(), 2);
        assert_eq!(map.substitute("port 8079 and 8090"), "port 8079 and 8090");
    }
}

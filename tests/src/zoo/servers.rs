//! The zoo's servers (`tests/zoo/`) as command lines for `ck run ... -- APP`: Python, Node and
//! shell ones run from the repository, C ones built with `cc` and the Go one with `go build`
//! into the target directory (once per test binary).

use std::path::PathBuf;
use std::sync::OnceLock;

/// `tests/zoo/FILE`.
fn zoo(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("zoo")
        .join(file)
}

/// A path as an argument.
fn text(path: PathBuf) -> String {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not a UTF-8 path", path.display()))
        .to_string()
}

/// `python3 tests/zoo/FILE ARGS...`.
pub fn python(file: &str, args: &[&str]) -> Vec<String> {
    let mut line = vec!["python3".to_string(), text(zoo(file))];
    line.extend(args.iter().map(|a| a.to_string()));
    line
}

/// `node tests/zoo/FILE`.
pub fn node(file: &str) -> Vec<String> {
    vec!["node".to_string(), text(zoo(file))]
}

/// `tests/zoo/FILE`, an executable script.
pub fn script(file: &str) -> Vec<String> {
    vec![text(zoo(file))]
}

/// The C server `tests/zoo/NAME.c`, built into `target/zoo/NAME`.
pub fn c(name: &'static str) -> Vec<String> {
    static BUILT: OnceLock<std::sync::Mutex<Vec<(&'static str, PathBuf)>>> = OnceLock::new();
    let mut built = BUILT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(n, _)| *n == name) {
        return vec![text(path.clone())];
    }
    let path = crate::cserver::build(&zoo(&format!("{name}.c")), "zoo", name);
    built.push((name, path.clone()));
    vec![text(path)]
}

/// The Go server `tests/zoo/own_port/` (binds the port `port` itself), built into
/// `target/go-servers/zoo-own-port`.
pub fn go_own_port(port: u16) -> Vec<String> {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let path = BUILT
        .get_or_init(|| crate::real_servers::go_build_in(&zoo("own_port"), "zoo-own-port"))
        .clone();
    vec![text(path), port.to_string()]
}

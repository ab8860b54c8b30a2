//! Reading the files of `deploy/` for the tests that check them: the repository paths, the final
//! stage's `ENTRYPOINT` and `CMD` of `deploy/Dockerfile`, the Kubernetes manifests (YAML), the
//! systemd unit's `Key=value` lines, option values in a command line, and durations written as
//! ck and systemd write them (`10s`, `500ms`, `2min`).

use std::path::PathBuf;

pub use yaml_rust2::Yaml;

/// The repository's root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `deploy/<file>` of the repository.
pub fn deploy_file(file: &str) -> PathBuf {
    repo_root().join("deploy").join(file)
}

/// The Kubernetes schema validator `kubernetes-validate`, installed by `cargo xtask test` into
/// `target/k8s-validate`.
///
/// # Panics
/// When it is not installed.
pub fn k8s_validator() -> PathBuf {
    let path = repo_root().join("target/k8s-validate/bin/kubernetes-validate");
    assert!(
        path.is_file(),
        "{} is missing: `cargo xtask test` installs kubernetes-validate into target/k8s-validate",
        path.display()
    );
    path
}

/// The text of `deploy/<file>`.
pub fn read_deploy(file: &str) -> String {
    let path = deploy_file(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The instructions of a Dockerfile's last stage: (instruction in upper case, arguments), with
/// continuation lines joined and comments dropped.
pub fn final_stage(dockerfile: &str) -> Vec<(String, String)> {
    let mut instructions = Vec::new();
    let mut pending = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if pending.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                pending.push_str(part);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                let text = std::mem::take(&mut pending);
                let (word, args) = text.split_once(char::is_whitespace).unwrap_or((&text, ""));
                instructions.push((word.to_ascii_uppercase(), args.trim().to_string()));
            }
        }
    }
    let last_from = instructions
        .iter()
        .rposition(|(word, _)| word == "FROM")
        .expect("the Dockerfile has no FROM");
    instructions.split_off(last_from)
}

/// The command the final stage runs: its `ENTRYPOINT` followed by its `CMD`, both in exec form
/// (JSON arrays).
///
/// # Panics
/// When either is missing or in shell form.
pub fn container_command(dockerfile: &str) -> Vec<String> {
    let stage = final_stage(dockerfile);
    let exec_form = |what: &str| -> Vec<String> {
        let (_, args) = stage
            .iter()
            .rev()
            .find(|(word, _)| word == what)
            .unwrap_or_else(|| panic!("the final stage has no {what}"));
        serde_json::from_str(args)
            .unwrap_or_else(|e| panic!("{what} {args} is not in exec form (a JSON array): {e}"))
    };
    let mut command = exec_form("ENTRYPOINT");
    command.extend(exec_form("CMD"));
    command
}

/// The YAML documents of `deploy/<file>`.
pub fn yaml_docs(file: &str) -> Vec<Yaml> {
    yaml_rust2::YamlLoader::load_from_str(&read_deploy(file))
        .unwrap_or_else(|e| panic!("deploy/{file} is not valid YAML: {e}"))
}

/// The one document of kind `kind` in `deploy/<file>`.
pub fn manifest(file: &str, kind: &str) -> Yaml {
    let mut found: Vec<Yaml> = yaml_docs(file)
        .into_iter()
        .filter(|doc| doc["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "deploy/{file} should hold one {kind}");
    found.remove(0)
}

/// The string at `value`, panicking with `what` when it is not one.
pub fn text<'a>(value: &'a Yaml, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {value:?}"))
}

/// The integer at `value`, panicking with `what` when it is not one.
pub fn integer(value: &Yaml, what: &str) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("{what} is not an integer: {value:?}"))
}

/// The strings of the list at `value`, panicking with `what` when it is not a list of strings.
pub fn strings(value: &Yaml, what: &str) -> Vec<String> {
    value
        .as_vec()
        .unwrap_or_else(|| panic!("{what} is not a list: {value:?}"))
        .iter()
        .map(|item| text(item, what).to_string())
        .collect()
}

/// The values of `key` in a systemd unit's text (`Key=value` lines, every section).
pub fn unit_values(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|line| line.trim().split_once('='))
        .filter(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_string())
        .collect()
}

/// The one value of `key` in a systemd unit's text.
pub fn unit_value(unit: &str, key: &str) -> String {
    let values = unit_values(unit, key);
    assert_eq!(values.len(), 1, "{key}= should be set once: {values:?}");
    values[0].clone()
}

/// The value after `option` in the command line `args` (e.g. `--drain-timeout 10s`), looked for
/// before any `--` (after it come the app's own arguments).
pub fn option_value<'a>(args: &'a [String], option: &str) -> Option<&'a str> {
    let ck_args = args.split(|a| a == "--").next().unwrap_or(args);
    ck_args
        .windows(2)
        .find(|pair| pair[0] == option)
        .map(|pair| pair[1].as_str())
}

/// Seconds a stop of `ck run ARGS` may take before ck exits on its own, less its clean-up:
/// `--quiet-max` (the longest quiet wait; none without `--metrics` or with `--quiet-period 0`)
/// plus `--drain-timeout`, each from `args` or ck's default. Also checks that the quiet period
/// is shorter than the maximum, as `ck run` does.
pub fn stop_budget(args: &[String]) -> f64 {
    use ::ck::settings::defaults;
    let value = |option: &str, default: std::time::Duration| {
        option_value(args, option).map_or(default.as_secs_f64(), seconds)
    };
    let period = value("--quiet-period", defaults::QUIET_PERIOD);
    let max = value("--quiet-max", defaults::QUIET_MAX);
    let drain = value("--drain-timeout", defaults::DRAIN_TIMEOUT);
    assert!(
        period == 0.0 || period <= max,
        "--quiet-period {period}s is longer than --quiet-max {max}s"
    );
    let waits = option_value(args, "--metrics").is_some() && period > 0.0;
    if waits { max + drain } else { drain }
}

/// The capabilities (`BPF`, as Kubernetes spells them) that `ck run ARGS` needs, as
/// `docs/src/least-privilege.md` lists them: `BPF` and `PERFMON`; with `--adopt` `NET_ADMIN`;
/// with `--user` `SETUID`, `SETGID` and `KILL` (and `SYS_PTRACE` with both); `NET_BIND_SERVICE`
/// for a port below 1024; `SYS_NICE` unless `--boot-boost 0`. Sorted.
pub fn needed_caps(args: &[String]) -> Vec<&'static str> {
    let ck_args = args.split(|a| a == "--").next().unwrap_or(args);
    let adopt = ck_args.iter().any(|a| a == "--adopt");
    let user = option_value(args, "--user").is_some();
    let low_port = ck_args
        .windows(2)
        .filter(|pair| pair[0] == "--port" || pair[0] == "-p")
        .any(|pair| pair[1].parse::<u16>().is_ok_and(|p| p < 1024));
    let mut caps = vec!["BPF", "PERFMON"];
    if adopt {
        caps.push("NET_ADMIN");
    }
    if user {
        caps.extend(["SETUID", "SETGID", "KILL"]);
        if adopt {
            caps.push("SYS_PTRACE");
        }
    }
    if low_port {
        caps.push("NET_BIND_SERVICE");
    }
    if option_value(args, "--boot-boost") != Some("0") {
        caps.push("SYS_NICE");
    }
    caps.sort_unstable();
    caps
}

/// Seconds in a duration as ck (`10s`, `500ms`, `1m`) or systemd (`20s`, `2min`, `90`) writes
/// it, for the forms the deploy files use.
///
/// # Panics
/// On any other form.
pub fn seconds(duration: &str) -> f64 {
    let text = duration.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("no number in the duration {duration:?}"));
    let scale = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" | "msec" => 0.001,
        "m" | "min" => 60.0,
        other => panic!("the duration {duration:?} has a unit ({other:?}) these tests do not read"),
    };
    number * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_stage_command_joins_entrypoint_and_cmd() {
        let dockerfile = "FROM a AS build\nENTRYPOINT [\"/wrong\"]\n# c\nFROM b\nRUN x \\\n  y\n\
                          ENTRYPOINT [\"/bin/e\", \"--\"]\nCMD [\"run\", \"-p\", \"1\"]\n";
        assert_eq!(
            container_command(dockerfile),
            ["/bin/e", "--", "run", "-p", "1"]
        );
        assert!(
            final_stage(dockerfile)
                .iter()
                .any(|(w, a)| w == "RUN" && a == "x  y")
        );
    }

    #[test]
    fn durations_and_options() {
        assert_eq!(seconds("10s"), 10.0);
        assert_eq!(seconds("500ms"), 0.5);
        assert_eq!(seconds("2min"), 120.0);
        assert_eq!(seconds("90"), 90.0);
        let args: Vec<String> = ["--port", "1", "--", "--port", "2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(option_value(&args, "--port"), Some("1"));
        assert_eq!(option_value(&args, "--name"), None);
    }

    #[test]
    fn unit_lines() {
        let unit = "[Service]\nType=notify\nExecStart=/bin/x a=b\n";
        assert_eq!(unit_value(unit, "Type"), "notify");
        assert_eq!(unit_value(unit, "ExecStart"), "/bin/x a=b");
        assert!(unit_values(unit, "WatchdogSec").is_empty());
    }
}

//! The files of `deploy/`: the systemd unit passes `systemd-analyze verify` and stops later than
//! ck's quiet wait and drain; the Kubernetes Deployment and Service pass the schema validator
//! (`kubernetes-validate`, strict, oldest and newest bundled Kubernetes); the Deployment runs the
//! image's command, probes ck's `/healthz` and `/readyz`, gives ck its capabilities instead of
//! privileged mode, it has no preStop sleep and its grace period covers the quiet wait
//! (`--quiet-max`), the drain and a margin (so does the unit's `TimeoutStopSec`); the
//! ServiceMonitor scrapes the Service's metrics port. (`deploy_container.rs` runs the image's
//! command.)

use std::process::Command;

use ck_tests::ck::said;
use ck_tests::ck_bin;
use ck_tests::deploy::{
    Yaml, container_command, integer, k8s_validator, manifest, needed_caps, option_value,
    read_deploy, seconds, stop_budget, strings, text, unit_value, unit_values,
};
use ck_tests::sys::{TempDir, output_within};

/// Kubernetes versions the manifests are validated against: the oldest and the newest schemas
/// the pinned `kubernetes-validate` bundles.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.25.0", "1.37.0"];

/// Seconds a stop timeout leaves ck for its clean-up after the quiet wait and the drain.
const CLEANUP_MARGIN: f64 = 5.0;

/// Where the unit and the image install ck.
const INSTALLED_CK: &str = "/usr/local/bin/ck";

/// Runs `systemd-analyze verify` on `unit` (written as `ck.service` in `dir`) and returns what it
/// printed, or panics if it did not exit.
fn verify_unit(dir: &TempDir, unit: &str) -> (bool, String) {
    let path = dir.write("ck.service", unit, false);
    let out = output_within(
        Command::new("systemd-analyze").arg("verify").arg(&path),
        std::time::Duration::from_secs(60),
    )
    .expect("systemd-analyze verify did not exit within 60 s");
    (out.status.success(), said(&out))
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let dir = TempDir::new("unit");
    // verify checks that ExecStart's binary exists: the unit with ck where this build has it.
    let unit = read_deploy("ck.service").replace(INSTALLED_CK, ck_bin().to_str().expect("UTF-8"));
    let (ok, printed) = verify_unit(&dir, &unit);
    assert!(
        ok && printed.trim().is_empty(),
        "systemd-analyze verify deploy/ck.service (ck at {}): {printed}",
        ck_bin().display()
    );
    // The check is live: a misspelt setting is reported.
    let (_, printed) = verify_unit(&dir, &unit.replace("KillMode=mixed", "KillMode=mixd"));
    assert!(printed.contains("mixd"), "not reported: {printed:?}");
}

#[test]
fn the_unit_is_notified_by_ck_and_stops_after_the_drain() {
    let unit = read_deploy("ck.service");
    assert_eq!(unit_value(&unit, "Type"), "notify");
    assert_eq!(unit_value(&unit, "NotifyAccess"), "main");
    assert_eq!(unit_value(&unit, "KillMode"), "mixed");
    assert!(seconds(&unit_value(&unit, "WatchdogSec")) > 0.0);
    let exec_start: Vec<String> = unit_value(&unit, "ExecStart")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(exec_start[..2], [INSTALLED_CK, "run"]);
    assert_eq!(
        option_value(&exec_start, "--metrics"),
        Some("127.0.0.1:9100")
    );
    // The quiet wait and the drain, both spelled out, fit in the stop timeout with a margin.
    for option in ["--quiet-period", "--quiet-max", "--drain-timeout"] {
        assert!(option_value(&exec_start, option).is_some(), "no {option}");
    }
    let budget = stop_budget(&exec_start);
    let stop = seconds(&unit_value(&unit, "TimeoutStopSec"));
    assert!(
        stop >= budget + CLEANUP_MARGIN,
        "TimeoutStopSec={stop}s must cover --quiet-max + --drain-timeout ({budget}s) + \
         {CLEANUP_MARGIN}s, or systemd SIGKILLs workers that are still serving or draining"
    );
    // `systemctl reload` rolls this instance.
    let name = option_value(&exec_start, "--name").expect("--name");
    assert_eq!(
        unit_value(&unit, "ExecReload"),
        format!("{INSTALLED_CK} reload --name {name}")
    );
    // Exactly the capabilities its options need, no more.
    let caps = unit_value(&unit, "CapabilityBoundingSet");
    let mut bounding: Vec<&str> = caps
        .split_whitespace()
        .map(|c| c.strip_prefix("CAP_").unwrap_or(c))
        .collect();
    bounding.sort_unstable();
    assert_eq!(
        bounding,
        needed_caps(&exec_start),
        "CapabilityBoundingSet={caps}"
    );
    assert!(unit_values(&unit, "Delegate") == ["yes"]);
}

/// Runs the validator (strict) on `files` for `version`; returns whether it passed and what it
/// printed.
fn validate(version: &str, files: &[std::path::PathBuf]) -> (bool, String) {
    let out = output_within(
        Command::new(k8s_validator())
            .args(["--strict", "-k", version])
            .args(files),
        std::time::Duration::from_secs(60),
    )
    .expect("kubernetes-validate did not exit within 60 s");
    (out.status.success(), said(&out))
}

#[test]
fn the_deployment_and_service_pass_the_kubernetes_schema_validator() {
    let files = ["deployment.yaml", "service.yaml"]
        .map(|f| ck_tests::deploy::deploy_file(&format!("kubernetes/{f}")));
    for version in KUBERNETES_VERSIONS {
        let (ok, printed) = validate(version, &files);
        assert!(ok, "Kubernetes {version}: {printed}");
        assert_eq!(
            printed.matches(" passed for resource ").count(),
            2,
            "Kubernetes {version}: {printed}"
        );
    }
    // The check is live: a Deployment with a misspelt field fails.
    let dir = TempDir::new("k8s");
    let broken = dir.write(
        "deployment.yaml",
        &read_deploy("kubernetes/deployment.yaml").replace("containerPort:", "containerPrt:"),
        false,
    );
    let (ok, printed) = validate(KUBERNETES_VERSIONS[1], &[broken]);
    assert!(!ok, "a broken Deployment passed: {printed}");
}

/// The Deployment's one container.
fn container(deployment: &Yaml) -> &Yaml {
    let containers = deployment["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The container port named `name`.
fn container_port(container: &Yaml, name: &str) -> i64 {
    let ports = container["ports"].as_vec().expect("ports");
    let port = ports
        .iter()
        .find(|p| p["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no container port named {name}"));
    integer(&port["containerPort"], "containerPort")
}

#[test]
fn the_deployment_runs_the_image_command_probes_ck_and_outlasts_the_drain() {
    let deployment = manifest("kubernetes/deployment.yaml", "Deployment");
    let container = container(&deployment);
    let pod = &deployment["spec"]["template"]["spec"];

    // The image's CMD, with a --name of the pod's own.
    let image_cmd = container_command(&read_deploy("Dockerfile"));
    let cmd_args = &image_cmd[image_cmd
        .iter()
        .position(|a| a == "run")
        .expect("the image runs `ck run`")
        + 1..];
    let args = strings(&container["args"], "args");
    assert_eq!(args[..2], ["--name", "$(POD_NAME)"]);
    assert_eq!(
        &args[2..],
        cmd_args,
        "the Deployment's args and the image's CMD"
    );
    let env = container["env"].as_vec().expect("env");
    assert!(
        env.iter().any(|e| e["name"].as_str() == Some("POD_NAME")
            && e["valueFrom"]["fieldRef"]["fieldPath"].as_str() == Some("metadata.name")),
        "POD_NAME from the pod's name: {env:?}"
    );

    // Ports and probes: the app on --port, ck's endpoints on --metrics.
    let http = container_port(container, "http");
    let metrics = container_port(container, "metrics");
    assert_eq!(
        option_value(&args, "--port"),
        Some(http.to_string().as_str())
    );
    assert_eq!(
        option_value(&args, "--metrics"),
        Some(format!("0.0.0.0:{metrics}").as_str())
    );
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(text(&get["path"], probe), path);
        assert_eq!(text(&get["port"], probe), "metrics");
    }

    // Stopping: no preStop sleep (ck's quiet wait sees the traffic stop instead), and the
    // grace period covers the longest wait, ck's whole drain and its clean-up.
    assert!(
        container["lifecycle"]["preStop"].is_badvalue(),
        "a preStop hook: {:?}",
        container["lifecycle"]
    );
    for option in ["--quiet-period", "--quiet-max", "--drain-timeout"] {
        assert!(option_value(&args, option).is_some(), "no {option}");
    }
    let budget = stop_budget(&args);
    let grace = integer(
        &pod["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    ) as f64;
    assert!(
        grace >= budget + CLEANUP_MARGIN,
        "terminationGracePeriodSeconds {grace} < --quiet-max + --drain-timeout ({budget}s) + \
         {CLEANUP_MARGIN}s of clean-up"
    );

    // Capabilities instead of privileged mode.
    let security = &container["securityContext"];
    assert_ne!(security["privileged"].as_bool(), Some(true));
    assert_eq!(strings(&security["capabilities"]["drop"], "drop"), ["ALL"]);
    let mut added = strings(&security["capabilities"]["add"], "add");
    added.sort_unstable();
    assert_eq!(added, needed_caps(&args), "exactly what ck's options need");
    let mounts = container["volumeMounts"].as_vec().expect("volumeMounts");
    assert!(
        mounts
            .iter()
            .any(|m| m["mountPath"].as_str() == Some("/sys/fs/bpf")),
        "the host's bpffs at /sys/fs/bpf: {mounts:?}"
    );

    // The Service selects these pods and sends to their named ports.
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let service = manifest("kubernetes/service.yaml", "Service");
    let selector = service["spec"]["selector"].as_hash().expect("selector");
    for (key, value) in selector {
        assert_eq!(&labels[text(key, "label")], value, "pod label {key:?}");
    }
    for port in service["spec"]["ports"].as_vec().expect("Service ports") {
        container_port(container, text(&port["targetPort"], "targetPort"));
    }
}

#[test]
fn the_servicemonitor_scrapes_the_services_metrics_port() {
    let monitor = manifest("kubernetes/servicemonitor.yaml", "ServiceMonitor");
    assert_eq!(
        text(&monitor["apiVersion"], "apiVersion"),
        "monitoring.coreos.com/v1"
    );
    let service = manifest("kubernetes/service.yaml", "Service");
    let labels = &service["metadata"]["labels"];
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_hash()
        .expect("matchLabels");
    assert!(!selector.is_empty());
    for (key, value) in selector {
        assert_eq!(&labels[text(key, "label")], value, "Service label {key:?}");
    }
    let endpoints = monitor["spec"]["endpoints"].as_vec().expect("endpoints");
    assert_eq!(endpoints.len(), 1);
    let port = text(&endpoints[0]["port"], "endpoint port");
    assert_eq!(text(&endpoints[0]["path"], "path"), "/metrics");
    let service_ports = service["spec"]["ports"].as_vec().expect("ports");
    let metrics = service_ports
        .iter()
        .find(|p| p["name"].as_str() == Some(port))
        .unwrap_or_else(|| panic!("the Service has no port named {port}"));
    assert_eq!(text(&metrics["targetPort"], "targetPort"), "metrics");
}

//! The container image's command, run without Docker: the final stage of `deploy/Dockerfile`'s
//! `ENTRYPOINT` + `CMD` (tini, `ck run`, the Node example app), exactly as written except that
//! the files the stage copies in are taken from where this build has them, the ports are free
//! ones, and the probe port base is the test's own. The app answers on its port, ck's
//! `/healthz` and `/readyz` answer 200 on the metrics port (what the Deployment probes), and
//! SIGTERM to tini (what Kubernetes sends) drains ck to a clean exit.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use ck_tests::ck::Ck;
use ck_tests::deploy::{container_command, final_stage, read_deploy, repo_root};
use ck_tests::http::get_status;
use ck_tests::sys::{free_port, poll_until};
use ck_tests::{READY_TIMEOUT, ck_bin, get_new_conn, local, probe_base_for};

/// Where each file the final stage copies in (`COPY [--from=...] SRC DEST`) is in this build: a
/// file from the build stage is the binary of the same name that cargo built, any other the
/// repository's own file.
fn copied_files(dockerfile: &str) -> Vec<(String, PathBuf)> {
    final_stage(dockerfile)
        .into_iter()
        .filter(|(word, _)| word == "COPY")
        .map(|(_, args)| {
            let words: Vec<&str> = args.split_whitespace().collect();
            let from_build = words.iter().any(|w| w.starts_with("--from="));
            let paths: Vec<&str> = words.into_iter().filter(|w| !w.starts_with("--")).collect();
            let [source, dest] = paths[..] else {
                panic!("COPY {args}: expected one source and one destination");
            };
            let here = if from_build {
                let name = source.rsplit('/').next().expect("a file name");
                assert_eq!(name, "ck", "COPY {args}: the build stage makes only ck");
                ck_bin()
            } else {
                repo_root().join(source)
            };
            assert!(here.is_file(), "COPY {args}: {} is missing", here.display());
            (dest.to_string(), here)
        })
        .collect()
}

/// Replaces the value after `option` in `ck_args` (`ck run`'s arguments; only those before the
/// app's `--`) with `value`, returning the value it had.
fn replace_option(ck_args: &mut [String], option: &str, value: String) -> String {
    let end = ck_args
        .iter()
        .position(|a| a == "--")
        .unwrap_or(ck_args.len());
    let at = ck_args[..end]
        .iter()
        .position(|a| a == option)
        .unwrap_or_else(|| panic!("the image's `ck run` has no {option}: {ck_args:?}"));
    std::mem::replace(&mut ck_args[at + 1], value)
}

#[test]
fn the_image_command_serves_the_app_answers_probes_and_drains_on_sigterm() {
    let dockerfile = read_deploy("Dockerfile");
    let mut command = container_command(&dockerfile);
    for (dest, here) in copied_files(&dockerfile) {
        for arg in command.iter_mut().filter(|a| **a == dest) {
            *arg = here.to_str().expect("UTF-8 path").to_string();
        }
    }
    let run = command
        .iter()
        .position(|a| a == "run")
        .expect("the image runs `ck run`");
    let ck_args = &mut command[run + 1..];
    let (port, metrics_port) = (free_port(), free_port());
    let image_port = replace_option(ck_args, "--port", port.to_string());
    let image_metrics = replace_option(ck_args, "--metrics", String::new());
    let (host, _) = image_metrics
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("--metrics {image_metrics}: expected HOST:PORT"));
    replace_option(ck_args, "--metrics", format!("{host}:{metrics_port}"));
    command.splice(
        run + 1..run + 1,
        [
            "--probe-port-base".to_string(),
            probe_base_for(port).to_string(),
        ],
    );
    assert!(
        !command.iter().any(|a| a == "--name"),
        "the image's command names its instance; this test expects the default ck-PORT"
    );
    eprintln!("the image's command (port {image_port}, metrics {image_metrics}): {command:?}");

    let mut cmd = Command::new(&command[0]);
    cmd.args(&command[1..]);
    let mut ck = Ck::spawn(&format!("ck-{port}"), cmd).expect("start ck");

    // The app answers on its port once a worker is ready.
    ck.wait_status("a ready worker", READY_TIMEOUT, |s| {
        s.bpf && s.ready_count() >= 1
    })
    .expect("wait for the status");
    let answer = get_new_conn(local(port));
    assert!(answer.is_ok(), "the app did not answer: {answer:?}");

    // ck's endpoints for the Deployment's probes (served by `ck run --metrics`).
    let metrics = local(metrics_port);
    let mut last = (
        Err(ck_tests::Failure::Refused),
        Err(ck_tests::Failure::Refused),
    );
    let answered = poll_until(Duration::from_secs(10), Duration::from_millis(100), || {
        last = (
            get_status(metrics, "/healthz"),
            get_status(metrics, "/readyz"),
        );
        last == (Ok(200), Ok(200))
    });
    assert!(
        answered,
        "/healthz and /readyz on {metrics}: {last:?}\n--- log ---\n{}",
        ck.log()
    );

    // SIGTERM to tini, as kubelet sends it: ck drains every worker and exits 0, and so does tini.
    ck.sigterm().expect("SIGTERM to ck");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

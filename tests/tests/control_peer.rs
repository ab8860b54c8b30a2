//! Who may control ck: its control socket is mode 0600 and owned by ck's user, so another user
//! cannot even connect (first layer); and when the socket's mode is opened up, ck checks each
//! connection's peer credentials (`SO_PEERCRED`) and refuses anyone but root and its own user
//! with a reason line and a warning in its log (second layer), while it keeps serving.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::time::Duration;

use ck_tests::ck::{control_socket, said};
use ck_tests::privs::{as_nobody, nobody};
use ck_tests::sys::output_within;
use ck_tests::{burst, ck_bin, local, start_ready};

/// `ck ARGS... --name NAME` run as `nobody` (no capability), to completion.
fn as_nobody_ck(name: &str, args: &[&str]) -> std::process::Output {
    let mut cmd = as_nobody(&[], &ck_bin());
    cmd.args(args).args(["--name", name]);
    output_within(&mut cmd, Duration::from_secs(20)).expect("ck exits")
}

#[test]
fn other_users_are_refused_by_the_socket_mode_and_by_the_peer_check() {
    let (mut ck, port, _) = start_ready("ctl-peer", 1, &[]).expect("start a ready ck");
    let name = ck.name().to_string();
    let path = control_socket(&name);
    let meta = std::fs::metadata(&path).expect("the control socket");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "mode of {path:?}");
    assert_eq!(meta.uid(), 0, "owned by ck's user (root here)");

    // First layer: nobody cannot connect at all.
    let out = as_nobody_ck(&name, &["status"]);
    let text = said(&out);
    assert!(!out.status.success(), "nobody read the status: {text}");
    assert!(
        text.contains("permission denied connecting to") && text.contains("owned by uid 0"),
        "{text}"
    );

    // Second layer: with the mode opened, nobody connects and is refused by ck itself.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    for args in [&["status"][..], &["stop"][..], &["drain", "0"][..]] {
        let out = as_nobody_ck(&name, args);
        let text = said(&out);
        assert!(!out.status.success(), "nobody ran `ck {args:?}`: {text}");
        assert!(
            text.contains(&format!(
                "permission denied: uid {} may not control this ck",
                nobody().uid
            )),
            "`ck {args:?}`: {text}"
        );
    }
    assert!(
        ck.log().contains("control socket: refusing a client"),
        "no warning in the log:\n{}",
        ck.log()
    );

    // ck keeps serving, undrained, and root still controls it.
    let status = ck.status().expect("ck status");
    assert!(!status.stopping && !status.slot(0).drained, "{status:#?}");
    let served = burst(local(port), 5);
    assert_eq!(served.ok, 5, "{served:?}");
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
}

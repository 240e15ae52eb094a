//! The shipped pod manifests start. For the Deployment (deploy/kubernetes) and the agent-sandbox
//! SandboxTemplate, this does on this machine what a kubelet and a container runtime do with
//! them (read by `tests/deploy/podspec.py`): the image's entrypoint (deploy/Containerfile) with
//! the container's exact args and environment, as `runAsUser`:`runAsGroup` with the `fsGroup`
//! as a supplementary group, `no_new_privs`, no capabilities, a read-only root file system, each
//! Secret volume in the kubelet's layout (`token -> ..data/token`, `..data -> ..<timestamp>`,
//! files `root:<fsGroup>` with the group's read bit added to `defaultMode`), each `emptyDir`
//! `drwxrwsrwx root:<fsGroup>` — in new PID, mount and network namespaces, the daemon PID 1.
//! Then: the probes answer within their startup budget, a command runs over wss, and SIGTERM
//! ends the daemon within the termination grace period with 0 processes left.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use stockade_testkit::eventually;

use crate::remote_support::{
    Ca, PORT, Root, Sandbox, deploy_python, namespaces_usable, processes_in, repo_root,
};

const TOKEN: &str = "fleet-token-0123456789";

/// What `podspec.py` says of the manifest.
fn spec(manifest: &str) -> serde_json::Value {
    let out = Command::new(deploy_python())
        .arg(repo_root().join("tests/deploy/podspec.py"))
        .arg(repo_root().join(manifest))
        .output()
        .unwrap();
    assert!(out.status.success(), "podspec.py: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The image's entrypoint, from deploy/Containerfile (`ENTRYPOINT ["/usr/local/bin/stockade", …`).
fn entrypoint() -> String {
    let text = std::fs::read_to_string(repo_root().join("deploy/Containerfile")).unwrap();
    let line = text.lines().find(|l| l.starts_with("ENTRYPOINT [")).expect("an ENTRYPOINT");
    line.split('"').nth(1).expect("ENTRYPOINT's first word").to_owned()
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A Secret volume as the kubelet's atomic writer lays it out.
fn secret_volume(dir: &Path, files: &[(&str, Vec<u8>)], default_mode: u32, fs_group: u32) {
    let stamp = "..2026_11_26_10_00_00.123456789";
    std::fs::create_dir_all(dir.join(stamp)).unwrap();
    for (name, bytes) in files {
        let file = dir.join(stamp).join(name);
        std::fs::write(&file, bytes).unwrap();
        chown(&file, 0, fs_group);
        // With an fsGroup the kubelet adds the group's read bit to defaultMode.
        chmod(&file, default_mode | 0o040);
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(stamp, dir.join("..data")).unwrap();
    chown(&dir.join(stamp), 0, fs_group);
    chmod(&dir.join(stamp), 0o2755);
    chown(dir, 0, fs_group);
    chmod(dir, 0o3777);
}

/// The files a Secret of this repository's secret.yaml holds.
fn secret_files(secret: &str, sandbox: &Sandbox) -> Vec<(&'static str, Vec<u8>)> {
    let tls = sandbox.root_dir().join("tls");
    match secret {
        "stockade-token" => vec![("token", format!("{TOKEN}\n").into_bytes())],
        "stockade-tls" => vec![
            ("tls.crt", std::fs::read(tls.join("cert.pem")).unwrap()),
            ("tls.key", std::fs::read(tls.join("key.pem")).unwrap()),
        ],
        other => panic!("the pod mounts a Secret this test does not know: {other}"),
    }
}

/// One probe's answer: the HTTP status `curl` got, or 0 when it could not connect.
fn probe(sandbox: &Sandbox, scheme: &str, path: &str, port: u64) -> u16 {
    let url = format!("{}://{}:{port}{path}", scheme.to_lowercase(), sandbox.ip);
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "--cacert"])
        .arg(sandbox.ca_file())
        .arg(&url)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap_or(0)
}

fn start_pod(manifest: &str) {
    if !namespaces_usable() {
        return;
    }
    let spec = spec(manifest);
    let ca = Ca::new();
    let mut sandbox = Sandbox::new(&ca, Root::Minimal);
    let root = sandbox.root_dir();
    let uid = spec["run_as_user"].as_u64().unwrap() as u32;
    let gid = spec["run_as_group"].as_u64().unwrap() as u32;
    let fs_group = spec["fs_group"].as_u64().unwrap() as u32;

    // The image: the binary at the entrypoint's path, the user of the Containerfile.
    let entry = entrypoint();
    let bin = root.join(entry.trim_start_matches('/'));
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::copy(root.join("stockade"), &bin).unwrap();
    std::fs::write(
        root.join("etc/passwd"),
        format!("root:x:0:0:root:/:/bin/sh\nagent:x:{uid}:{gid}::/home/agent:/bin/sh\n"),
    )
    .unwrap();
    std::fs::write(root.join("etc/group"), format!("root:x:0:\nagent:x:{gid}:\n")).unwrap();
    std::fs::create_dir_all(root.join("home/agent")).unwrap();
    chown(&root.join("home/agent"), uid, gid);

    // The volumes, outside the root, bind-mounted over their mount paths.
    let vols = sandbox.dir.path().join("volumes");
    let mut mounts = String::new();
    for (i, m) in spec["mounts"].as_array().unwrap().iter().enumerate() {
        let vol = vols.join(i.to_string());
        std::fs::create_dir_all(&vol).unwrap();
        match m["kind"].as_str().unwrap() {
            "secret" => {
                let files = secret_files(m["secret"].as_str().unwrap(), &sandbox);
                let mode = m["default_mode"].as_u64().unwrap() as u32;
                secret_volume(&vol, &files, mode, fs_group);
            }
            _ => {
                chown(&vol, 0, fs_group);
                chmod(&vol, 0o2777);
            }
        }
        let at = root.join(m["path"].as_str().unwrap().trim_start_matches('/'));
        std::fs::create_dir_all(&at).unwrap();
        mounts.push_str(&format!(" && mount --bind {} {}", vol.display(), at.display()));
        if m["read_only"].as_bool().unwrap() {
            mounts.push_str(&format!(" && mount -o remount,bind,ro {}", at.display()));
        }
    }
    assert!(spec["read_only_root"].as_bool().unwrap(), "the pod's root file system is read-only");
    let r = root.display();
    let env: String = spec["env"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| format!(" {k}={}", v.as_str().unwrap()))
        .collect();
    let args: Vec<&str> =
        spec["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(spec["command"].is_null(), "the manifest keeps the image's entrypoint");
    let nnp = if spec["no_new_privs"].as_bool().unwrap() { "setpriv --no-new-privs " } else { "" };
    // Read-only root first, then /dev, /proc and the volumes over it; the user switch drops
    // every capability (no file capabilities, a non-root uid).
    let script = format!(
        "mount --bind {r} {r} && mount -o remount,bind,ro {r} && mount --rbind /dev {r}/dev && mount -t proc proc {r}/proc{mounts} && exec {nnp}chroot --userspec={uid}:{gid} --groups={fs_group} {r} /bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/home/agent{env} {entry} {}",
        args.join(" ")
    );
    // `launch` returns once a client is served over wss with the token.
    let started = Instant::now();
    sandbox.launch(&script);

    // The probes, in their startup budget.
    let probes = spec["probes"].as_array().unwrap();
    assert!(probes.len() >= 3, "startup, liveness and readiness probes: {probes:?}");
    for p in probes {
        let budget = p["period_s"].as_u64().unwrap() * p["failures"].as_u64().unwrap();
        let (path, port) = (p["path"].as_str().unwrap(), p["port"].as_u64().unwrap());
        assert_eq!(port, u64::from(PORT));
        eventually(Duration::from_secs(budget.max(5)), &format!("{path} answers 200"), || {
            (probe(&sandbox, p["scheme"].as_str().unwrap(), path, port) == 200).then_some(())
        });
    }
    eprintln!("{manifest}: served and probes 200 after {:?}", started.elapsed());

    // A command over wss, and one left running for the stop.
    let out = sandbox.cli(&["run", "echo pod-ok; id -u"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("pod-ok") && stdout.contains(&uid.to_string()), "{stdout}");
    let out = sandbox.cli(&["run", "--bg", "-q", "sleep 1000"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(sandbox.processes().len() >= 2, "the daemon and the sleep run");

    // The kubelet's stop: SIGTERM to PID 1, SIGKILL after the grace period.
    let grace = Duration::from_secs(spec["grace_s"].as_u64().unwrap());
    let pid = sandbox.daemon_host_pid().expect("the daemon's pid");
    let ns = sandbox.pid_ns().expect("the daemon's PID namespace");
    let asked = Instant::now();
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = eventually(grace, "the daemon to end on SIGTERM", || sandbox.exited());
    eprintln!("{manifest}: stopped in {:?} ({status})", asked.elapsed());
    assert!(
        status.success(),
        "the pod's container ends with 0 on SIGTERM: {status}: {}",
        sandbox.log()
    );
    assert_eq!(processes_in(&ns), Vec::<u32>::new(), "nothing left after the stop");
    let log = sandbox.log();
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn the_deployment_starts_serves_and_stops() {
    start_pod("deploy/kubernetes/deployment.yaml");
}

#[test]
fn the_sandbox_template_starts_serves_and_stops() {
    start_pod("deploy/agent-sandbox/sandboxtemplate.yaml");
}

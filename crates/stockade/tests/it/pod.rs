//! The shipped pod manifests start. For the Deployment (deploy/kubernetes) and the agent-sandbox
//! SandboxTemplate, this does on this machine what a kubelet and a container runtime do with
//! them (read by `tests/deploy/podspec.py`): the process the kubelet's rule makes of the image's
//! config (deploy/Containerfile read in full) and the container (kubelet.rs: argv, working
//! directory, environment, user), as `runAsUser`:`runAsGroup` with the `fsGroup`
//! as a supplementary group, `no_new_privs`, no capabilities, a read-only root file system, each
//! Secret volume in the kubelet's layout (`token -> ..data/token`, `..data -> ..<timestamp>`,
//! files `root:<fsGroup>` with the group's read bit added to `defaultMode`), each `emptyDir`
//! `drwxrwsrwx root:<fsGroup>` — in new PID, mount and network namespaces, the daemon PID 1.
//! Then: the probes answer within their startup budget, a command runs over wss in the workspace
//! volume and its output is read back, and SIGTERM ends the daemon within the termination grace
//! period with 0 processes left. A change to the Containerfile or a manifest that breaks the
//! start (the argv, the user, a volume) fails here.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use stockade_testkit::eventually;

use crate::kubelet::{self, Container, ImageConfig, Process, image_config};
use crate::remote_support::{
    Ca, PORT, Root, Sandbox, deploy_python, namespaces_usable, processes_in, repo_root,
};

const TOKEN: &str = "fleet-token-0123456789";

/// What `podspec.py` says of the manifest.
fn spec(manifest: &Path) -> serde_json::Value {
    let out = Command::new(deploy_python())
        .arg(repo_root().join("tests/deploy/podspec.py"))
        .arg(manifest)
        .output()
        .unwrap();
    assert!(out.status.success(), "podspec.py: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The image's config, from deploy/Containerfile read in full.
fn image() -> ImageConfig {
    let text = std::fs::read_to_string(repo_root().join("deploy/Containerfile")).unwrap();
    image_config(&text).unwrap_or_else(|e| panic!("deploy/Containerfile: {e}"))
}

/// A word for `sh -c`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
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

/// The image's files in the sandbox's root: the build's products (the binary) at their `COPY`
/// destinations, the image's user in `/etc/passwd` (its home made), and the process's working
/// directory (the runtime makes it when missing). The process's uid, gid and `HOME`.
fn lay_out_image(root: &Path, image: &ImageConfig, process: &Process) -> (u32, u32, String) {
    assert!(!image.copied.is_empty(), "the image copies the binary from its build stage");
    for dest in &image.copied {
        let to = root.join(dest.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join("stockade"), &to).unwrap();
    }
    let (image_uid, image_gid) = image.user.split_once(':').unwrap_or((&image.user, &image.user));
    let passwd = format!(
        "root:x:0:0:root:/:/bin/sh\nagent:x:{image_uid}:{image_gid}::/home/agent:/bin/sh\n"
    );
    std::fs::write(root.join("etc/passwd"), &passwd).unwrap();
    std::fs::write(root.join("etc/group"), format!("root:x:0:\nagent:x:{image_gid}:\n")).unwrap();
    // The user: a number, or a name of the image's /etc/passwd.
    let entry = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f[0] == process.user || f[2] == process.user);
    let uid: u32 = match &entry {
        Some(f) => f[2].parse().unwrap(),
        None => process.user.parse().expect("a numeric user or one of /etc/passwd"),
    };
    let gid: u32 = match (&process.group, &entry) {
        (Some(g), _) => g.parse().expect("a numeric group"),
        (None, Some(f)) => f[3].parse().unwrap(),
        (None, None) => 0,
    };
    // runc sets HOME from the user's entry when the environment has none.
    let home = entry.map_or("/", |f| f[5]).to_owned();
    std::fs::create_dir_all(root.join(home.trim_start_matches('/'))).unwrap();
    chown(&root.join(home.trim_start_matches('/')), uid, gid);
    std::fs::create_dir_all(root.join(process.cwd.trim_start_matches('/'))).unwrap();
    (uid, gid, home)
}

/// The volumes, outside the root, and the shell commands that bind-mount them over their mount
/// paths; where each one lives on the host, by mount path.
fn mount_volumes(
    sandbox: &Sandbox,
    spec: &Value,
    fs_group: u32,
) -> (String, Vec<(String, PathBuf)>) {
    let root = sandbox.root_dir();
    let vols = sandbox.dir.path().join("volumes");
    let (mut mounts, mut at_host) = (String::new(), Vec::new());
    for (i, m) in spec["mounts"].as_array().unwrap().iter().enumerate() {
        let vol = vols.join(i.to_string());
        std::fs::create_dir_all(&vol).unwrap();
        match m["kind"].as_str().unwrap() {
            "secret" => {
                let files = secret_files(m["secret"].as_str().unwrap(), sandbox);
                let mode = m["default_mode"].as_u64().unwrap() as u32;
                secret_volume(&vol, &files, mode, fs_group);
            }
            _ => {
                chown(&vol, 0, fs_group);
                chmod(&vol, 0o2777);
            }
        }
        let path = m["path"].as_str().unwrap();
        let at = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&at).unwrap();
        mounts.push_str(&format!(" && mount --bind {} {}", vol.display(), at.display()));
        if m["read_only"].as_bool().unwrap() {
            mounts.push_str(&format!(" && mount -o remount,bind,ro {}", at.display()));
        }
        at_host.push((path.to_owned(), vol));
    }
    (mounts, at_host)
}

/// `argv[0]` as the runtime finds it: a path as given, a bare name on the process's `PATH`.
fn executable(root: &Path, process: &Process) -> String {
    let name = &process.argv[0];
    if name.contains('/') {
        return name.clone();
    }
    let path = process.env.iter().rev().find(|(k, _)| k == "PATH").map_or("", |(_, v)| v);
    path.split(':')
        .map(|dir| format!("{}/{name}", dir.trim_end_matches('/')))
        .find(|p| root.join(p.trim_start_matches('/')).is_file())
        .unwrap_or_else(|| panic!("{name} is not on the container's PATH {path}"))
}

/// A pod started from the image and a manifest.
struct Pod {
    sandbox: Sandbox,
    _ca: Ca,
    spec: Value,
    uid: u32,
    /// Host directories of the volumes, by mount path.
    volumes: Vec<(String, PathBuf)>,
}

impl Pod {
    fn volume(&self, path: &str) -> &Path {
        &self
            .volumes
            .iter()
            .find(|(p, _)| p == path)
            .unwrap_or_else(|| panic!("no volume at {path}"))
            .1
    }
}

fn start_pod(manifest: &Path) -> Option<Pod> {
    if !namespaces_usable() {
        return None;
    }
    let spec = spec(manifest);
    let process = kubelet::process(&image(), &Container::from_spec(&spec))
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let ca = Ca::new();
    let mut sandbox = Sandbox::new(&ca, Root::Minimal);
    let root = sandbox.root_dir();
    let fs_group = spec["fs_group"].as_u64().unwrap() as u32;
    let (uid, gid, home) = lay_out_image(&root, &image(), &process);
    let (mounts, volumes) = mount_volumes(&sandbox, &spec, fs_group);
    assert!(spec["read_only_root"].as_bool().unwrap(), "the pod's root file system is read-only");
    let mut env: Vec<String> =
        process.env.iter().map(|(k, v)| quote(&format!("{k}={v}"))).collect();
    if !process.env.iter().any(|(k, _)| k == "HOME") {
        env.push(quote(&format!("HOME={home}")));
    }
    env.push(quote("HOSTNAME=stockade-pod"));
    let argv: Vec<String> = std::iter::once(executable(&root, &process))
        .chain(process.argv[1..].iter().cloned())
        .map(|w| quote(&w))
        .collect();
    let nnp = if spec["no_new_privs"].as_bool().unwrap() { "setpriv --no-new-privs " } else { "" };
    // Read-only root first, then /dev, /proc and the volumes over it; the user switch drops
    // every capability (no file capabilities, a non-root uid); in the root, the process starts
    // in its working directory with exactly its environment.
    let r = root.display();
    let script = format!(
        "mount --bind {r} {r} && mount -o remount,bind,ro {r} && mount --rbind /dev {r}/dev && mount -t proc proc {r}/proc{mounts} && exec {nnp}chroot --userspec={uid}:{gid} --groups={fs_group} {r} /bin/sh -c 'cd \"$0\" && exec env -i \"$@\"' {} {} {}",
        quote(&process.cwd),
        env.join(" "),
        argv.join(" ")
    );
    eprintln!("{}: the kubelet's process: {process:?}", manifest.display());
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
    eprintln!("{}: served and probes 200 after {:?}", manifest.display(), started.elapsed());
    Some(Pod { sandbox, _ca: ca, spec, uid, volumes })
}

/// One `stockade run` over wss: its stdout, asserting it succeeded.
fn run(pod: &Pod, cmd: &str) -> String {
    let out = pod.sandbox.cli(&["run", cmd]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{cmd}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

/// A command over wss as the pod's user, in the workspace volume (the default working
/// directory) where it writes its build output; a remote client reads it.
fn work_in_the_workspace(pod: &Pod) {
    let stdout = run(pod, "echo pod-ok; id -u; pwd");
    assert!(stdout.contains("pod-ok") && stdout.contains(&pod.uid.to_string()), "{stdout}");
    let cwd = pod.spec["working_dir"].as_str().expect("the manifest names a working directory");
    assert!(stdout.lines().any(|l| l == cwd), "commands run in {cwd} by default: {stdout}");
    let stdout = run(pod, "mkdir -p build && echo built > build/out.txt && cat build/out.txt");
    assert!(stdout.contains("built"), "{stdout}");
    let on_volume = pod.volume(cwd).join("build/out.txt");
    assert_eq!(std::fs::read_to_string(&on_volume).unwrap(), "built\n", "on the workspace volume");
}

/// The kubelet's stop: SIGTERM to PID 1, SIGKILL after the grace period; with one session
/// running, 0 processes left.
fn stop_pod(mut pod: Pod, name: &str) {
    let out = pod.sandbox.cli(&["run", "--bg", "-q", "sleep 1000"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(pod.sandbox.processes().len() >= 2, "the daemon and the sleep run");
    let grace = Duration::from_secs(pod.spec["grace_s"].as_u64().unwrap());
    let pid = pod.sandbox.daemon_host_pid().expect("the daemon's pid");
    let ns = pod.sandbox.pid_ns().expect("the daemon's PID namespace");
    let asked = Instant::now();
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = eventually(grace, "the daemon to end on SIGTERM", || pod.sandbox.exited());
    eprintln!("{name}: stopped in {:?} ({status})", asked.elapsed());
    let log = pod.sandbox.log();
    assert!(status.success(), "the pod's container ends with 0 on SIGTERM: {status}: {log}");
    assert_eq!(processes_in(&ns), Vec::<u32>::new(), "nothing left after the stop");
    assert!(!log.contains("panicked"), "{log}");
}

fn shipped(manifest: &str) {
    let Some(pod) = start_pod(&repo_root().join(manifest)) else { return };
    assert!(pod.spec["command"].is_null(), "the shipped manifests keep the image's entrypoint");
    work_in_the_workspace(&pod);
    stop_pod(pod, manifest);
}

#[test]
fn the_deployment_starts_serves_and_stops() {
    shipped("deploy/kubernetes/deployment.yaml");
}

#[test]
fn the_sandbox_template_starts_serves_and_stops() {
    shipped("deploy/agent-sandbox/sandboxtemplate.yaml");
}

/// The Deployment with `command: [stockade]` too (the binary found on the image's `PATH`; the
/// image's ENTRYPOINT then unused) and a disk budget of 1 MiB: it starts, and a run past the
/// budget is refused in a sentence.
#[test]
fn a_manifest_that_sets_command_too_starts_and_its_disk_budget_refuses() {
    let text =
        std::fs::read_to_string(repo_root().join("deploy/kubernetes/deployment.yaml")).unwrap();
    let args = "          args:\n";
    assert!(text.contains(args) && text.contains("- 4GiB\n"), "the Deployment's args changed");
    let text = text
        .replacen(args, &format!("          command: [stockade]\n{args}"), 1)
        .replacen("- 4GiB\n", "- 1MiB\n", 1);
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("deployment.yaml");
    std::fs::write(&manifest, text).unwrap();
    let Some(pod) = start_pod(&manifest) else { return };
    assert_eq!(pod.spec["command"], serde_json::json!(["stockade"]));
    work_in_the_workspace(&pod);
    // 2 MB of output in one spool; the next run is past the budget.
    run(&pod, "head -c 2000000 /dev/zero");
    let out = pod.sandbox.cli(&["run", "echo one too many"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a run past the disk budget is refused");
    assert!(stderr.contains("disk budget is 1048576 bytes"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one sentence: {stderr}");
    // What the sentence says to do frees the budget.
    let out = pod.sandbox.cli(&["cleanup"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(run(&pod, "echo room again").contains("room again"));
    stop_pod(pod, "a manifest with command");
}

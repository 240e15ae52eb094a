//! The sandbox's escape matrix for the filesystem and the network, through the real binary and
//! a daemon it auto-starts, as root and as `nobody`: every write outside the writable roots is
//! denied (touch, rename in and out, hard and symbolic links, `O_TRUNC`, mkdir, a root swapped
//! for a symlink mid-run) while writes inside work; TCP, UDP, raw sockets, a DNS query and an
//! abstract Unix socket outside the session are denied under `network none`, and `allow` lets
//! the TCP connect through.

use std::io::Read as _;
use std::net::{TcpListener, UdpSocket};
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::time::Duration;

use stockade_testkit::eventually;

use crate::sandbox_common::{Sbx, User, exists, python, users};

const WW: &[&str] = &["--sandbox", "workspace-write", "--network", "none"];

#[test]
fn writes_outside_the_roots_are_denied_and_inside_work() {
    for user in users() {
        let s = Sbx::new(user);
        let (w, o) = (s.work.display().to_string(), s.outside.display().to_string());
        // Made before the run, as the owner would have them.
        for f in ["victim", "src", "keep"] {
            std::fs::write(s.outside.join(f), "precious\n").unwrap();
        }
        std::fs::write(s.work.join("mine"), "mine\n").unwrap();
        if user == User::Nobody {
            for f in ["victim", "src", "keep"] {
                std::os::unix::fs::chown(s.outside.join(f), Some(65534), Some(65534)).unwrap();
            }
            std::os::unix::fs::chown(s.work.join("mine"), Some(65534), Some(65534)).unwrap();
        }
        let script = format!(
            r#"
            t touch touch {o}/touched
            t mv_in mv {o}/src {w}/src
            t mv_out mv {w}/mine {o}/mine
            t hardlink ln {o}/keep {w}/hard
            ln -s {o}/via-link {w}/soft; t symlink_write sh -c 'echo x > {w}/soft'
            t o_trunc sh -c ': > {o}/victim'
            t truncate truncate -s 0 {o}/victim
            t mkdir mkdir {o}/dir
            t inside_touch touch {w}/new
            t inside_mkdir mkdir {w}/dir
            t inside_rename mv {w}/new {w}/dir/renamed
            t inside_trunc sh -c ': > {w}/dir/renamed'
            t tmpdir sh -c 'echo t > "$TMPDIR/t" && test -s "$TMPDIR/t"'
            t etc_write sh -c 'echo x >> /etc/hostname'
            t read_etc cat /etc/hostname
            "#
        );
        let (v, answer) = s.verdicts(WW, &script);
        v.expect(
            "denied",
            &[
                "touch",
                "mv_in",
                "mv_out",
                "hardlink",
                "symlink_write",
                "o_trunc",
                "truncate",
                "mkdir",
                "etc_write",
            ],
            user,
        );
        v.expect(
            "allowed",
            &[
                "inside_touch",
                "inside_mkdir",
                "inside_rename",
                "inside_trunc",
                "tmpdir",
                "read_etc",
            ],
            user,
        );
        for f in ["touched", "via-link", "dir", "mine"] {
            assert!(!exists(&s.outside.join(f)), "{f} was made outside as {user:?}");
        }
        for f in ["victim", "src", "keep"] {
            assert_eq!(std::fs::read_to_string(s.outside.join(f)).unwrap(), "precious\n");
        }
        let policy = answer["sandbox"].as_str().unwrap_or_default();
        assert!(
            policy.starts_with("sandbox workspace-write") && policy.contains(&w),
            "the answer names the policy and its roots: {answer}"
        );

        // Read-only: not even the working directory is writable.
        let (v, _) = s.verdicts(
            &["--sandbox", "read-only"],
            &format!("t ro_touch touch {w}/ro\nt ro_read cat {w}/dir/renamed\nt ro_null sh -c 'echo > /dev/null'"),
        );
        v.expect("denied", &["ro_touch"], user);
        v.expect("allowed", &["ro_read", "ro_null"], user);
    }
}

#[test]
fn a_root_swapped_for_a_symlink_mid_run_gives_no_way_out() {
    for user in users() {
        let s = Sbx::new(user);
        let root = s.work.join("root");
        std::fs::create_dir(&root).unwrap();
        if user == User::Nobody {
            std::os::unix::fs::chown(&root, Some(65534), Some(65534)).unwrap();
        }
        let r = root.display().to_string();
        let script = format!(
            "{}\nwhile [ ! -e {}/go ]; do sleep 0.05; done\nt swapped touch {r}/through-swap",
            crate::sandbox_common::TRY,
            s.outside.display()
        );
        // The root is an extra writable root (the workspace itself stays put).
        let mut args = vec!["run", "--bg", "--json", "--yield-ms", "0"];
        args.extend(["--sandbox", "workspace-write", "--network", "none"]);
        args.extend(["--writable-root", &r, "--", "sh", "-c", &script]);
        let out = s.output(&args);
        let started: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let id = started["id"].as_str().unwrap().to_owned();
        // Swap the root for a symlink to the outside directory, then let the command go on.
        std::fs::rename(&root, s.work.join("root.real")).unwrap();
        std::os::unix::fs::symlink(&s.outside, &root).unwrap();
        std::fs::write(s.outside.join("go"), "").unwrap();
        // Ends with the command's own status; what counts is what it printed.
        let _ = s.output(&["wait", &id, "--timeout", "30s"]);
        let read = s.output(&["read", &id]);
        let out = stockade_testkit::text(&read.stdout);
        assert!(out.contains("swapped=denied"), "as {user:?}: {out}");
        assert!(!exists(&s.outside.join("through-swap")), "wrote through the swapped root");
    }
}

#[test]
fn the_network_is_denied_under_none_and_tcp_passes_under_allow() {
    let Some(py) = python() else { return };
    for user in users() {
        let s = Sbx::new(user);
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let tcp_port = tcp.local_addr().unwrap().port();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        let udp_port = udp.local_addr().unwrap().port();
        let name = format!("stockade-sbx-test-{}-{user:?}", std::process::id());
        let abs = UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name).unwrap()).unwrap();
        abs.set_nonblocking(true).unwrap();
        let connect = format!(
            "import socket; s=socket.socket(); s.settimeout(5); s.connect(('127.0.0.1',{tcp_port}))"
        );
        // A DNS query for example.com, as a resolver sends it.
        let dns = format!(
            "import socket; q=bytes.fromhex('123401000001000000000000076578616d706c6503636f6d0000010001'); socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(q, ('127.0.0.1',{udp_port}))"
        );
        let script = format!(
            r#"
            t tcp {py} -c "{connect}"
            t udp {py} -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1',{udp_port}))"
            t raw {py} -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"
            t inet6 {py} -c "import socket; socket.socket(socket.AF_INET6)"
            t dns {py} -c "{dns}"
            t abstract {py} -c "import socket; s=socket.socket(socket.AF_UNIX); s.connect('\0{name}')"
            t unix_pair {py} -c "import socket; socket.socketpair()"
            "#
        );
        let (v, _) = s.verdicts(WW, &script);
        v.expect("denied", &["tcp", "udp", "raw", "inet6", "dns", "abstract"], user);
        v.expect("allowed", &["unix_pair"], user);
        assert!(tcp.accept().is_err(), "a TCP connection got through as {user:?}");
        let mut buf = [0u8; 512];
        assert!(udp.recv_from(&mut buf).is_err(), "a datagram got through as {user:?}");
        assert!(abs.accept().is_err(), "an abstract socket connection got through");

        // `allow` lets the same TCP connect through.
        let (v, _) = s.verdicts(
            &["--sandbox", "workspace-write", "--network", "allow"],
            &format!("t tcp {py} -c \"{connect}\""),
        );
        v.expect("allowed", &["tcp"], user);
        let accepted =
            eventually(Duration::from_secs(5), "the allowed connection", || tcp.accept().ok());
        let (mut conn, _) = accepted;
        conn.set_nonblocking(false).unwrap();
        let _ = conn.read(&mut buf);
    }
}

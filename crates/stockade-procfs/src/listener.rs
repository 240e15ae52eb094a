//! Who is stopped, and who listens on a local TCP port: what a client looks at when its daemon
//! does not answer, so it can say in a second that the daemon is stopped instead of waiting out
//! its call timeout.

/// Whether the process is stopped by a signal (`T`) or held by a tracer (`t`): it runs no
/// code until it is continued (`kill -CONT`).
pub fn is_stopped(pid: u32) -> bool {
    crate::read_stat(pid).is_some_and(|s| s.state == b'T' || s.state == b't')
}

/// The process that listens on TCP `port` of this machine (IPv4 or IPv6), found by the
/// listening socket's inode in `/proc/net/tcp*` and then among the open files of the processes
/// this user may look at. `None` when no such socket or process is found.
pub fn tcp_listener_pid(port: u16) -> Option<u32> {
    let inodes: Vec<u64> = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|text| listening_inodes(&text, port))
        .collect();
    if inodes.is_empty() {
        return None;
    }
    let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { continue };
        for fd in fds.flatten() {
            if let Ok(target) = std::fs::read_link(fd.path())
                && wanted.iter().any(|w| target.as_os_str() == w.as_str())
            {
                return Some(pid);
            }
        }
    }
    None
}

/// Inodes of the sockets listening (state `0A`) on `port` in a `/proc/net/tcp` table.
fn listening_inodes(text: &str, port: u16) -> Vec<u64> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            let local_port = f.get(1)?.rsplit_once(':')?.1;
            let listening = *f.get(3)? == "0A";
            let same = u16::from_str_radix(local_port, 16).ok()? == port;
            (listening && same).then(|| f.get(9)?.parse().ok())?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_listening_socket_is_found_by_its_port() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:1CF1 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4242 1 0\n   1: 0100007F:1CF1 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 4343 1 0\n";
        assert_eq!(listening_inodes(text, 0x1CF1), vec![4242]);
        assert!(listening_inodes(text, 80).is_empty());
    }

    #[test]
    fn this_process_listens_and_runs() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(tcp_listener_pid(port), Some(std::process::id()));
        assert!(!is_stopped(std::process::id()));
    }
}

//! Accounts read from `/etc/passwd` and `/etc/group` directly, not through the C library: the
//! shipped binary is linked statically, and a static glibc's `getpwnam` loads the name-service
//! modules of whatever glibc the machine has at run time — a lookup of a name that no file knows
//! went on to those modules and crashed the daemon. The files are what a container has; users
//! known only to a directory service (LDAP, systemd-homed) are not found here.

use std::path::PathBuf;

/// One line of `/etc/passwd`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

const PASSWD: &str = "/etc/passwd";
const GROUP: &str = "/etc/group";

/// The accounts in `text` (the format of `/etc/passwd`); malformed lines are skipped.
fn parse_passwd(text: &str) -> impl Iterator<Item = Account> + '_ {
    text.lines().filter(|l| !l.starts_with('#')).filter_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?.to_owned();
        let _password = f.next()?;
        let uid = f.next()?.parse().ok()?;
        let gid = f.next()?.parse().ok()?;
        let _gecos = f.next()?;
        let home = PathBuf::from(f.next()?);
        (!name.is_empty()).then_some(Account { name, uid, gid, home })
    })
}

/// The first account of `/etc/passwd` that `pick` accepts.
fn find(pick: impl Fn(&Account) -> bool) -> std::io::Result<Option<Account>> {
    let text = std::fs::read_to_string(PASSWD)?;
    Ok(parse_passwd(&text).find(|a| pick(a)))
}

/// The account named `name`.
pub(crate) fn by_name(name: &str) -> std::io::Result<Option<Account>> {
    find(|a| a.name == name)
}

/// The first account with uid `uid` (as `getpwuid`).
pub(crate) fn by_uid(uid: u32) -> Option<Account> {
    find(|a| a.uid == uid).ok().flatten()
}

/// The name of group `gid`.
pub(crate) fn group_name(gid: u32) -> Option<String> {
    let text = std::fs::read_to_string(GROUP).ok()?;
    text.lines().find_map(|line| {
        let mut f = line.split(':');
        let name = f.next()?;
        let _password = f.next()?;
        (f.next()?.parse::<u32>().ok()? == gid).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lines_are_read_and_bad_ones_skipped() {
        let text = "root:x:0:0:root:/root:/bin/bash\n# a comment\nbroken\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nodd:x:notanumber:1::/h:/bin/sh\n";
        let all: Vec<Account> = parse_passwd(text).collect();
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0], Account { name: "root".into(), uid: 0, gid: 0, home: "/root".into() });
        assert_eq!(all[1].name, "nobody");
        assert_eq!(all[1].uid, 65534);
        assert_eq!(all[1].home, PathBuf::from("/nonexistent"));
    }

    #[test]
    fn this_machines_root_and_an_unknown_name() {
        let root = by_name("root").ok().flatten().map(|a| a.uid);
        assert_eq!(root, Some(0), "root is in /etc/passwd");
        assert_eq!(by_name("no-such-user-stockade").ok().flatten(), None);
        assert_eq!(by_uid(0).map(|a| a.name), Some("root".to_owned()));
        assert_eq!(group_name(0).as_deref(), Some("root"));
    }
}

//! The sandbox's seccomp program, written out: the kernel checks and compiles a filter at every
//! `seccomp(SET_MODE_FILTER)`, in the child before `exec`, in time that grows with its length;
//! seccompiler's form of the same rules is over three times longer. On install the kernel also
//! runs the program once for every system call number, to find the calls it always allows and
//! skip it for them later; so the number is looked up in a search tree (a handful of
//! comparisons to any verdict) rather than compared with every listed call in turn (over 60):
//! that run took about 90 µs of each sandboxed spawn as a list. The architecture first, then
//! the tree, then the few calls whose arguments decide. Its effect on every system call is
//! checked against seccompiler's (`sandbox_tests.rs`).

use seccompiler::sock_filter;
use stockade_proto::NetworkMode;

use super::CLONE_NEW_FLAGS;
use super::calls::{DENIED, HOST_WIDE, OWN_ONLY, OwnOnly, SYSV_IPC};

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_EPERM: u32 = 0x0005_0000 | libc::EPERM as u32;
const RET_ENOSYS: u32 = 0x0005_0000 | libc::ENOSYS as u32;
/// Set in the number of every x32 system call (another numbering the comparisons would miss).
pub(super) const X32_BIT: u32 = 0x4000_0000;
/// Offsets in `struct seccomp_data`: the number, the architecture, the low half of an argument.
const NR: u32 = 0;
const ARCH: u32 = 4;
const fn arg_low(i: u32) -> u32 {
    16 + 8 * i
}

/// Where a jump goes.
#[derive(Clone, Copy, PartialEq)]
enum Label {
    /// The upper half of a node of the search tree.
    Node(u16),
    Deny,
    Clone,
    Ioctl,
    Socket,
    /// The checks of [`OWN_ONLY`]'s call at this index (and of the calls checked alike).
    Own(u8),
    /// The second argument (`who`) must be 0.
    Who,
    Allow,
    Enosys,
}

/// An instruction, its jump (when taken) named by label until [`assemble`] counts it.
struct Ins {
    code: u16,
    k: u32,
    to: Option<Label>,
    at: Option<Label>,
}

fn ins(code: u16, k: u32) -> Ins {
    Ins { code, k, to: None, at: None }
}

fn jump(code: u16, k: u32, to: Label) -> Ins {
    Ins { code, k, to: Some(to), at: None }
}

/// The program for `network`: `EPERM` for what [`DENIED`], [`HOST_WIDE`] and [`SYSV_IPC`] list,
/// a call of [`OWN_ONLY`] on another process than the caller, a `clone` making a namespace,
/// the terminal-injecting `ioctl`s and (network none) every socket family but `AF_UNIX`;
/// `ENOSYS` for `clone3` (its flags are behind a pointer seccomp cannot read, and the C library
/// falls back to `clone`, whose flags are checked) and every x32 system call. One program, so
/// the child installs one filter.
pub(super) fn program(network: NetworkMode) -> Vec<sock_filter> {
    let mut p = vec![
        ins(LD_W_ABS, ARCH),
        // Over the kill when the architecture matches (set below).
        ins(JEQ_K, AUDIT_ARCH_X86_64),
        ins(RET_K, RET_KILL_PROCESS),
        ins(LD_W_ABS, NR),
        jump(JGE_K, X32_BIT, Label::Enosys),
    ];
    let host_wide = HOST_WIDE.map(|(nr, _)| nr);
    let denied = DENIED.iter().chain(&host_wide).chain(&SYSV_IPC);
    let mut cases: Vec<(u32, Label)> = denied.map(|&nr| (nr as u32, Label::Deny)).collect();
    for own in &OWN_ONLY {
        cases.push((own.nr as u32, Label::Own(same_checks(own))));
    }
    cases.push((libc::SYS_clone3 as u32, Label::Enosys));
    cases.push((libc::SYS_clone as u32, Label::Clone));
    cases.push((libc::SYS_ioctl as u32, Label::Ioctl));
    if network == NetworkMode::None {
        cases.push((libc::SYS_socket as u32, Label::Socket));
        cases.push((libc::SYS_socketpair as u32, Label::Socket));
    }
    cases.sort_unstable_by_key(|&(nr, _)| nr);
    search(&mut p, &cases, &mut 0);
    p.push(Ins { at: Some(Label::Clone), ..ins(LD_W_ABS, arg_low(0)) });
    // Any of the flags (every one is in the low half): one test of them all.
    let any_new = CLONE_NEW_FLAGS.iter().fold(0u32, |all, &flag| all | flag as u32);
    p.push(jump(JSET_K, any_new, Label::Deny));
    p.push(ins(RET_K, RET_ALLOW));
    p.push(Ins { at: Some(Label::Ioctl), ..ins(LD_W_ABS, arg_low(1)) });
    p.push(jump(JEQ_K, libc::TIOCSTI as u32, Label::Deny));
    p.push(jump(JEQ_K, 0x541C, Label::Deny)); // TIOCLINUX
    p.push(ins(RET_K, RET_ALLOW));
    if network == NetworkMode::None {
        p.push(Ins { at: Some(Label::Socket), ..ins(LD_W_ABS, arg_low(0)) });
        p.push(jump(JEQ_K, libc::AF_UNIX as u32, Label::Allow));
        p.push(ins(RET_K, RET_EPERM));
    }
    // A call on a process: allowed when its first argument is one the caller may give (its own).
    for (i, own) in (0u8..).zip(&OWN_ONLY).filter(|&(i, own)| same_checks(own) == i) {
        p.push(Ins { at: Some(Label::Own(i)), ..ins(LD_W_ABS, arg_low(0)) });
        let then = if own.who_zero { Label::Who } else { Label::Allow };
        for &value in own.first {
            p.push(jump(JEQ_K, value, then));
        }
        p.push(ins(RET_K, RET_EPERM));
    }
    p.push(Ins { at: Some(Label::Who), ..ins(LD_W_ABS, arg_low(1)) });
    p.push(jump(JEQ_K, 0, Label::Allow));
    p.push(Ins { at: Some(Label::Deny), ..ins(RET_K, RET_EPERM) });
    p.push(Ins { at: Some(Label::Allow), ..ins(RET_K, RET_ALLOW) });
    p.push(Ins { at: Some(Label::Enosys), ..ins(RET_K, RET_ENOSYS) });
    let mut out = assemble(&p);
    out[1].jt = 1;
    out
}

/// The first call of [`OWN_ONLY`] whose checks are `own`'s: calls checked alike share them.
fn same_checks(own: &OwnOnly) -> u8 {
    let same = |o: &&OwnOnly| o.first == own.first && o.who_zero == own.who_zero;
    OWN_ONLY.iter().position(|o| same(&o)).map_or(0, |i| i as u8)
}

/// Most numbers compared one by one at a leaf of the search tree.
const LEAF: usize = 4;

/// The search tree over `cases` (sorted by number): at each node, the numbers from its middle
/// case on jump to its upper half; at each leaf, its few cases are compared in turn, and a
/// number that is none of them is allowed.
fn search(p: &mut Vec<Ins>, cases: &[(u32, Label)], nodes: &mut u16) {
    if cases.len() <= LEAF {
        for &(nr, to) in cases {
            p.push(jump(JEQ_K, nr, to));
        }
        p.push(ins(RET_K, RET_ALLOW));
        return;
    }
    let (lower, upper) = cases.split_at(cases.len() / 2);
    let node = Label::Node(*nodes);
    *nodes += 1;
    p.push(jump(JGE_K, upper[0].0, node));
    search(p, lower, nodes);
    let start = p.len();
    search(p, upper, nodes);
    p[start].at = Some(node);
}

/// Resolves the labels into jump offsets (classic BPF jumps only forward: every target comes
/// after its jumps).
fn assemble(p: &[Ins]) -> Vec<sock_filter> {
    let at = |label: Label| p.iter().position(|i| i.at == Some(label));
    p.iter()
        .enumerate()
        .map(|(n, i)| {
            let jt = i.to.and_then(at).map_or(0, |target| {
                u8::try_from(target - n - 1).unwrap_or_else(|_| unreachable!("a jump this short"))
            });
            sock_filter { code: i.code, jt, jf: 0, k: i.k }
        })
        .collect()
}

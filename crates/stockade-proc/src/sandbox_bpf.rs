//! The sandbox's seccomp program, written out: the kernel checks and compiles a filter at every
//! `seccomp(SET_MODE_FILTER)`, in the child before `exec`, in time that grows with its length;
//! seccompiler's form of the same rules is about four times longer. This one is a list of
//! comparisons: the architecture, then the system call number against each refused one, then
//! the few whose arguments decide. Its effect on every system call is checked against
//! seccompiler's (`sandbox_tests.rs`).

use seccompiler::sock_filter;
use stockade_proto::NetworkMode;

use super::{CLONE_NEW_FLAGS, DENIED};

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
    Allow,
    Deny,
    Clone,
    Ioctl,
    Socket,
    Unix,
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

/// The program for `network`: `EPERM` for what [`DENIED`] lists, a `clone` making a namespace,
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
        jump(JEQ_K, libc::SYS_clone3 as u32, Label::Enosys),
    ];
    for nr in DENIED {
        p.push(jump(JEQ_K, nr as u32, Label::Deny));
    }
    p.push(jump(JEQ_K, libc::SYS_clone as u32, Label::Clone));
    p.push(jump(JEQ_K, libc::SYS_ioctl as u32, Label::Ioctl));
    if network == NetworkMode::None {
        p.push(jump(JEQ_K, libc::SYS_socket as u32, Label::Socket));
        p.push(jump(JEQ_K, libc::SYS_socketpair as u32, Label::Socket));
    }
    p.push(Ins { at: Some(Label::Allow), ..ins(RET_K, RET_ALLOW) });
    p.push(Ins { at: Some(Label::Clone), ..ins(LD_W_ABS, arg_low(0)) });
    for flag in CLONE_NEW_FLAGS {
        // Every flag is in the low half.
        p.push(jump(JSET_K, flag as u32, Label::Deny));
    }
    p.push(ins(RET_K, RET_ALLOW));
    p.push(Ins { at: Some(Label::Ioctl), ..ins(LD_W_ABS, arg_low(1)) });
    p.push(jump(JEQ_K, libc::TIOCSTI as u32, Label::Deny));
    p.push(jump(JEQ_K, 0x541C, Label::Deny)); // TIOCLINUX
    p.push(ins(RET_K, RET_ALLOW));
    if network == NetworkMode::None {
        p.push(Ins { at: Some(Label::Socket), ..ins(LD_W_ABS, arg_low(0)) });
        p.push(jump(JEQ_K, libc::AF_UNIX as u32, Label::Unix));
    }
    p.push(Ins { at: Some(Label::Deny), ..ins(RET_K, RET_EPERM) });
    if network == NetworkMode::None {
        p.push(Ins { at: Some(Label::Unix), ..ins(RET_K, RET_ALLOW) });
    }
    p.push(Ins { at: Some(Label::Enosys), ..ins(RET_K, RET_ENOSYS) });
    let mut out = assemble(&p);
    out[1].jt = 1;
    out
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

//! Classic BPF filters for ESP sockets that must see only connection
//! requests: a listener takes SYN segments (SYN set, ACK clear) for its port,
//! the per-host RST responder takes SYN segments for any port. Established
//! traffic never wakes them. (Per-connection filters on destination port,
//! peer MAC and peer port come from `edp::link::packet::FilterSpec`.)

use std::io;
use std::os::fd::RawFd;

use crate::wire::Flags;

const BPF_LD_H_ABS: u16 = 0x28;
const BPF_LD_B_ABS: u16 = 0x30;
const BPF_ALU_AND_K: u16 = 0x54;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;

/// Offset of the ESP flags byte in the frame (14-byte Ethernet header + 6).
pub const FLAGS_OFFSET: u32 = 20;
/// Offset of the ESP destination port in the frame.
pub const DST_PORT_OFFSET: u32 = 16;

/// The program accepting `ethertype` frames whose ESP flags have SYN set and
/// ACK clear, and, with `port`, whose destination port is `port`.
pub fn syn_filter(ethertype: u16, port: Option<u16>) -> Vec<libc::sock_filter> {
    let ins = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut p = vec![
        ins(BPF_LD_H_ABS, 0, 0, 12),
        // jf: to the final "drop" (filled below)
        ins(BPF_JEQ_K, 0, 0xff, u32::from(ethertype)),
        ins(BPF_LD_B_ABS, 0, 0, FLAGS_OFFSET),
        ins(BPF_ALU_AND_K, 0, 0, u32::from((Flags::SYN | Flags::ACK).0)),
        ins(BPF_JEQ_K, 0, 0xff, u32::from(Flags::SYN.0)),
    ];
    if let Some(port) = port {
        p.push(ins(BPF_LD_H_ABS, 0, 0, DST_PORT_OFFSET));
        p.push(ins(BPF_JEQ_K, 0, 0xff, u32::from(port)));
    }
    p.push(ins(BPF_RET_K, 0, 0, u32::MAX));
    p.push(ins(BPF_RET_K, 0, 0, 0));
    let drop = p.len() - 1;
    for (pc, i) in p.iter_mut().enumerate() {
        if i.jf == 0xff {
            i.jf = (drop - pc - 1) as u8;
        }
    }
    p
}

/// Attaches `prog` to socket `fd` (`SO_ATTACH_FILTER`), replacing any filter.
///
/// Errors: from setsockopt(2), naming the option.
pub fn attach(fd: RawFd, prog: &mut [libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: fprog points to `prog`, alive for the duration of the call.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            &fprog as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("SO_ATTACH_FILTER: {e}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny interpreter of the instructions used above.
    fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                BPF_LD_H_ABS => {
                    let k = i.k as usize;
                    if k + 2 > pkt.len() {
                        return 0;
                    }
                    a = u32::from(u16::from_be_bytes([pkt[k], pkt[k + 1]]));
                }
                BPF_LD_B_ABS => {
                    let k = i.k as usize;
                    if k >= pkt.len() {
                        return 0;
                    }
                    a = u32::from(pkt[k]);
                }
                BPF_ALU_AND_K => a &= i.k,
                BPF_JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
                BPF_RET_K => return i.k,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    fn frame(et: u16, dport: u16, flags: Flags) -> Vec<u8> {
        let mut f = vec![0u8; 34];
        f[12..14].copy_from_slice(&et.to_be_bytes());
        f[16..18].copy_from_slice(&dport.to_be_bytes());
        f[20] = flags.0;
        f
    }

    #[test]
    fn listener_filter_takes_only_syn_for_its_port() {
        let p = syn_filter(0x88b6, Some(80));
        assert_eq!(run(&p, &frame(0x88b6, 80, Flags::SYN)), u32::MAX);
        assert_eq!(run(&p, &frame(0x88b6, 80, Flags::SYN | Flags::ACK)), 0);
        assert_eq!(run(&p, &frame(0x88b6, 80, Flags::ACK)), 0);
        assert_eq!(run(&p, &frame(0x88b6, 81, Flags::SYN)), 0);
        assert_eq!(run(&p, &frame(0x88b5, 80, Flags::SYN)), 0);
        assert_eq!(run(&p, &frame(0x88b6, 80, Flags::SYN)[..16]), 0);
        let any = syn_filter(0x88b6, None);
        assert_eq!(run(&any, &frame(0x88b6, 1234, Flags::SYN)), u32::MAX);
        assert_eq!(run(&any, &frame(0x88b6, 1234, Flags::FIN | Flags::ACK)), 0);
    }
}

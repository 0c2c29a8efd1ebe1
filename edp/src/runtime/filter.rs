//! The kernel filter a runtime installs on its packet socket: frames of our
//! two ethertypes to ports this process owns, plus what the host responder
//! role needs (EDP control port 0; ESP SYNs to any port, for RSTs).
//!
//! The kernel runs the filter on every frame of the interface before
//! cloning it to the socket, so other processes' traffic and other
//! protocols never wake this process or reach its ring.

use netcore::bpf::Insn;

/// Frame offset of the ethertype.
const OFF_ETHERTYPE: u32 = 12;
/// Frame offset of the destination port (EDP and ESP share the layout).
const OFF_DST_PORT: u32 = 16;
/// Frame offset of the ESP flags byte.
const OFF_ESP_FLAGS: u32 = 20;
/// ESP flag bits (esp/PROTOCOL.md).
const ESP_SYN: u32 = 0x02;
const ESP_ACK: u32 = 0x10;

// Classic BPF opcodes (linux/bpf_common.h).
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const ALU_AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const RET_K: u16 = 0x06;

/// What the filter accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterPlan {
    /// EDP ethertype.
    pub edp_ethertype: u16,
    /// ESP ethertype.
    pub esp_ethertype: u16,
    /// EDP ports owned by this runtime, sorted.
    pub edp_ports: Vec<u16>,
    /// ESP ports owned by this runtime, sorted.
    pub esp_ports: Vec<u16>,
    /// Accept EDP frames to the control port (echo responder role).
    pub edp_control: bool,
    /// Accept ESP SYNs (SYN set, ACK clear) to any port (RST role).
    pub esp_syn_any: bool,
}

/// A program being assembled with symbolic jump targets.
struct Asm {
    code: Vec<(u16, u32, Target, Target)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Next,
    Accept,
    Drop,
    At(usize),
}

impl Asm {
    fn push(&mut self, code: u16, k: u32, jt: Target, jf: Target) -> usize {
        self.code.push((code, k, jt, jf));
        self.code.len() - 1
    }

    /// Emits a binary search over sorted `ports` on the loaded value:
    /// jumps to Accept on a member, Drop otherwise.
    fn port_search(&mut self, ports: &[u16]) {
        match ports.len() {
            0 => {
                self.push(RET_K, 0, Target::Next, Target::Next);
            }
            1..=3 => {
                for (i, &p) in ports.iter().enumerate() {
                    let last = i + 1 == ports.len();
                    self.push(
                        JEQ_K,
                        p as u32,
                        Target::Accept,
                        if last { Target::Drop } else { Target::Next },
                    );
                }
            }
            n => {
                let mid = n / 2;
                // if port > ports[mid-1] goto upper half else lower half.
                let at = self.push(JGT_K, ports[mid - 1] as u32, Target::Next, Target::Next);
                self.port_search(&ports[..mid]);
                let upper = self.code.len();
                self.code[at].2 = Target::At(upper);
                self.code[at].3 = Target::Next;
                self.port_search(&ports[mid..]);
            }
        }
    }

    fn finish(self) -> Vec<Insn> {
        let accept = self.code.len();
        let drop = accept + 1;
        let mut out = Vec::with_capacity(accept + 2);
        for (pc, &(code, k, jt, jf)) in self.code.iter().enumerate() {
            let rel = |t: Target| -> u8 {
                let to = match t {
                    Target::Next => pc + 1,
                    Target::Accept => accept,
                    Target::Drop => drop,
                    Target::At(a) => a,
                };
                u8::try_from(to - pc - 1).unwrap_or(u8::MAX)
            };
            out.push(Insn {
                code,
                jt: rel(jt),
                jf: rel(jf),
                k,
            });
        }
        out.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: u32::MAX,
        });
        out.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: 0,
        });
        out
    }
}

impl FilterPlan {
    /// The classic-BPF program. Port sets are searched in a binary tree
    /// (about log2(n) comparisons). Jumps in classic BPF reach at most 255
    /// instructions, so large sets fall back to accepting the ethertype
    /// (user space still drops frames for ports it does not hold).
    pub fn program(&self) -> Vec<Insn> {
        if self.edp_ports.len() > 60 || self.esp_ports.len() > 60 {
            return Self::accept_ethertypes(self.edp_ethertype, self.esp_ethertype);
        }
        let mut a = Asm { code: Vec::new() };
        a.push(LD_H_ABS, OFF_ETHERTYPE, Target::Next, Target::Next);
        let edp_jump = a.push(JEQ_K, self.edp_ethertype as u32, Target::Next, Target::Next);
        // EDP branch.
        let mut edp_ports = self.edp_ports.clone();
        if self.edp_control {
            edp_ports.push(0);
            edp_ports.sort_unstable();
            edp_ports.dedup();
        }
        a.push(LD_H_ABS, OFF_DST_PORT, Target::Next, Target::Next);
        a.port_search(&edp_ports);
        let esp_start = a.code.len();
        a.code[edp_jump].3 = Target::At(esp_start);
        a.push(JEQ_K, self.esp_ethertype as u32, Target::Next, Target::Drop);
        if self.esp_syn_any {
            a.push(LD_B_ABS, OFF_ESP_FLAGS, Target::Next, Target::Next);
            a.push(ALU_AND_K, ESP_SYN | ESP_ACK, Target::Next, Target::Next);
            a.push(JEQ_K, ESP_SYN, Target::Accept, Target::Next);
        }
        a.push(LD_H_ABS, OFF_DST_PORT, Target::Next, Target::Next);
        a.port_search(&self.esp_ports);
        if a.code.len() > 250 {
            // Relative jumps to the shared accept/drop ends must fit a byte.
            return Self::accept_ethertypes(self.edp_ethertype, self.esp_ethertype);
        }
        a.finish()
    }

    /// A program accepting every frame of the two ethertypes.
    pub fn accept_ethertypes(edp: u16, esp: u16) -> Vec<Insn> {
        let mut a = Asm { code: Vec::new() };
        a.push(LD_H_ABS, OFF_ETHERTYPE, Target::Next, Target::Next);
        a.push(JEQ_K, edp as u32, Target::Accept, Target::Next);
        a.push(JEQ_K, esp as u32, Target::Accept, Target::Drop);
        a.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal classic-BPF interpreter for the opcodes above (the shared
    /// interpreter lives in netcore::bpf once it lands).
    fn run(prog: &[Insn], frame: &[u8]) -> bool {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = prog[pc];
            pc += 1;
            match i.code {
                LD_H_ABS => {
                    let o = i.k as usize;
                    if o + 2 > frame.len() {
                        return false;
                    }
                    a = u16::from_be_bytes([frame[o], frame[o + 1]]) as u32;
                }
                LD_B_ABS => {
                    let o = i.k as usize;
                    if o >= frame.len() {
                        return false;
                    }
                    a = frame[o] as u32;
                }
                ALU_AND_K => a &= i.k,
                JEQ_K => pc += if a == i.k { i.jt } else { i.jf } as usize,
                JGT_K => pc += if a > i.k { i.jt } else { i.jf } as usize,
                RET_K => return i.k != 0,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    fn frame(ethertype: u16, dst_port: u16, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&ethertype.to_be_bytes());
        f[16..18].copy_from_slice(&dst_port.to_be_bytes());
        f[20] = flags;
        f
    }

    fn plan(edp: &[u16], esp: &[u16]) -> FilterPlan {
        FilterPlan {
            edp_ethertype: 0x88b5,
            esp_ethertype: 0x88b6,
            edp_ports: edp.to_vec(),
            esp_ports: esp.to_vec(),
            edp_control: false,
            esp_syn_any: false,
        }
    }

    #[test]
    fn accepts_exactly_the_owned_ports() {
        for n in [0usize, 1, 2, 3, 4, 5, 9, 17, 33, 60] {
            let edp: Vec<u16> = (0..n as u16).map(|i| 1000 + 7 * i).collect();
            let esp: Vec<u16> = (0..n as u16).map(|i| 2000 + 3 * i).collect();
            let prog = plan(&edp, &esp).program();
            for p in 990..1500u16 {
                assert_eq!(
                    run(&prog, &frame(0x88b5, p, 0)),
                    edp.contains(&p),
                    "edp {p} n={n}"
                );
            }
            for p in 1990..2200u16 {
                assert_eq!(
                    run(&prog, &frame(0x88b6, p, 0)),
                    esp.contains(&p),
                    "esp {p} n={n}"
                );
            }
            assert!(!run(
                &prog,
                &frame(0x0800, edp.first().copied().unwrap_or(1), 0)
            ));
        }
    }

    #[test]
    fn responder_roles_add_control_and_syns() {
        let mut p = plan(&[5], &[6]);
        p.edp_control = true;
        p.esp_syn_any = true;
        let prog = p.program();
        assert!(run(&prog, &frame(0x88b5, 0, 0)));
        assert!(run(&prog, &frame(0x88b6, 999, 0x02)));
        assert!(
            !run(&prog, &frame(0x88b6, 999, 0x12)),
            "SYN-ACK to a foreign port"
        );
        assert!(!run(&prog, &frame(0x88b6, 999, 0x10)));
        assert!(run(&prog, &frame(0x88b6, 6, 0x10)));
        assert!(!run(&prog, &frame(0x88b5, 1, 0)));
    }

    #[test]
    fn short_frames_are_dropped_and_large_sets_fall_back() {
        let prog = plan(&[5], &[]).program();
        assert!(!run(&prog, &[0u8; 13]));
        let big: Vec<u16> = (0..500).collect();
        let prog = plan(&big, &[]).program();
        assert!(run(&prog, &frame(0x88b5, 60000, 0)));
        assert!(!run(&prog, &frame(0x86dd, 1, 0)));
    }
}

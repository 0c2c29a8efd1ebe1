//! A classic-BPF interpreter with the kernel's semantics
//! (`net/core/filter.c`, `Documentation/networking/filter.rst`), for tests
//! of programs in any crate: a load beyond the end of the frame, or a
//! division by a zero `X`, ends the program with 0 (drop). Ancillary loads
//! (negative offsets, `SKF_AD_*`) are not supported.

use std::fmt;

use super::{op, Insn, MAX_INSNS};

/// Why a program was rejected before or while running. The kernel's
/// verifier (`bpf_check_classic`) rejects the same programs at attach time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterpError {
    /// Empty, or longer than [`MAX_INSNS`].
    BadLength(usize),
    /// An opcode the interpreter (or the kernel) does not know, at `pc`.
    BadOpcode {
        /// Instruction index.
        pc: usize,
        /// The opcode.
        code: u16,
    },
    /// A jump at `pc` leaves the program.
    JumpOutOfRange {
        /// Instruction index.
        pc: usize,
    },
    /// A scratch-memory index of 16 or more at `pc`.
    BadMemoryIndex {
        /// Instruction index.
        pc: usize,
    },
    /// A division or modulo by the constant 0 at `pc`.
    DivisionByZero {
        /// Instruction index.
        pc: usize,
    },
    /// The last instruction is not a `ret`.
    NoFinalReturn,
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InterpError::BadLength(n) => {
                write!(
                    f,
                    "BPF program of {n} instructions (1 to {MAX_INSNS} allowed)"
                )
            }
            InterpError::BadOpcode { pc, code } => {
                write!(f, "unknown BPF opcode {code:#06x} at instruction {pc}")
            }
            InterpError::JumpOutOfRange { pc } => {
                write!(f, "BPF jump at instruction {pc} leaves the program")
            }
            InterpError::BadMemoryIndex { pc } => {
                write!(
                    f,
                    "BPF scratch memory index out of range at instruction {pc}"
                )
            }
            InterpError::DivisionByZero { pc } => {
                write!(f, "BPF division by constant zero at instruction {pc}")
            }
            InterpError::NoFinalReturn => f.write_str("BPF program does not end with ret"),
        }
    }
}

impl std::error::Error for InterpError {}

fn known(code: u16) -> bool {
    match op::class(code) {
        op::LD => matches!(
            (op::mode(code), op::size(code)),
            (op::ABS | op::IND, op::W | op::H | op::B) | (op::IMM | op::MEM | op::LEN, op::W)
        ),
        op::LDX => matches!(
            (op::mode(code), op::size(code)),
            (op::IMM | op::MEM | op::LEN, op::W) | (op::MSH, op::B)
        ),
        op::ST | op::STX => code & !0x07 == 0,
        op::ALU => {
            matches!(
                op::operation(code),
                op::ADD
                    | op::SUB
                    | op::MUL
                    | op::DIV
                    | op::OR
                    | op::AND
                    | op::LSH
                    | op::RSH
                    | op::NEG
                    | op::MOD
                    | op::XOR
            ) && code & 0x07 == op::ALU
        }
        op::JMP => matches!(
            op::operation(code),
            op::JA | op::JEQ | op::JGT | op::JGE | op::JSET
        ),
        op::RET => matches!(code & 0x18, 0x00 | 0x10),
        _ => matches!(code & 0xf8, op::TAX | op::TXA),
    }
}

/// Checks `prog` as the kernel's verifier does: length 1 to
/// [`MAX_INSNS`], known opcodes, jumps inside the program, scratch indices
/// below 16, no division by the constant 0, a final `ret`.
pub fn validate(prog: &[Insn]) -> Result<(), InterpError> {
    if prog.is_empty() || prog.len() > MAX_INSNS {
        return Err(InterpError::BadLength(prog.len()));
    }
    for (pc, i) in prog.iter().enumerate() {
        if !known(i.code) {
            return Err(InterpError::BadOpcode { pc, code: i.code });
        }
        let class = op::class(i.code);
        let mem = (class == op::LD || class == op::LDX) && op::mode(i.code) == op::MEM;
        if (mem || class == op::ST || class == op::STX) && i.k as usize >= op::MEMWORDS {
            return Err(InterpError::BadMemoryIndex { pc });
        }
        if class == op::ALU
            && op::source(i.code) == op::K
            && matches!(op::operation(i.code), op::DIV | op::MOD)
            && i.k == 0
        {
            return Err(InterpError::DivisionByZero { pc });
        }
        if class == op::JMP {
            let next = pc + 1;
            let far = if op::operation(i.code) == op::JA {
                next as u64 + u64::from(i.k)
            } else {
                (next + usize::from(i.jt.max(i.jf))) as u64
            };
            if far >= prog.len() as u64 {
                return Err(InterpError::JumpOutOfRange { pc });
            }
        }
    }
    if op::class(prog[prog.len() - 1].code) != op::RET {
        return Err(InterpError::NoFinalReturn);
    }
    Ok(())
}

/// Packet metadata the kernel offers through ancillary loads
/// ([`super::SKF_AD_OFF`]); the interpreter knows the VLAN fields only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Meta {
    /// The VLAN TCI the kernel removed from the frame, if it was tagged.
    pub vlan_tci: Option<u16>,
}

/// An ancillary load at `k` (>= `SKF_AD_OFF`): `None` for offsets the
/// interpreter does not model.
fn ancillary(k: u32, meta: &Meta) -> Option<u32> {
    match k.wrapping_sub(super::SKF_AD_OFF) {
        super::SKF_AD_VLAN_TAG => Some(u32::from(meta.vlan_tci.unwrap_or(0))),
        super::SKF_AD_VLAN_TAG_PRESENT => Some(u32::from(meta.vlan_tci.is_some())),
        _ => None,
    }
}

fn load(frame: &[u8], at: u64, size: u16) -> Option<u32> {
    let n = match size {
        op::W => 4,
        op::H => 2,
        _ => 1,
    };
    let at = usize::try_from(at).ok()?;
    let b = frame.get(at..at.checked_add(n)?)?;
    Some(b.iter().fold(0u32, |a, &x| (a << 8) | u32::from(x)))
}

/// Runs `prog` on `frame` (the whole Ethernet frame, as a packet socket's
/// filter sees it); returns the filter's verdict: the number of bytes to
/// keep, 0 to drop.
///
/// Errors: those of [`validate`] (checked first).
pub fn run(prog: &[Insn], frame: &[u8]) -> Result<u32, InterpError> {
    run_counted(prog, frame).map(|(verdict, _)| verdict)
}

/// [`run`] for a frame with metadata `meta` (what the ancillary loads of
/// [`super::SKF_AD_VLAN_TAG`] and [`super::SKF_AD_VLAN_TAG_PRESENT`] see;
/// [`run`] runs with none: an untagged frame).
///
/// Errors: those of [`validate`].
pub fn run_meta(prog: &[Insn], frame: &[u8], meta: &Meta) -> Result<u32, InterpError> {
    run_inner(prog, frame, meta).map(|(verdict, _)| verdict)
}

/// Like [`run`], also returning how many instructions were executed (the
/// per-frame cost of the filter in the kernel, roughly).
pub fn run_counted(prog: &[Insn], frame: &[u8]) -> Result<(u32, usize), InterpError> {
    run_inner(prog, frame, &Meta::default())
}

fn run_inner(prog: &[Insn], frame: &[u8], meta: &Meta) -> Result<(u32, usize), InterpError> {
    validate(prog)?;
    let mut steps = 0;
    let (mut a, mut x) = (0u32, 0u32);
    let mut mem = [0u32; op::MEMWORDS];
    let mut pc = 0;
    loop {
        let i = prog[pc];
        pc += 1;
        steps += 1;
        let k = i.k;
        match op::class(i.code) {
            op::LD => {
                a = match op::mode(i.code) {
                    op::ABS if k >= super::SKF_AD_OFF => match ancillary(k, meta) {
                        Some(v) => v,
                        None => return Ok((0, steps)),
                    },
                    op::ABS => match load(frame, u64::from(k), op::size(i.code)) {
                        Some(v) => v,
                        None => return Ok((0, steps)),
                    },
                    op::IND => match load(frame, u64::from(x) + u64::from(k), op::size(i.code)) {
                        Some(v) => v,
                        None => return Ok((0, steps)),
                    },
                    op::IMM => k,
                    op::MEM => mem[k as usize],
                    _ => frame.len() as u32,
                }
            }
            op::LDX => {
                x = match op::mode(i.code) {
                    op::IMM => k,
                    op::MEM => mem[k as usize],
                    op::LEN => frame.len() as u32,
                    _ => match load(frame, u64::from(k), op::B) {
                        Some(v) => 4 * (v & 0xf),
                        None => return Ok((0, steps)),
                    },
                }
            }
            op::ST => mem[k as usize] = a,
            op::STX => mem[k as usize] = x,
            op::ALU => {
                let v = if op::source(i.code) == op::X { x } else { k };
                a = match op::operation(i.code) {
                    op::ADD => a.wrapping_add(v),
                    op::SUB => a.wrapping_sub(v),
                    op::MUL => a.wrapping_mul(v),
                    op::DIV => match a.checked_div(v) {
                        Some(r) => r,
                        None => return Ok((0, steps)),
                    },
                    op::MOD => match a.checked_rem(v) {
                        Some(r) => r,
                        None => return Ok((0, steps)),
                    },
                    op::OR => a | v,
                    op::AND => a & v,
                    op::LSH => a.checked_shl(v).unwrap_or(0),
                    op::RSH => a.checked_shr(v).unwrap_or(0),
                    op::NEG => a.wrapping_neg(),
                    _ => a ^ v,
                }
            }
            op::JMP => {
                let v = if op::source(i.code) == op::X { x } else { k };
                let taken = match op::operation(i.code) {
                    op::JA => {
                        pc += k as usize;
                        continue;
                    }
                    op::JEQ => a == v,
                    op::JGT => a > v,
                    op::JGE => a >= v,
                    _ => a & v != 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            op::RET => return Ok((if i.code & 0x18 == 0x10 { a } else { k }, steps)),
            _ => {
                if i.code & 0xf8 == op::TAX {
                    x = a;
                } else {
                    a = x;
                }
            }
        }
    }
}

/// True when `prog` keeps `frame` (a non-zero verdict).
///
/// Panics if `prog` is invalid (see [`validate`]): meant for tests.
pub fn accepts(prog: &[Insn], frame: &[u8]) -> bool {
    accepts_meta(prog, frame, &Meta::default())
}

/// [`accepts`] for a frame with metadata `meta` (a VLAN tag the kernel
/// took out). Panics on an invalid program.
pub fn accepts_meta(prog: &[Insn], frame: &[u8], meta: &Meta) -> bool {
    match run_meta(prog, frame, meta) {
        Ok(v) => v != 0,
        Err(e) => panic!("invalid BPF program: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn::new(code, jt, jf, k)
    }

    #[test]
    fn loads_alu_scratch_and_returns() {
        let prog = [
            i(op::LD | op::H | op::ABS, 0, 0, 0),  // A = 0x0102
            i(op::ALU | op::LSH | op::K, 0, 0, 4), // A = 0x1020
            i(op::ST, 0, 0, 3),
            i(op::LDX | op::B | op::MSH, 0, 0, 2), // X = 4 * (0x35 & 0xf) = 20
            i(op::LD | op::MEM, 0, 0, 3),
            i(op::ALU | op::ADD | op::X, 0, 0, 0), // A = 0x1020 + 20
            i(op::RET | 0x10, 0, 0, 0),
        ];
        assert_eq!(run(&prog, &[1, 2, 0x35]), Ok(0x1020 + 20));
        // Out-of-bounds load drops.
        assert_eq!(run(&prog, &[1, 2]), Ok(0));
        assert!(!accepts(&prog, &[1]));
        // Indirect load and division by a zero X.
        let prog = [
            i(op::LDX | op::IMM, 0, 0, 1),
            i(op::LD | op::B | op::IND, 0, 0, 1), // A = frame[2]
            i(op::MISC | op::TAX, 0, 0, 0),
            i(op::LD | op::IMM, 0, 0, 100),
            i(op::ALU | op::DIV | op::X, 0, 0, 0),
            i(op::RET | 0x10, 0, 0, 0),
        ];
        assert_eq!(run(&prog, &[0, 0, 7]), Ok(14));
        assert_eq!(run(&prog, &[0, 0, 0]), Ok(0));
    }

    #[test]
    fn jumps() {
        let prog = [
            i(op::LD | op::B | op::ABS, 0, 0, 0),
            i(op::JMP | op::JSET | op::K, 0, 1, 0x80),
            i(op::JMP | op::JA, 0, 0, 1),
            i(op::RET, 0, 0, 5),
            i(op::RET, 0, 0, 6),
        ];
        assert_eq!(run(&prog, &[0x80]), Ok(6));
        assert_eq!(run(&prog, &[0x7f]), Ok(5));
    }

    #[test]
    fn validation_matches_the_kernel_rules() {
        assert_eq!(validate(&[]), Err(InterpError::BadLength(0)));
        assert_eq!(
            validate(&[i(op::LD | op::W | op::ABS, 0, 0, 0)]),
            Err(InterpError::NoFinalReturn)
        );
        assert_eq!(
            validate(&[i(op::JMP | op::JEQ, 1, 0, 0), i(op::RET, 0, 0, 0)]),
            Err(InterpError::JumpOutOfRange { pc: 0 })
        );
        assert_eq!(
            validate(&[i(op::JMP | op::JA, 0, 0, u32::MAX), i(op::RET, 0, 0, 0)]),
            Err(InterpError::JumpOutOfRange { pc: 0 })
        );
        assert_eq!(
            validate(&[i(op::ST, 0, 0, 16), i(op::RET, 0, 0, 0)]),
            Err(InterpError::BadMemoryIndex { pc: 0 })
        );
        assert_eq!(
            validate(&[i(op::ALU | op::DIV | op::K, 0, 0, 0), i(op::RET, 0, 0, 0)]),
            Err(InterpError::DivisionByZero { pc: 0 })
        );
        assert_eq!(
            validate(&[i(0xffff, 0, 0, 0), i(op::RET, 0, 0, 0)]),
            Err(InterpError::BadOpcode {
                pc: 0,
                code: 0xffff
            })
        );
        assert!(validate(&[i(op::RET, 0, 0, 0)]).is_ok());
    }
}

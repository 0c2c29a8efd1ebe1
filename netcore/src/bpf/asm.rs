//! A disassembler in the style of `tcpdump -d`: one line per instruction,
//! jump targets as absolute instruction numbers.

use std::fmt::Write;

use super::{op, Insn};

/// The program as text, one instruction per line: `(pc) mnemonic operand`,
/// with conditional jumps followed by `jt <pc> jf <pc>` (absolute targets).
/// Unknown opcodes are printed as `.word`.
pub fn disassemble(prog: &[Insn]) -> String {
    let mut s = String::new();
    for (pc, i) in prog.iter().enumerate() {
        let _ = write!(s, "({pc:03}) ");
        let k = i.k;
        let size = match op::size(i.code) {
            op::B => "b",
            op::H => "h",
            _ => "",
        };
        let line = match op::class(i.code) {
            op::LD | op::LDX => {
                let reg = if op::class(i.code) == op::LDX {
                    "x"
                } else {
                    ""
                };
                match op::mode(i.code) {
                    op::ABS => format!("{:<8} [{k}]", format!("ld{reg}{size}")),
                    op::IND => format!("{:<8} [x + {k}]", format!("ld{reg}{size}")),
                    op::IMM => format!("{:<8} #{k:#x}", format!("ld{reg}")),
                    op::MEM => format!("{:<8} M[{k}]", format!("ld{reg}")),
                    op::LEN => format!("{:<8} #pktlen", format!("ld{reg}")),
                    op::MSH => format!("{:<8} 4*([{k}]&0xf)", "ldxb"),
                    _ => format!(".word    {:#06x} {k:#x}", i.code),
                }
            }
            op::ST => format!("{:<8} M[{k}]", "st"),
            op::STX => format!("{:<8} M[{k}]", "stx"),
            op::ALU => {
                let name = match op::operation(i.code) {
                    op::ADD => "add",
                    op::SUB => "sub",
                    op::MUL => "mul",
                    op::DIV => "div",
                    op::OR => "or",
                    op::AND => "and",
                    op::LSH => "lsh",
                    op::RSH => "rsh",
                    op::NEG => "neg",
                    op::MOD => "mod",
                    op::XOR => "xor",
                    _ => "alu?",
                };
                if op::operation(i.code) == op::NEG {
                    name.to_string()
                } else if op::source(i.code) == op::X {
                    format!("{name:<8} x")
                } else {
                    format!("{name:<8} #{k:#x}")
                }
            }
            op::JMP => {
                let next = pc + 1;
                if op::operation(i.code) == op::JA {
                    format!("{:<8} {}", "ja", next + k as usize)
                } else {
                    let name = match op::operation(i.code) {
                        op::JEQ => "jeq",
                        op::JGT => "jgt",
                        op::JGE => "jge",
                        op::JSET => "jset",
                        _ => "j?",
                    };
                    let operand = if op::source(i.code) == op::X {
                        "x".to_string()
                    } else {
                        format!("#{k:#x}")
                    };
                    format!(
                        "{name:<8} {operand:<16} jt {}\tjf {}",
                        next + i.jt as usize,
                        next + i.jf as usize
                    )
                }
            }
            op::RET => {
                if i.code & 0x18 == op::RET_A {
                    format!("{:<8} a", "ret")
                } else {
                    format!("{:<8} #{k}", "ret")
                }
            }
            _ => match i.code & 0xf8 {
                op::TAX => "tax".to_string(),
                op::TXA => "txa".to_string(),
                _ => format!(".word    {:#06x} {k:#x}", i.code),
            },
        };
        s.push_str(&line);
        s.push('\n');
    }
    s
}

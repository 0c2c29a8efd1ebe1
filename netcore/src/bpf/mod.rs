//! Classic BPF (Linux `SO_ATTACH_FILTER`): the instruction type, a program
//! builder with labels, the filters the I/O runtime installs, a
//! disassembler and (for tests, in any crate) an interpreter. The kernel's
//! own documentation is `Documentation/networking/filter.rst`; the builder
//! follows s2n-quic-platform's `bpf/` in spirit (typed instructions,
//! snapshot-tested programs).
//!
//! - [`Insn`]: one instruction, laid out as the kernel's `struct
//!   sock_filter`, so `link::sys` can hand a `&[Insn]` to `setsockopt(2)`
//!   unchanged;
//! - [`Builder`]: emits instructions with forward [`Label`]s and resolves
//!   jumps, inserting `ja` trampolines where a conditional jump would reach
//!   farther than its 8-bit offset allows;
//! - [`FrameFilter`]: the frames a process (or a socket) accepts, by
//!   ethertype and destination port (a binary search, so 1000 ports cost
//!   about 10 comparisons), with per-port conditions (ESP SYN only, one
//!   peer only);
//! - [`interp::run`]: executes a program on a frame as the kernel would
//!   (a load beyond the frame drops it; [`interp::run_meta`] with the
//!   VLAN metadata of the ancillary loads);
//! - [`disassemble`]: `tcpdump -d`-style text, for snapshot tests and logs.

mod asm;
mod filter;
pub mod interp;
mod program;

pub use self::asm::disassemble;
pub use self::filter::{
    EthertypeRule, FrameFilter, PortMatch, ESP_ACK, ESP_FLAGS_OFFSET, ESP_RST, ESP_SYN,
};
pub use self::filter::{DST_PORT_OFFSET, ETHERTYPE_OFFSET, SRC_MAC_OFFSET, SRC_PORT_OFFSET};
pub use self::program::{BpfError, Builder, Label, Size};

/// One classic-BPF instruction, laid out as the kernel's `struct
/// sock_filter` (`linux/filter.h`): opcode, jump offsets if true and if
/// false (relative to the next instruction), and the constant operand.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Opcode (`BPF_LD | BPF_H | BPF_ABS`, ...).
    pub code: u16,
    /// Instructions to skip when a conditional jump is taken.
    pub jt: u8,
    /// Instructions to skip when a conditional jump is not taken.
    pub jf: u8,
    /// Constant operand (offset, comparand, return value).
    pub k: u32,
}

impl Insn {
    /// An instruction from its four fields.
    pub const fn new(code: u16, jt: u8, jf: u8, k: u32) -> Self {
        Self { code, jt, jf, k }
    }
}

/// Base of the kernel's ancillary loads (`SKF_AD_OFF`, `linux/filter.h`):
/// an absolute word load at `SKF_AD_OFF + n` reads packet metadata `n`,
/// not packet bytes.
pub const SKF_AD_OFF: u32 = (-0x1000i32) as u32;
/// Ancillary: the VLAN TCI the kernel took out of the frame
/// (`SKF_AD_VLAN_TAG`).
pub const SKF_AD_VLAN_TAG: u32 = 44;
/// Ancillary: 1 when the frame carried a VLAN tag (`SKF_AD_VLAN_TAG_PRESENT`).
pub const SKF_AD_VLAN_TAG_PRESENT: u32 = 48;

/// Largest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

/// Return value of an accepting filter: keep the whole frame.
pub const ACCEPT: u32 = u32::MAX;
/// Return value of a dropping filter.
pub const DROP: u32 = 0;

/// Opcode fields of `linux/bpf_common.h` and `linux/filter.h`.
pub mod op {
    #![allow(missing_docs)]
    // Classes.
    pub const LD: u16 = 0x00;
    pub const LDX: u16 = 0x01;
    pub const ST: u16 = 0x02;
    pub const STX: u16 = 0x03;
    pub const ALU: u16 = 0x04;
    pub const JMP: u16 = 0x05;
    pub const RET: u16 = 0x06;
    pub const MISC: u16 = 0x07;
    // Sizes.
    pub const W: u16 = 0x00;
    pub const H: u16 = 0x08;
    pub const B: u16 = 0x10;
    // Modes.
    pub const IMM: u16 = 0x00;
    pub const ABS: u16 = 0x20;
    pub const IND: u16 = 0x40;
    pub const MEM: u16 = 0x60;
    pub const LEN: u16 = 0x80;
    pub const MSH: u16 = 0xa0;
    // ALU operations.
    pub const ADD: u16 = 0x00;
    pub const SUB: u16 = 0x10;
    pub const MUL: u16 = 0x20;
    pub const DIV: u16 = 0x30;
    pub const OR: u16 = 0x40;
    pub const AND: u16 = 0x50;
    pub const LSH: u16 = 0x60;
    pub const RSH: u16 = 0x70;
    pub const NEG: u16 = 0x80;
    pub const MOD: u16 = 0x90;
    pub const XOR: u16 = 0xa0;
    // Jumps.
    pub const JA: u16 = 0x00;
    pub const JEQ: u16 = 0x10;
    pub const JGT: u16 = 0x20;
    pub const JGE: u16 = 0x30;
    pub const JSET: u16 = 0x40;
    // Sources.
    pub const K: u16 = 0x00;
    pub const X: u16 = 0x08;
    // Return sources.
    pub const RET_A: u16 = 0x10;
    // MISC operations.
    pub const TAX: u16 = 0x00;
    pub const TXA: u16 = 0x80;
    /// Scratch memory words (`BPF_MEMWORDS`).
    pub const MEMWORDS: usize = 16;

    /// Class of an opcode.
    pub const fn class(code: u16) -> u16 {
        code & 0x07
    }
    /// Size field of a load.
    pub const fn size(code: u16) -> u16 {
        code & 0x18
    }
    /// Mode field of a load.
    pub const fn mode(code: u16) -> u16 {
        code & 0xe0
    }
    /// Operation field of an ALU or jump instruction.
    pub const fn operation(code: u16) -> u16 {
        code & 0xf0
    }
    /// Source field (`K` or `X`).
    pub const fn source(code: u16) -> u16 {
        code & 0x08
    }
}

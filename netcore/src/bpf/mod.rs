//! Classic BPF (Linux `SO_ATTACH_FILTER`): the instruction type, a program
//! builder with labels, the filters the I/O runtime installs, and (for
//! tests) an interpreter. The kernel's own documentation is
//! `Documentation/networking/filter.rst`.
//!
//! [`Insn`] has the layout of the kernel's `struct sock_filter`, so
//! `edp::sys` can hand a `&[Insn]` to `setsockopt(2)` unchanged.

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

/// Largest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

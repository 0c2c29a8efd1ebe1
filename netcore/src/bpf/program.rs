//! The program builder: instructions with forward labels, resolved into
//! the 8-bit relative offsets of conditional jumps (with `ja` trampolines
//! for targets beyond 255 instructions) and the 32-bit offset of `ja`.

use std::fmt;

use super::{op, Insn, ACCEPT, DROP, MAX_INSNS};

/// A jump target: the position of the instruction emitted right after
/// [`Builder::bind`] was called with it. Classic BPF only jumps forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Label(usize);

/// Width of a load from the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// One byte (`ldb`).
    Byte,
    /// A big-endian 16-bit half-word (`ldh`).
    Half,
    /// A big-endian 32-bit word (`ld`).
    Word,
}

impl Size {
    fn code(self) -> u16 {
        match self {
            Size::Byte => op::B,
            Size::Half => op::H,
            Size::Word => op::W,
        }
    }
}

/// Why a program could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BpfError {
    /// The program has more than [`MAX_INSNS`] instructions (`len` is how
    /// many it would have had); the kernel refuses it with `EINVAL`.
    TooLong {
        /// Instructions the program would have had.
        len: usize,
    },
    /// A jump names a label that was never bound.
    UnboundLabel,
    /// A label was bound twice.
    LabelBoundTwice,
    /// A jump targets a label bound after the last instruction.
    LabelPastEnd,
    /// A jump targets an instruction at or before itself (classic BPF only
    /// jumps forward, so every program terminates).
    BackwardJump,
    /// The program is empty or does not end with a `ret`.
    NoFinalReturn,
}

impl fmt::Display for BpfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BpfError::TooLong { len } => write!(
                f,
                "BPF program of {len} instructions exceeds the kernel's limit of {MAX_INSNS} (BPF_MAXINSNS)"
            ),
            BpfError::UnboundLabel => f.write_str("BPF program jumps to a label that was never bound"),
            BpfError::LabelBoundTwice => f.write_str("BPF label bound twice"),
            BpfError::LabelPastEnd => {
                f.write_str("BPF program jumps to a label after its last instruction")
            }
            BpfError::BackwardJump => f.write_str("BPF program jumps backwards (classic BPF only jumps forward)"),
            BpfError::NoFinalReturn => f.write_str("BPF program is empty or does not end with ret"),
        }
    }
}

impl std::error::Error for BpfError {}

#[derive(Debug, Clone, Copy)]
enum Item {
    /// An instruction without jumps.
    Plain(Insn),
    /// A conditional jump; `None` targets are the next instruction.
    Cond {
        code: u16,
        k: u32,
        jt: Option<Label>,
        jf: Option<Label>,
    },
    /// `ja`: an unconditional jump with a 32-bit offset.
    Always(Label),
}

/// Emits a classic-BPF program with labels.
///
/// ```
/// use netcore::bpf::{Builder, Size, interp};
/// let mut b = Builder::new();
/// let drop = b.label();
/// b.load(Size::Half, 12);
/// b.jeq(0x88b5, None, Some(drop));
/// b.accept();
/// b.bind(drop);
/// b.drop();
/// let prog = b.build().unwrap();
/// let mut frame = [0u8; 14];
/// frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
/// assert!(interp::accepts(&prog, &frame));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Builder {
    items: Vec<Item>,
    /// Item index each label is bound to.
    labels: Vec<Option<usize>>,
    bound_twice: bool,
}

impl Builder {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new label, to be bound later with [`Builder::bind`].
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `label` to the next instruction emitted.
    pub fn bind(&mut self, label: Label) -> &mut Self {
        let slot = &mut self.labels[label.0];
        if slot.is_some() {
            self.bound_twice = true;
        }
        *slot = Some(self.items.len());
        self
    }

    /// Items emitted so far (a conditional jump may become up to three
    /// instructions once trampolines are inserted).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing was emitted.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends an instruction without jumps as it is.
    pub fn raw(&mut self, insn: Insn) -> &mut Self {
        self.items.push(Item::Plain(insn));
        self
    }

    /// `A = frame[offset..]` (big-endian, `size` bytes); a load beyond the
    /// frame makes the kernel drop it.
    pub fn load(&mut self, size: Size, offset: u32) -> &mut Self {
        self.raw(Insn::new(op::LD | size.code() | op::ABS, 0, 0, offset))
    }

    /// `A = frame length` in bytes.
    pub fn load_len(&mut self) -> &mut Self {
        self.raw(Insn::new(op::LD | op::W | op::LEN, 0, 0, 0))
    }

    /// `A = A <operation> k` (`operation` from [`op`], e.g. `op::AND`).
    pub fn alu(&mut self, operation: u16, k: u32) -> &mut Self {
        self.raw(Insn::new(op::ALU | operation | op::K, 0, 0, k))
    }

    /// `A &= k`.
    pub fn and(&mut self, k: u32) -> &mut Self {
        self.alu(op::AND, k)
    }

    fn cond(&mut self, operation: u16, k: u32, jt: Option<Label>, jf: Option<Label>) -> &mut Self {
        self.items.push(Item::Cond {
            code: op::JMP | operation | op::K,
            k,
            jt,
            jf,
        });
        self
    }

    /// Jumps to `jt` if `A == k`, else to `jf` (`None`: the next instruction).
    pub fn jeq(&mut self, k: u32, jt: Option<Label>, jf: Option<Label>) -> &mut Self {
        self.cond(op::JEQ, k, jt, jf)
    }

    /// Jumps to `jt` if `A > k` (unsigned), else to `jf`.
    pub fn jgt(&mut self, k: u32, jt: Option<Label>, jf: Option<Label>) -> &mut Self {
        self.cond(op::JGT, k, jt, jf)
    }

    /// Jumps to `jt` if `A >= k` (unsigned), else to `jf`.
    pub fn jge(&mut self, k: u32, jt: Option<Label>, jf: Option<Label>) -> &mut Self {
        self.cond(op::JGE, k, jt, jf)
    }

    /// Jumps to `jt` if `A & k != 0`, else to `jf`.
    pub fn jset(&mut self, k: u32, jt: Option<Label>, jf: Option<Label>) -> &mut Self {
        self.cond(op::JSET, k, jt, jf)
    }

    /// Jumps to `to` unconditionally (`ja`).
    pub fn jump(&mut self, to: Label) -> &mut Self {
        self.items.push(Item::Always(to));
        self
    }

    /// Returns `k`: the number of bytes of the frame to keep (0 drops it).
    pub fn ret(&mut self, k: u32) -> &mut Self {
        self.raw(Insn::new(op::RET | op::K, 0, 0, k))
    }

    /// Accepts the whole frame.
    pub fn accept(&mut self) -> &mut Self {
        self.ret(ACCEPT)
    }

    /// Drops the frame.
    pub fn drop(&mut self) -> &mut Self {
        self.ret(DROP)
    }

    /// Resolves the labels and returns the program.
    ///
    /// A conditional jump whose target lies more than 255 instructions
    /// ahead is followed by a `ja` trampoline (`jt`/`jf` then point at it);
    /// positions are recomputed until no jump needs a new trampoline.
    ///
    /// Errors: [`BpfError`] for unbound, doubly bound or misplaced labels,
    /// a missing final `ret`, or more than [`MAX_INSNS`] instructions.
    pub fn build(&self) -> Result<Vec<Insn>, BpfError> {
        if self.bound_twice {
            return Err(BpfError::LabelBoundTwice);
        }
        match self.items.last() {
            Some(Item::Plain(i)) if op::class(i.code) == op::RET => {}
            _ => return Err(BpfError::NoFinalReturn),
        }
        let n = self.items.len();
        let target = |from: usize, l: Label| -> Result<usize, BpfError> {
            let at = self.labels[l.0].ok_or(BpfError::UnboundLabel)?;
            if at >= n {
                Err(BpfError::LabelPastEnd)
            } else if at <= from {
                Err(BpfError::BackwardJump)
            } else {
                Ok(at)
            }
        };
        // Target item of each branch (jt, jf); `from + 1` for "next".
        let mut targets = Vec::with_capacity(n);
        for (i, item) in self.items.iter().enumerate() {
            targets.push(match *item {
                Item::Cond { jt, jf, .. } => {
                    let t = jt.map_or(Ok(i + 1), |l| target(i, l))?;
                    let f = jf.map_or(Ok(i + 1), |l| target(i, l))?;
                    (t, f)
                }
                Item::Always(l) => {
                    let t = target(i, l)?;
                    (t, t)
                }
                Item::Plain(_) => (i + 1, i + 1),
            });
        }
        // Trampolines needed per conditional item: (for jt, for jf).
        let mut tramp = vec![(false, false); n];
        let mut pos = vec![0usize; n + 1];
        loop {
            for i in 0..n {
                let extra = usize::from(tramp[i].0) + usize::from(tramp[i].1);
                pos[i + 1] = pos[i] + 1 + extra;
            }
            if pos[n] > MAX_INSNS {
                return Err(BpfError::TooLong { len: pos[n] });
            }
            let mut changed = false;
            for i in 0..n {
                if let Item::Cond { .. } = self.items[i] {
                    let (t, f) = targets[i];
                    let base = pos[i] + 1;
                    if !tramp[i].0 && pos[t] - base > u8::MAX as usize {
                        tramp[i].0 = true;
                        changed = true;
                    }
                    if !tramp[i].1 && pos[f] - base > u8::MAX as usize {
                        tramp[i].1 = true;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        let mut out = Vec::with_capacity(pos[n]);
        for (i, item) in self.items.iter().enumerate() {
            let base = pos[i] + 1;
            match *item {
                Item::Plain(insn) => out.push(insn),
                Item::Always(_) => {
                    let t = targets[i].0;
                    out.push(Insn::new(op::JMP | op::JA, 0, 0, (pos[t] - base) as u32));
                }
                Item::Cond { code, k, .. } => {
                    let (t, f) = targets[i];
                    let (tt, tf) = tramp[i];
                    // Trampolines sit right after the jump: jt's first.
                    let jt = if tt { 0 } else { pos[t] - base };
                    let jf = if tf { usize::from(tt) } else { pos[f] - base };
                    out.push(Insn::new(code, jt as u8, jf as u8, k));
                    if tt {
                        let from = out.len() + 1;
                        out.push(Insn::new(op::JMP | op::JA, 0, 0, (pos[t] - from) as u32));
                    }
                    if tf {
                        let from = out.len() + 1;
                        out.push(Insn::new(op::JMP | op::JA, 0, 0, (pos[f] - from) as u32));
                    }
                }
            }
        }
        debug_assert_eq!(out.len(), pos[n]);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::{disassemble, interp};

    #[test]
    fn labels_resolve_to_relative_offsets() {
        let mut b = Builder::new();
        let (yes, no) = (b.label(), b.label());
        b.load(Size::Half, 12);
        b.jeq(0x800, Some(yes), None);
        b.jeq(0x86dd, Some(yes), Some(no));
        b.bind(yes).accept();
        b.bind(no).drop();
        let p = b.build().unwrap();
        assert_eq!(
            disassemble(&p),
            "(000) ldh      [12]\n\
             (001) jeq      #0x800           jt 3\tjf 2\n\
             (002) jeq      #0x86dd          jt 3\tjf 4\n\
             (003) ret      #4294967295\n\
             (004) ret      #0\n"
        );
    }

    #[test]
    fn far_targets_get_trampolines() {
        // A jump over 300 instructions: jt needs a trampoline, jf does not.
        let mut b = Builder::new();
        let far = b.label();
        b.load(Size::Half, 12);
        b.jeq(7, Some(far), None);
        for i in 0..300 {
            b.jeq(1000 + i, None, None);
        }
        b.drop();
        b.bind(far).accept();
        let p = b.build().unwrap();
        assert_eq!(p.len(), 1 + 2 + 300 + 2);
        assert_eq!((p[1].jt, p[1].jf), (0, 1));
        assert_eq!(p[2].code, op::JMP | op::JA);
        let mut f = [0u8; 14];
        f[13] = 7;
        assert_eq!(interp::run(&p, &f), Ok(crate::bpf::ACCEPT));
        f[13] = 8;
        assert_eq!(interp::run(&p, &f), Ok(crate::bpf::DROP));
        // Both branches far.
        let mut b = Builder::new();
        let (x, y) = (b.label(), b.label());
        b.load(Size::Byte, 0);
        b.jeq(1, Some(x), Some(y));
        for _ in 0..300 {
            b.and(0xff);
        }
        b.bind(x).ret(1);
        for _ in 0..300 {
            b.and(0xff);
        }
        b.bind(y).ret(2);
        let p = b.build().unwrap();
        assert_eq!((p[1].jt, p[1].jf), (0, 1));
        assert_eq!(interp::run(&p, &[1]), Ok(1));
        assert_eq!(interp::run(&p, &[0]), Ok(2));
    }

    #[test]
    fn label_errors() {
        let mut b = Builder::new();
        let l = b.label();
        b.jump(l).accept();
        assert_eq!(b.build(), Err(BpfError::UnboundLabel));
        b.bind(l);
        assert_eq!(b.build(), Err(BpfError::LabelPastEnd));

        let mut b = Builder::new();
        let l = b.label();
        b.bind(l).load(Size::Byte, 0).jeq(0, Some(l), None).accept();
        assert_eq!(b.build(), Err(BpfError::BackwardJump));

        let mut b = Builder::new();
        let l = b.label();
        b.bind(l).bind(l).accept();
        assert_eq!(b.build(), Err(BpfError::LabelBoundTwice));

        assert_eq!(Builder::new().build(), Err(BpfError::NoFinalReturn));
        let mut b = Builder::new();
        b.load(Size::Word, 0);
        assert_eq!(b.build(), Err(BpfError::NoFinalReturn));

        let mut b = Builder::new();
        for _ in 0..MAX_INSNS {
            b.and(1);
        }
        b.accept();
        let e = b.build().unwrap_err();
        assert_eq!(e, BpfError::TooLong { len: MAX_INSNS + 1 });
        assert!(e.to_string().contains("4096"), "{e}");
    }
}

//! ESP's answer to segments no socket claimed: RST (thesis ch. 5.2.9: "if
//! no target socket was found, the reception hook will discard the received
//! packet after having informed its originator with a packet carrying the
//! RST flag"; RFC 793 reset generation). Installed in the runtime's host
//! responder role by the first ESP socket of a runtime.

use link::MacAddr;
use runtime::protocol::UnclaimedHandler;

use crate::conn::reset_frame;
use crate::wire::EspFrame;

/// The RST answer. See the module documentation.
pub(crate) struct RstResponder {
    pub ethertype: u16,
}

impl UnclaimedHandler for RstResponder {
    fn answer(
        &mut self,
        frame: &[u8],
        mac: MacAddr,
        max_frame: usize,
        out: &mut [u8],
    ) -> Option<usize> {
        let f = EspFrame::parse(frame, self.ethertype, max_frame).ok()?;
        if f.eth.dst != mac {
            return None;
        }
        reset_frame(out, mac, f.eth.src, self.ethertype, &f.header)
    }
}

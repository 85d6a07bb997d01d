//! The native protocol's answers: RECEIPT and ERROR frames, queued in the
//! order of the requests they answer.

use herald_protocol::frame::ErrorFrame;
use herald_protocol::{ErrorCode, Frame};

use crate::frontend::outbound::Outbound;
use crate::frontend::{Flow, Refusal};

/// Queues the ERROR of a refusal; the connection closes if it is fatal.
pub fn refuse(refusal: Refusal, out: &mut Outbound, request_id: u32) -> Flow {
    let frame = refusal.into_frame();
    let fatal = frame.fatal;
    push_error(out, request_id, frame);
    match fatal {
        true => Flow::Close,
        false => Flow::Continue,
    }
}

/// Queues a RECEIPT if the client asked for one.
pub fn receipt(out: &mut Outbound, request_id: u32) {
    if request_id != 0 {
        out.push_answer_frame(&Frame::Receipt, request_id);
    }
}

/// Queues an ERROR frame.
pub fn reply_error(
    out: &mut Outbound,
    request_id: u32,
    code: ErrorCode,
    fatal: bool,
    message: String,
) {
    push_error(out, request_id, ErrorFrame::new(code, fatal, message));
}

/// Queues an ERROR frame as it is.
fn push_error(out: &mut Outbound, request_id: u32, frame: ErrorFrame) {
    let fatal = frame.fatal;
    log::debug!(
        "ERROR {} (request {request_id}, fatal {fatal}): {}",
        frame.code,
        frame.message
    );
    let frame = Frame::Error(frame);
    // A fatal one goes at once: the connection ends with it.
    match fatal {
        true => out.push_frame(&frame, request_id),
        false => out.push_answer_frame(&frame, request_id),
    }
}

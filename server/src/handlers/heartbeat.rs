//! PING: answer PONG. (PONG needs no handler: any frame resets the
//! connection's silence timer.)

use herald_protocol::Frame;

use crate::frontend::outbound::Outbound;
use crate::frontend::{Flow, Refusal};

pub fn ping(request_id: u32, out: &mut Outbound) -> Result<Flow, Refusal> {
    out.push_answer_frame(&Frame::Pong, request_id);
    Ok(Flow::Continue)
}

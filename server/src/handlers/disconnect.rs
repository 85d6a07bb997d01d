//! DISCONNECT: confirm with a RECEIPT if asked, then close once everything
//! queued for the client has been written.

use super::answer::receipt;
use crate::frontend::outbound::Outbound;
use crate::frontend::{Flow, Refusal};

pub fn handle(request_id: u32, out: &mut Outbound) -> Result<Flow, Refusal> {
    receipt(out, request_id);
    Ok(Flow::Close)
}

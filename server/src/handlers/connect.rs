//! CONNECT: log in, negotiate the heart-beat, answer CONNECTED.

use std::time::Duration;

use herald_protocol::frame::{Connect, Connected};
use herald_protocol::{ErrorCode, Frame};

use crate::frontend::outbound::{encode_control, Outbound};
use crate::frontend::{admit, check_id_length, Context, Flow, Refusal, Welcome};
use crate::session::{Phase, Session};

/// A native CONNECT.
pub(super) fn handle(
    f: Connect,
    request_id: u32,
    session: &mut Session,
    out: &mut Outbound,
    ctx: &mut Context<'_>,
) -> Result<Flow, Refusal> {
    if session.phase == Phase::Connected {
        return Err(Refusal::fatal(
            ErrorCode::AlreadyConnected,
            "CONNECT on a connection that is already connected",
        ));
    }
    let config = &ctx.shared.config;
    let heartbeat_ms = match f.heartbeat_ms {
        0 => config.heartbeat_ms,
        asked => asked.clamp(config.min_heartbeat_ms, config.max_heartbeat_ms),
    };
    check_id_length("client id", &f.client_id, config.max_id_length)
        .map_err(|r| Refusal::fatal(ErrorCode::LimitExceeded, r.into_parts().2))?;
    session.phase = Phase::Connected;
    session.set_client_id(&f.client_id);
    session.set_silence_limit(Duration::from_millis(heartbeat_ms.into()));
    let connected = Connected {
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
        connection_id: ctx.shared.broker.connection_id(ctx.me.serial),
        heartbeat_ms,
        max_frame_size: config.max_frame_size,
        notice: ctx
            .shared
            .auth
            .unchecked(&f.user, ctx.me.serial)
            .unwrap_or_default(),
    };
    let done = crate::frontend::login_result(ctx.shared, ctx.me);
    let peer = session.peer().map(|a| a.ip());
    match ctx.shared.auth.login(&f.user, &f.password, peer, done) {
        Some(principal) => {
            admit(session, principal, ctx.shared, ctx.me.serial)?;
            out.push_frame(&Frame::Connected(connected), request_id);
            Ok(Flow::Continue)
        }
        None => {
            let answer = encode_control(&Frame::Connected(connected), request_id)
                .ok_or_else(|| Refusal::fatal(ErrorCode::Internal, "CONNECTED does not encode"))?;
            Ok(Flow::Login(Welcome { request_id, answer }))
        }
    }
}

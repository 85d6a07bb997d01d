//! CONNECT: log in, negotiate the heart-beat, answer CONNECTED.

use std::time::Duration;

use herald_protocol::frame::{Connect, Connected};
use herald_protocol::{ErrorCode, Frame};

use super::{Context, Flow, Refusal};
use crate::auth::Principal;
use crate::net::outbound::Outbound;
use crate::net::Shared;
use crate::session::{Phase, Session};
use crate::sync::lock;

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
    session.client_id = f.client_id;
    session.silence_limit = Duration::from_millis(heartbeat_ms.into());
    let connected = Connected {
        server_version: env!("CARGO_PKG_VERSION").to_owned(),
        connection_id: ctx.shared.broker.connection_id(ctx.me.serial),
        heartbeat_ms,
        max_frame_size: config.max_frame_size,
    };
    let done = crate::net::login_result(ctx.shared, ctx.me);
    let peer = crate::net::peer_ip(ctx.shared, ctx.me);
    match ctx.shared.auth.login(&f.user, &f.password, peer, done) {
        Some(principal) => {
            admit(session, principal, ctx.shared, ctx.me.serial)?;
            out.push_frame(&Frame::Connected(connected), request_id);
            Ok(Flow::Continue)
        }
        None => Ok(Flow::Login(Welcome::Native(connected, request_id))),
    }
}

/// Refuses an id or name longer than `max_id_length`: each is kept for
/// as long as what it names.
pub fn check_id_length(what: &str, id: &str, max: usize) -> Result<(), Refusal> {
    if id.len() <= max {
        return Ok(());
    }
    Err(Refusal::soft(
        ErrorCode::LimitExceeded,
        format!(
            "the {what} is {} bytes long, more than the {max} allowed (max_id_length)",
            id.len()
        ),
    ))
}

/// Admits a connection whose login succeeded, unless another live
/// connection has its client id (JMS's InvalidClientIDException): client
/// ids name durable subscriptions, so two at once could take over each
/// other's.
pub fn admit(
    session: &mut Session,
    principal: Principal,
    shared: &Shared,
    serial: u64,
) -> Result<(), Refusal> {
    if !session.client_id.is_empty() {
        let mut ids = lock(&shared.client_ids);
        let holder = *ids.entry(session.client_id.clone()).or_insert(serial);
        if holder != serial {
            return Err(Refusal::fatal(
                ErrorCode::InvalidClientId,
                format!(
                    "client id '{}' is in use by another connection",
                    session.client_id
                ),
            ));
        }
    }
    session.principal = principal;
    Ok(())
}

/// Frees the client id of a connection that ends, if it held it.
pub fn release_client_id(session: &Session, shared: &Shared, serial: u64) {
    if session.client_id.is_empty() {
        return;
    }
    let mut ids = lock(&shared.client_ids);
    if ids.get(&session.client_id) == Some(&serial) {
        ids.remove(&session.client_id);
    }
}

/// The answer to a CONNECT whose login is being checked, and its request.
pub enum Welcome {
    /// A native CONNECTED.
    Native(Connected, u32),
    /// A STOMP CONNECTED.
    Stomp(herald_protocol::stomp::StompFrame, u32),
}

impl Welcome {
    /// The CONNECT's request id.
    pub fn request_id(&self) -> u32 {
        match self {
            Welcome::Native(_, id) | Welcome::Stomp(_, id) => *id,
        }
    }
}

//! Logging a connection in: its client id, and who it is.

use herald_protocol::ErrorCode;

use super::context::Refusal;
use super::shared::{Closing, Notice, Protocol, Shared};
use crate::auth::Principal;
use crate::broker::ConnectionRef;
use crate::session::Session;
use crate::sync::lock;

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

/// Admits an AMQP connection that did not ask to be the only one of its
/// container (`sole-connection-for-container`, which Qpid JMS asks for
/// when the application sets a client id): an AMQP container may open
/// several connections, and each goes in with the container id as its
/// client id, held by the first. A durable subscription is still one
/// consumer's at a time.
pub fn admit_alongside(session: &mut Session, principal: Principal, shared: &Shared, serial: u64) {
    if !session.client_id.is_empty() {
        lock(&shared.client_ids)
            .entry(session.client_id.clone())
            .or_insert(serial);
    }
    session.principal = principal;
}

/// Frees the client id of a connection that ends, if it held it; a
/// connection waiting to take it over goes on with its login.
pub fn release_client_id(session: &Session, shared: &Shared, serial: u64) {
    if session.client_id.is_empty() {
        return;
    }
    let mut ids = lock(&shared.client_ids);
    if ids.get(&session.client_id) == Some(&serial) {
        ids.remove(&session.client_id);
        drop(ids);
        if let Some((heir, principal)) = lock(&shared.heirs).remove(&*session.client_id) {
            shared.workers[heir.worker].post(Notice::LoggedIn {
                conn: heir,
                result: Ok(principal),
            });
        }
    }
}

/// What [`take_over`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeOver {
    /// The holder was told to close; the heir's login goes on once it has.
    Waiting,
    /// Nobody holds the id any more (its holder closed meanwhile): admit
    /// the heir again.
    Free,
    /// The holder is not an MQTT connection, whose client ids are not
    /// taken over.
    Refused,
}

/// Takes client id `client_id` over for connection `heir` (MQTT: a new
/// connection with a session's id ends the one that has it): the holder
/// is told to close, and `heir`'s login goes on once it has.
///
/// `client_ids` stays locked while the heir is recorded, so a holder
/// closing at the same moment either is seen gone ([`TakeOver::Free`]) or
/// finds the heir when it releases the id: never neither.
pub fn take_over(
    client_id: &str,
    principal: Principal,
    shared: &Shared,
    heir: ConnectionRef,
) -> TakeOver {
    let ids = lock(&shared.client_ids);
    let Some(&holder) = ids.get(client_id) else {
        return TakeOver::Free;
    };
    // A holder releases its id before it leaves `places`, so it is there.
    let Some((home, protocol)) = shared.places.home(holder) else {
        return TakeOver::Refused;
    };
    if !matches!(
        protocol,
        Protocol::Mqtt | Protocol::MqttTls | Protocol::MqttWebSocket
    ) {
        return TakeOver::Refused;
    }
    // An heir that was waiting already gives way to this one: it closes.
    if let Some((earlier, _)) = lock(&shared.heirs).insert(client_id.to_owned(), (heir, principal))
    {
        shared.workers[earlier.worker].post(Notice::Close(earlier, Closing::TakenOver));
    }
    drop(ids);
    shared.workers[home.worker].post(Notice::Close(home, Closing::TakenOver));
    TakeOver::Waiting
}

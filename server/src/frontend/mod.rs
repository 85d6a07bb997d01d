//! The one interface between the protocol front-ends (the native
//! handlers, STOMP) and the rest of the server: the server-wide state a
//! front-end reaches ([`Shared`]: config, broker, login, limits, counters),
//! the queue it answers its client on ([`outbound::Outbound`]), and the
//! [`Notice`]s that reach a connection's worker from off it when a request
//! finishes elsewhere (the journal, the authenticator, the cluster).
//!
//! On top of those, the operations every protocol maps its frames onto:
//! log in ([`admit`]), [`publish`], subscribe ([`selector`],
//! [`authorize_subscription`]) and [`end_subscription`], [`settle`] and
//! [`commit`]; each takes the connection's [`Session`](crate::session::Session)
//! and a [`Context`] and answers with a result or a [`Refusal`], which the
//! protocol turns into its own error.
//!
//! It knows nothing of sockets: `net` owns those and implements
//! [`Mailbox`] for its workers' inboxes.

use crate::session::Phase;

pub mod arriving;
mod away;
pub mod chunks;
mod context;
pub mod correlation;
mod login;
pub mod outbound;
mod publish;
mod settle;
mod shared;
pub mod streams;
mod subscription;

pub use away::{AwaySessions, Due, PacketIds};
pub use context::{authorize, await_journal, Context, Flow, Parked, Refusal, Welcome};
pub use login::{admit, admit_alongside, check_id_length, release_client_id, take_over, TakeOver};
pub use publish::{authorize as authorize_publish, publish, spill, Published};
pub use settle::{commit, settle};
pub use shared::{
    confirmation, hand_out, kept, login_result, peer_name, poster, Closing, ConnView, Describe,
    DestinationCounts, Limits, Mailbox, Notice, Places, Protocol, Shared, WorkerSink, WorkerStats,
    MOVING, OTHER_DESTINATIONS,
};
/// What every front-end says of a frame over the size limit: its size,
/// the limit and the config key that sets it (before CONNECT the smaller
/// `max_connect_frame_size` holds).
pub fn frame_too_large(size: usize, at_least: bool, max: usize, phase: Phase) -> String {
    let key = match phase {
        Phase::AwaitingConnect => "max_connect_frame_size",
        Phase::Connected => "max_frame_size",
    };
    let at_least = if at_least { "at least " } else { "" };
    format!("frame of {at_least}{size} bytes exceeds {key} ({max})")
}

pub use subscription::{
    authorize as authorize_subscription, check_owner, delete_durable, end_subscription,
    hold_selector, reader_qos, refusal as subscribe_refusal, resend_retained, selector, subscribe,
};

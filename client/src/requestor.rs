//! Request/reply: send a request whose reply-to is a temporary queue, and
//! wait for the reply that carries the request's correlation id.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use herald_protocol::{Destination, Message};

use crate::consumer::Consumer;
use crate::error::{Error, Result};
use crate::producer::Producer;
use crate::session::Session;

/// Sends requests to one destination and waits for their replies.
pub struct Requestor {
    producer: Producer,
    replies: Consumer,
    reply_to: Destination,
    next: AtomicU64,
}

impl Requestor {
    /// A requestor for `destination`, with a temporary queue of its own
    /// for the replies.
    pub fn new(session: &Session, destination: &Destination) -> Result<Requestor> {
        let reply_to = session.create_temporary_queue();
        let replies = session.create_consumer(&reply_to)?;
        let producer = session.create_producer(destination)?;
        Ok(Requestor {
            producer,
            replies,
            reply_to,
            next: AtomicU64::new(1),
        })
    }

    /// Sends `request` and returns the reply to it; other messages on the
    /// reply queue (late replies to earlier requests) are skipped. A
    /// request without an expiration of its own expires with `timeout`:
    /// nobody waits for its answer after that, so it does not stay in a
    /// queue that nobody serves.
    pub fn request(&self, mut request: Message, timeout: Duration) -> Result<Message> {
        if request.expiration == 0 {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            request.expiration = now.saturating_add(timeout.as_millis() as i64);
        }
        let id = format!(
            "{}-{}",
            self.reply_to.name,
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        request.set_reply_to(Some(self.reply_to.clone()));
        request.set_correlation_id(Some(id.clone()));
        self.producer.send(request)?;
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.receive(left)? {
                Some(reply) if reply.correlation_id() == Some(id.as_str()) => return Ok(reply),
                Some(_) => continue,
                None => {
                    return Err(Error::Timeout {
                        what: "a reply",
                        millis: timeout.as_millis(),
                    })
                }
            }
        }
    }
}

/// Answers a request: a reply to its reply-to carrying its correlation id,
/// sent with `session`. Fails if the request has no reply-to.
pub fn reply(session: &Session, request: &Message, mut reply: Message) -> Result<()> {
    let to = request
        .reply_to()
        .ok_or_else(|| Error::InvalidArgument("the request has no reply-to".into()))?;
    reply.set_correlation_id(Some(
        request
            .correlation_id()
            .unwrap_or(request.message_id())
            .to_owned(),
    ));
    session.create_producer(to)?.send(reply)
}

//! What every cluster thread uses: stream names, pipelined round trips,
//! re-reading what changed, and the state of its link to Redis.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::Value;

/// The prefix of the Redis stream keys that hold shared queues' and
/// cluster subscriptions' messages.
pub(super) const STREAM_PREFIX: &str = "herald:q:";

/// The Redis stream that holds the messages of the shared queue (or
/// cluster subscription stream) `name`.
pub(super) fn stream_key(name: &str) -> String {
    format!("{STREAM_PREFIX}{name}")
}

/// Sends `pipe` and reads its answers, giving up at the first that does
/// not come. (The `redis` crate's own reading goes on to wait
/// `ANSWER_TIMEOUT` for each of the others, which on a silent server adds
/// up to five seconds a command.) Returns the last `keep` answers, or the
/// first error Redis answered with; on an I/O error the connection is
/// done with.
pub(super) fn query_pipeline(
    con: &mut redis::Connection,
    pipe: &redis::Pipeline,
    keep: usize,
) -> redis::RedisResult<Vec<Value>> {
    let n = pipe.cmd_iter().count();
    con.send_packed_command(&pipe.get_packed_pipeline())?;
    let mut kept = Vec::with_capacity(keep);
    let mut refused = None;
    for i in 0..n {
        let answer = con.recv_response()?;
        if let Value::ServerError(e) = &answer {
            refused.get_or_insert_with(|| redis::RedisError::from(e.clone()));
        }
        if i + keep >= n {
            kept.push(answer);
        }
    }
    match refused {
        Some(e) => Err(e),
        None => Ok(kept),
    }
}

/// Reads something from Redis again if `changed` says so, and hands it
/// to `apply`; a failed read leaves `changed` set for the next try.
pub(super) fn reread<T>(
    changed: &AtomicBool,
    load: impl FnOnce() -> redis::RedisResult<T>,
    apply: impl FnOnce(T),
) -> redis::RedisResult<()> {
    if !changed.swap(false, Ordering::AcqRel) {
        return Ok(());
    }
    match load() {
        Ok(loaded) => {
            apply(loaded);
            Ok(())
        }
        Err(e) => {
            changed.store(true, Ordering::Relaxed);
            Err(e)
        }
    }
}

/// Sleeps before reconnecting, longer each time up to two seconds; false
/// if the cluster stops meanwhile.
pub(super) fn back_off(stop: &AtomicBool, attempt: &mut u32) -> bool {
    let delay = Duration::from_millis(100u64 << (*attempt).min(4)).min(Duration::from_secs(2));
    *attempt += 1;
    let mut slept = Duration::ZERO;
    while slept < delay {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
        slept += Duration::from_millis(20);
    }
    !stop.load(Ordering::Acquire)
}

/// Marks one side of the link up, and says so when it changes.
pub(super) fn link_up(flag: &AtomicBool, side: &str) {
    if !flag.swap(true, Ordering::AcqRel) {
        log::info!("cluster: {side} connected to Redis");
    }
}

/// See [`link_up`].
pub(super) fn link_down(flag: &AtomicBool, side: &str, why: impl std::fmt::Display) {
    if flag.swap(false, Ordering::AcqRel) {
        log::warn!("cluster: {side} lost Redis ({why}); reconnecting");
    }
}

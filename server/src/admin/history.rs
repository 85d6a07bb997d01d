//! `/api/history` and the sampler that fills it, a sample a second.

use std::time::Duration;

use axum::extract::State;
use axum::Json;
use herald_protocol::DestinationKind;
use serde::Deserialize;
use serde_json::{json, Value as Json_};

use super::samples::{Sample, Totals, HISTORY, HOUR_STEP};
use super::state::{now_s, ApiError, AppState};
use crate::sync::lock;

/// Takes a sample a second, for rates and the console's charts.
pub(super) async fn sample(state: AppState) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    let mut ticks: u64 = 0;
    loop {
        every.tick().await;
        let (messages_in, messages_out, _) = state.totals();
        let at = now_s();
        let mut history = lock(&state.history);
        let last = history.back().cloned();
        let totals = Totals::since(
            at,
            (messages_in, messages_out),
            last.as_ref().map(|l| &l.totals),
        );
        let dt = last.as_ref().map_or(1.0, |l| (at - l.totals.at).max(0.001));
        let rate =
            |now: u64, then: Option<u64>| then.map_or(0.0, |t| now.saturating_sub(t) as f64 / dt);
        let queues = state
            .shared
            .broker
            .queue_stats()
            .into_iter()
            .map(|q| {
                let before = last.as_ref().and_then(|l| l.queues.get(&q.name));
                let enq = rate(q.enqueued, before.map(|b| b.1));
                let deq = rate(q.acknowledged, before.map(|b| b.2));
                (q.name, (q.depth, q.enqueued, q.acknowledged, enq, deq))
            })
            .collect();
        let topics = state
            .destination_counts()
            .into_iter()
            .filter(|((kind, _), _)| *kind == DestinationKind::Topic)
            .map(|((_, name), c)| {
                let before = last.as_ref().and_then(|l| l.topics.get(&name)).map(|t| t.0);
                let r = rate(c.messages_in, before);
                (name, (c.messages_in, r))
            })
            .collect();
        let sample = Sample {
            totals,
            queues,
            topics,
        };
        if ticks.is_multiple_of(HOUR_STEP) {
            lock(&state.hour).push(&sample);
        }
        history.push_back(sample);
        while history.len() > HISTORY {
            history.pop_front();
        }
        drop(history);
        ticks += 1;
    }
}

/// `?window=` of `/api/history`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Window {
    #[serde(default)]
    window: Option<String>,
    /// One queue's depth and rates too.
    #[serde(default)]
    queue: Option<String>,
    /// One topic's publish rate too.
    #[serde(default)]
    topic: Option<String>,
}

fn queue_json(depth: u64, enqueue_rate: f64, dequeue_rate: f64) -> Json_ {
    json!({"depth": depth, "enqueue_rate": enqueue_rate, "dequeue_rate": dequeue_rate})
}

pub(super) async fn history(
    State(state): State<AppState>,
    window: Result<axum::extract::Query<Window>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Json_>, ApiError> {
    let axum::extract::Query(window) = window.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let totals = |t: &Totals| json!({"at": t.at, "in_rate": t.in_rate, "out_rate": t.out_rate});
    let samples: Vec<Json_> = match window.window.as_deref() {
        None | Some("5m") => lock(&state.history)
            .iter()
            .map(|s| {
                let mut sample = totals(&s.totals);
                if let Some(q) = window.queue.as_ref().and_then(|n| s.queues.get(n)) {
                    sample["queue"] = queue_json(q.0 as u64, q.3, q.4);
                }
                if let Some(t) = window.topic.as_ref().and_then(|n| s.topics.get(n)) {
                    sample["topic"] = json!({"rate": t.1});
                }
                sample
            })
            .collect(),
        Some("1h") => {
            let hour = lock(&state.hour);
            let points = |topic, name: Option<&String>| {
                name.map(|n| hour.points(topic, n)).unwrap_or_default()
            };
            let queue = points(false, window.queue.as_ref());
            let topic = points(true, window.topic.as_ref());
            hour.totals()
                .map(|t| {
                    let mut sample = totals(t);
                    if let Some(&(depth, enq, deq)) = queue.get(&(t.at as u32)) {
                        sample["queue"] = queue_json(depth, enq, deq);
                    }
                    if let Some(&(_, rate, _)) = topic.get(&(t.at as u32)) {
                        sample["topic"] = json!({"rate": rate});
                    }
                    sample
                })
                .collect()
        }
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "window '{other}' is not 5m or 1h"
            )))
        }
    };
    Ok(Json(json!(samples)))
}

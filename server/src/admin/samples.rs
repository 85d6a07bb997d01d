//! What the console's charts draw: totals and per-destination series, a
//! sample a second for five minutes and one every ten seconds for an
//! hour.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// Samples kept for the console's chart: five minutes, one a second.
pub(super) const HISTORY: usize = 300;
/// And for its hour-long chart: one every ten seconds.
pub(super) const HOUR_STEP: u64 = 10;
const HOUR_SAMPLES: usize = 360;
/// Queues, and apart from them topics, with an hour-long series each: a
/// series is 5.6 KiB, so that a server with very many destinations keeps
/// the hour of the first this many it saw (the five minutes of all).
const MAX_HOUR_SERIES: usize = 1000;

/// Message totals at one moment, and the rates since the sample before.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) at: f64,
    pub(crate) messages_in: u64,
    pub(crate) messages_out: u64,
    pub(crate) in_rate: f64,
    pub(crate) out_rate: f64,
}

impl Totals {
    /// Totals now, their rates since `last`.
    pub(super) fn since(
        at: f64,
        (messages_in, messages_out): (u64, u64),
        last: Option<&Totals>,
    ) -> Totals {
        let dt = last.map_or(1.0, |l| (at - l.at).max(0.001));
        let rate =
            |now: u64, then: Option<u64>| then.map_or(0.0, |t| now.saturating_sub(t) as f64 / dt);
        Totals {
            at,
            messages_in,
            messages_out,
            in_rate: rate(messages_in, last.map(|l| l.messages_in)),
            out_rate: rate(messages_out, last.map(|l| l.messages_out)),
        }
    }
}

/// One second of history.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    pub(crate) totals: Totals,
    /// Queue name → (depth, enqueued, acknowledged, enqueue rate, dequeue rate).
    pub(crate) queues: BTreeMap<String, (usize, u64, u64, f64, f64)>,
    /// Topic name → (messages published, publish rate).
    pub(crate) topics: BTreeMap<String, (u64, f64)>,
}

/// The last hour, a sample every ten seconds.
#[derive(Debug, Default)]
pub(crate) struct Hour {
    totals: VecDeque<Totals>,
    queues: HashMap<String, Series>,
    topics: HashMap<String, Series>,
}

/// One destination's hour.
#[derive(Debug, Default)]
struct Series {
    /// Its two counters at the last point, for the next point's rates
    /// (a queue's enqueued and acknowledged, a topic's published and 0).
    counters: (u64, u64),
    points: VecDeque<Point>,
}

/// One destination at one moment: 16 bytes, as a series is kept per
/// destination.
#[derive(Debug, Clone, Copy)]
struct Point {
    /// Seconds since the epoch.
    at: u32,
    /// A queue's depth (0 for a topic).
    depth: u32,
    /// Its two counters' rates since the point before.
    rates: (f32, f32),
}

impl Series {
    fn push(&mut self, at: f64, depth: usize, counters: (u64, u64)) {
        let rates = self.points.back().map_or((0.0, 0.0), |last| {
            let dt = (at - f64::from(last.at)).max(1.0);
            let rate = |now: u64, then: u64| (now.saturating_sub(then) as f64 / dt) as f32;
            (
                rate(counters.0, self.counters.0),
                rate(counters.1, self.counters.1),
            )
        });
        self.counters = counters;
        self.points.push_back(Point {
            at: at as u32,
            depth: u32::try_from(depth).unwrap_or(u32::MAX),
            rates,
        });
        if self.points.len() > HOUR_SAMPLES {
            self.points.pop_front();
        }
    }
}

impl Hour {
    /// Adds the sample taken at `sample.totals.at`.
    pub(super) fn push(&mut self, sample: &Sample) {
        let at = sample.totals.at;
        let t = &sample.totals;
        let long = Totals::since(at, (t.messages_in, t.messages_out), self.totals.back());
        self.totals.push_back(long);
        if self.totals.len() > HOUR_SAMPLES {
            self.totals.pop_front();
        }
        let queues = sample.queues.iter().map(|(n, q)| (n, q.0, (q.1, q.2)));
        extend(&mut self.queues, at, queues);
        let topics = sample.topics.iter().map(|(n, t)| (n, 0, (t.0, 0)));
        extend(&mut self.topics, at, topics);
    }
}

impl Hour {
    /// Its totals, oldest first.
    pub(super) fn totals(&self) -> impl Iterator<Item = &Totals> {
        self.totals.iter()
    }

    /// A queue's (`topic` false) or topic's points by second: its depth
    /// and its two rates.
    pub(super) fn points(&self, topic: bool, name: &str) -> HashMap<u32, (u64, f64, f64)> {
        let all = if topic { &self.topics } else { &self.queues };
        all.get(name).map_or_else(HashMap::new, |s| {
            s.points
                .iter()
                .map(|p| {
                    let rates = (f64::from(p.rates.0), f64::from(p.rates.1));
                    (p.at, (u64::from(p.depth), rates.0, rates.1))
                })
                .collect()
        })
    }
}

/// Adds a point to each destination's series (a new series while there
/// are fewer than [`MAX_HOUR_SERIES`]), and drops the series of those
/// gone for an hour.
fn extend<'a>(
    all: &mut HashMap<String, Series>,
    at: f64,
    now: impl Iterator<Item = (&'a String, usize, (u64, u64))>,
) {
    for (name, depth, counters) in now {
        if let Some(series) = all.get_mut(name) {
            series.push(at, depth, counters);
        } else if all.len() < MAX_HOUR_SERIES {
            all.entry(name.clone())
                .or_default()
                .push(at, depth, counters);
        }
    }
    let hour_ago = (at - 3600.0) as u32;
    all.retain(|_, s| s.points.back().is_some_and(|p| p.at > hour_ago));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: f64, depth: usize, enqueued: u64) -> Sample {
        Sample {
            totals: Totals {
                at,
                ..Totals::default()
            },
            queues: [("q".to_owned(), (depth, enqueued, 0, 0.0, 0.0))].into(),
            topics: BTreeMap::new(),
        }
    }

    #[test]
    fn an_hour_keeps_rates_per_destination_and_forgets_the_gone() {
        let mut hour = Hour::default();
        hour.push(&sample(1000.0, 5, 100));
        hour.push(&sample(1010.0, 7, 150));
        let points = &hour.queues["q"].points;
        assert_eq!(points.len(), 2);
        assert_eq!(points[1].depth, 7);
        assert_eq!(points[1].rates, (5.0, 0.0));
        // Gone from the samples: kept for an hour, then dropped.
        let empty = |at| Sample {
            queues: BTreeMap::new(),
            ..sample(at, 0, 0)
        };
        hour.push(&empty(3000.0));
        assert!(hour.queues.contains_key("q"));
        hour.push(&empty(4620.0));
        assert!(hour.queues.is_empty());
        assert_eq!(hour.totals.len(), 4);
    }

    #[test]
    fn series_stop_at_their_limits() {
        let mut hour = Hour::default();
        for i in 0..(HOUR_SAMPLES + 5) {
            let mut s = sample(i as f64 * 10.0, i, 0);
            for n in 0..(MAX_HOUR_SERIES + 3) {
                s.queues.insert(format!("q{n}"), (0, 0, 0, 0.0, 0.0));
            }
            hour.push(&s);
        }
        assert_eq!(hour.totals.len(), HOUR_SAMPLES);
        assert_eq!(hour.queues.len(), MAX_HOUR_SERIES);
        assert!(hour.queues.values().all(|s| s.points.len() == HOUR_SAMPLES));
    }
}

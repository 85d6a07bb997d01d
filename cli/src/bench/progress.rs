//! A one-line progress bar on stderr, drawn only when stderr is a terminal.

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Progress of one phase.
pub struct Progress {
    label: &'static str,
    total: u64,
    started: Instant,
    last_draw: Instant,
    enabled: bool,
}

impl Progress {
    /// A bar for `total` units.
    pub fn new(label: &'static str, total: u64) -> Progress {
        let now = Instant::now();
        Progress {
            label,
            total,
            started: now,
            last_draw: now,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    /// Redraws at most ten times a second.
    pub fn update(&mut self, done: u64) {
        if !self.enabled || self.last_draw.elapsed().as_millis() < 100 {
            return;
        }
        self.last_draw = Instant::now();
        let width = 30;
        let fraction = (done as f64 / self.total as f64).min(1.0);
        let filled = (fraction * width as f64) as usize;
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        eprint!(
            "\r{:<12} [{}{}] {:>3.0}% {:>10.0}/s",
            self.label,
            "#".repeat(filled),
            " ".repeat(width - filled),
            fraction * 100.0,
            rate
        );
        let _ = std::io::stderr().flush();
    }

    /// Clears the line.
    pub fn finish(&self) {
        if self.enabled {
            eprint!("\r{:80}\r", "");
        }
    }
}

//! Parses arbitrary text as two topic patterns and a topic name, and
//! matches and compares them: no input may panic or take more than
//! polynomial time.
#![no_main]

use herald_protocol::Pattern;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\n');
    let (Some(p), Some(q), Some(topic)) = (parts.next(), parts.next(), parts.next()) else {
        return;
    };
    let (Ok(p), Ok(q)) = (Pattern::parse(p), Pattern::parse(q)) else {
        return;
    };
    let covers = p.covers(&q);
    if covers && q.matches(topic) {
        assert!(p.matches(topic), "{p} covers {q} but not {topic}");
    }
});

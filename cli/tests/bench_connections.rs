//! `herald bench --mode connections` in a test binary of its own: the
//! thread count it reports is this process's, so no other test may start
//! or stop threads in it while it measures.

use herald_tests::*;

mod common;

use common::{bench_with_admin, fails, herald, summary};

#[test]
fn bench_measures_idle_connections_through_the_management_api() {
    let server = start();
    let out = bench_with_admin(&server, &["--mode", "connections", "--connections", "300"]);
    let line = summary(&out, "connections");
    let number = |key: &str| -> u64 {
        let at = line
            .find(&format!("\"{key}\":"))
            .unwrap_or_else(|| panic!("{line}"))
            + key.len()
            + 3;
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{key} in {line}"))
    };
    assert_eq!(number("connections"), 300, "{line}");
    // The test server runs in this process, which runs no other test, so
    // every thread it has is the server's or the test harness's.
    assert_eq!(number("threads_after"), number("threads_before"), "{line}");
    assert!(number("rss_after") > 0, "{line}");
    // It measures a server of its own, not one inside the bench.
    let refused = fails(herald().args(["bench", "--embedded", "--mode", "connections"]));
    assert!(refused.contains("--admin"), "{refused}");
}

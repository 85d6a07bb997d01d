//! Helpers shared by the command line's test binaries.

use std::process::Command;

/// The `herald` binary under test.
pub fn herald() -> Command {
    Command::new(env!("CARGO_BIN_EXE_herald"))
}

/// The JSON summary line of a bench scenario.
pub fn summary<'a>(out: &'a str, scenario: &str) -> &'a str {
    let prefix = format!("{{\"scenario\":\"{scenario}\"");
    out.lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no {scenario} summary in\n{out}"))
}

/// Runs a command that must fail; returns what it said on stderr.
pub fn fails(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(!out.status.success(), "{command:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs `herald` with `args`, which must succeed; returns its stdout.
pub fn run_ok(args: &[&str]) -> String {
    succeeded(herald().args(args).output().unwrap(), &args)
}

/// The stdout of a run of `what` that must have succeeded.
pub fn succeeded(out: std::process::Output, what: &dyn std::fmt::Debug) -> String {
    assert!(
        out.status.success(),
        "{what:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `herald --server URL --admin URL bench ARGS` against `server` and
/// returns what it printed.
pub fn bench_with_admin(server: &herald_tests::TestServer, args: &[&str]) -> String {
    let url = format!("herald://{}", server.local_addr());
    let admin = format!("http://{}", server.admin_addr().unwrap());
    let mut all = vec!["--server", &url, "--admin", &admin, "bench"];
    all.extend_from_slice(args);
    run_ok(&all)
}

//! `herald`: publish, subscribe, operate and benchmark from the command
//! line.

mod admin;
mod bench;
mod destination;
mod duration;
mod passwd;
mod publish;
mod queues;
mod request;
mod show;
mod subscribe;
mod target;
mod tls_dev_cert;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use herald_client::Error;

use target::Target;

/// Herald's command line: publish, subscribe, request and reply; look at
/// and operate a server; measure it.
#[derive(Debug, Parser)]
#[command(
    name = "herald",
    version,
    about,
    subcommand_help_heading = "Verbs",
    after_help = "Connection options may come before or after the verb. \
                  `herald VERB --help` describes one verb."
)]
struct Cli {
    #[command(flatten)]
    target: Target,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Publish messages to a topic or a queue.
    Pub(publish::Args),
    /// Subscribe to a topic pattern (or consume a queue) and print what
    /// arrives.
    Sub(subscribe::Args),
    /// List the messages waiting in a queue without consuming them.
    Browse(subscribe::BrowseArgs),
    /// Send a request and print its reply.
    Request(request::RequestArgs),
    /// Answer every request that arrives with the same reply.
    Reply(request::ReplyArgs),
    /// List topics with traffic and subscription patterns (management API).
    Topics,
    /// List queues with depth, in flight, consumers and rates.
    Queues,
    /// List open connections.
    Connections,
    /// Look inside a topic: its subscriptions, retained messages and, for
    /// a keyed topic, its instances.
    #[command(subcommand)]
    Topic(admin::TopicVerb),
    /// Look inside a queue, create or delete one.
    #[command(subcommand)]
    Queue(queues::QueueVerb),
    /// Delete, move or copy one waiting message of a queue.
    Msg(queues::MsgArgs),
    /// Send dead letters back where they came from.
    #[command(subcommand)]
    Dlq(queues::DlqVerb),
    /// Drop the waiting messages of a queue.
    Purge {
        /// The queue: NAME or queue://NAME.
        queue: String,
    },
    /// Print message rates, connections and queued messages, live.
    Stats(admin::StatsArgs),
    /// Have the server re-read its config file: users, permissions and
    /// limits (a server started without --config has none to re-read).
    Reload,
    /// Read a password and print its Argon2 hash, for `[[auth.users]]` in
    /// the server's config.
    Passwd,
    /// Make a test CA and a server certificate it signed, for trying TLS
    /// (not for production).
    TlsDevCert(tls_dev_cert::Args),
    /// Measure throughput and latency.
    Bench(bench::Args),
    /// Count every numbered message through a cluster while
    /// scripts/cluster-drill.sh kills nodes and the Redis primary: what
    /// was receipted, delivered, lost and duplicated, and how long each
    /// failover took.
    Drill(bench::drill::Args),
}

/// The command line's definition: the connection options are listed by
/// `herald --help` once, and each verb's help leaves them out (they are
/// still taken after the verb).
fn command() -> clap::Command {
    let mut cli = Cli::command();
    // A verb that has an argument of a global's id keeps it rather than
    // take the global's copy: a hidden copy, so that its help leaves the
    // option out while it still takes it.
    let globals: Vec<clap::Arg> = cli
        .get_arguments()
        .filter(|a| a.is_global_set())
        .map(|a| a.clone().hide(true))
        .collect();
    let verbs: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    for verb in verbs {
        cli = cli.mut_subcommand(verb, |sub| {
            sub.args(globals.iter().cloned())
                .after_help("Connection options (--server, --user, ...): see `herald --help`.")
        });
    }
    cli
}

fn main() -> ExitCode {
    // The client library's warnings are what the verbs report themselves
    // (a failover, a refusal): shown once, by the verb.
    env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("warn,herald_client=error"),
    )
    .init();
    let cli = match Cli::from_arg_matches(&command().get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let target = &cli.target;
    let result = match cli.command {
        Command::Pub(args) => publish::run(target, args),
        Command::Sub(args) => subscribe::run(target, args),
        Command::Browse(args) => subscribe::browse(target, args),
        Command::Request(args) => request::request(target, args),
        Command::Reply(args) => request::reply(target, args),
        Command::Topics => admin::topics(target),
        Command::Queues => admin::queues(target),
        Command::Connections => admin::connections(target),
        Command::Topic(verb) => admin::topic(target, verb),
        Command::Queue(verb) => queues::queue(target, verb),
        Command::Msg(args) => queues::msg(target, args),
        Command::Dlq(verb) => queues::dlq(target, verb),
        Command::Purge { queue } => admin::purge(target, &queue),
        Command::Stats(args) => admin::stats(target, args),
        Command::Reload => admin::reload(target),
        Command::Passwd => passwd::run(),
        Command::TlsDevCert(args) => tls_dev_cert::run(args),
        Command::Bench(args) => bench::run(target, args),
        Command::Drill(args) => bench::drill::run(target, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match e.server_code() {
                Some(code) if target.verbose => {
                    eprintln!("herald: {e} (server error code {})", code as u32)
                }
                _ => eprintln!("herald: {e}{}", hint(&e)),
            }
            ExitCode::FAILURE
        }
    }
}

/// What to try next, for the errors a newcomer meets first.
fn hint(e: &Error) -> &'static str {
    match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::ConnectionRefused => {
            ": is herald-server running there? --server URL (or HERALD_URL) names another address"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn connection_options_are_listed_once_and_taken_after_the_verb() {
        let top = command().render_long_help().to_string();
        assert!(top.contains("--server"), "{top}");
        for verb in [
            "pub", "sub", "browse", "request", "reply", "queues", "reload", "bench",
        ] {
            assert!(top.contains(verb), "{verb} missing from\n{top}");
        }
        let mut cli = command();
        let sub = cli.find_subcommand_mut("sub").unwrap();
        let help = sub.render_long_help().to_string();
        assert!(!help.contains("--server <SERVER>"), "{help}");
        assert!(help.contains("--selector"), "{help}");
        let m = command()
            .try_get_matches_from(["herald", "sub", "x", "--server", "herald://h:1"])
            .unwrap();
        let cli = Cli::from_arg_matches(&m).unwrap();
        assert_eq!(cli.target.server, "herald://h:1");
    }
}

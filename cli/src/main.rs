//! `herald`: publish, subscribe and benchmark from the command line.

mod admin;
mod bench;
mod passwd;
mod publish;
mod request;
mod subscribe;
mod target;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use target::Target;

/// Herald's command line.
#[derive(Debug, Parser)]
#[command(name = "herald", version, about)]
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
    /// Measure throughput and latency.
    Bench(bench::Args),
    /// Count every numbered message through a cluster while
    /// scripts/cluster-drill.sh kills nodes and the Redis primary: what
    /// was receipted, delivered, lost and duplicated, and how long each
    /// failover took.
    Drill(bench::drill::Args),
    /// Read a password and print its Argon2 hash, for `[[auth.users]]` in
    /// the server's config.
    Passwd,
    /// List topics with traffic and subscription patterns (management API).
    Topics,
    /// List queues with depth, in flight, consumers and rates.
    Queues,
    /// List open connections.
    Connections,
    /// Drop the waiting messages of a queue.
    Purge {
        /// The queue.
        queue: String,
    },
    /// Print message rates, connections and queued messages, live.
    Stats(admin::StatsArgs),
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Pub(args) => publish::run(&cli.target, args),
        Command::Sub(args) => subscribe::run(&cli.target, args),
        Command::Browse(args) => subscribe::browse(&cli.target, args),
        Command::Request(args) => request::request(&cli.target, args),
        Command::Reply(args) => request::reply(&cli.target, args),
        Command::Bench(args) => bench::run(&cli.target, args),
        Command::Drill(args) => bench::drill::run(&cli.target, args),
        Command::Passwd => passwd::run(),
        Command::Topics => admin::topics(&cli.target),
        Command::Queues => admin::queues(&cli.target),
        Command::Connections => admin::connections(&cli.target),
        Command::Purge { queue } => admin::purge(&cli.target, &queue),
        Command::Stats(args) => admin::stats(&cli.target, args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("herald: {e}");
            ExitCode::FAILURE
        }
    }
}

//! Which server a command talks to: `--server URL` or `--factory NAME`
//! from a client config file.

use std::path::PathBuf;

use clap::Args;
use herald_client::{ConnectionFactory, Result};

/// Connection options shared by every command.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Server URL.
    #[arg(
        long,
        global = true,
        default_value = "herald://127.0.0.1:7777",
        conflicts_with = "factory"
    )]
    pub server: String,
    /// Use this named factory from the client config file instead of --server.
    #[arg(long, global = true)]
    pub factory: Option<String>,
    /// Client config file for --factory.
    #[arg(long, global = true, default_value = "config/client.toml")]
    pub client_config: PathBuf,
    /// Client id for the connection (durable subscriptions need one).
    #[arg(long, global = true)]
    pub client_id: Option<String>,
    /// For a herald+tls:// server: PEM file of the CA that signed its
    /// certificate.
    #[arg(long, global = true)]
    pub tls_ca: Option<String>,
    /// Management API of the server, for topics, queues, connections,
    /// purge and stats.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8161")]
    pub admin: String,
    /// User name to log in as.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Password for --user (or set HERALD_PASSWORD, which stays out of
    /// the process list and the shell's history).
    #[arg(long, global = true, env = "HERALD_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
}

impl Target {
    /// The factory these options name.
    pub fn factory(&self) -> Result<ConnectionFactory> {
        let factory = match &self.factory {
            Some(name) => ConnectionFactory::lookup(&self.client_config, name)?,
            None => ConnectionFactory::new(&self.server)?,
        };
        let factory = match &self.tls_ca {
            Some(ca) => factory.with_tls_ca(ca.clone()),
            None => factory,
        };
        let factory = match &self.client_id {
            Some(id) => factory.with_client_id(id.clone()),
            None => factory,
        };
        Ok(match &self.user {
            Some(user) => {
                factory.with_credentials(user.clone(), self.password.clone().unwrap_or_default())
            }
            None => factory,
        })
    }
}

//! Which server a command talks to: `--server URL` (or `HERALD_URL`), or
//! `--factory NAME` from a client config file; and how it reports.

use std::path::{Path, PathBuf};

use clap::Args;
use herald_client::{ConnectionFactory, Error, Result};

/// Connection options shared by every command. They are given before the
/// verb or after it alike; `herald --help` lists them, the verbs' help
/// does not repeat them.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Server URL (herald://HOST:PORT, herald+tls://HOST:PORT).
    #[arg(
        long,
        global = true,
        env = "HERALD_URL",
        default_value = "herald://127.0.0.1:7777",
        conflicts_with = "factory"
    )]
    pub server: String,
    /// Use this named factory from the client config file instead of
    /// --server.
    #[arg(long, global = true)]
    pub factory: Option<String>,
    /// Client config file for --factory [default: config/client.toml,
    /// else client.toml in the user's config directory,
    /// ~/.config/herald/].
    #[arg(long, global = true, value_name = "FILE")]
    pub client_config: Option<PathBuf>,
    /// Client id for the connection (durable subscriptions need one).
    #[arg(long, global = true)]
    pub client_id: Option<String>,
    /// For a herald+tls:// server, or an https:// management API, whose
    /// certificate the system does not trust: PEM file of the CA that
    /// signed it.
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<String>,
    /// Management API of the server (http:// or https://), for topics,
    /// queues, connections, purge, reload and stats.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8161")]
    pub admin: String,
    /// User name to log in as.
    #[arg(long, global = true)]
    pub user: Option<String>,
    /// Password for --user (or set HERALD_PASSWORD, which stays out of
    /// the process list and the shell's history).
    #[arg(long, global = true, env = "HERALD_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// Say more: error codes, where replies went.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

impl Target {
    /// The factory these options name.
    pub fn factory(&self) -> Result<ConnectionFactory> {
        let factory = match &self.factory {
            Some(name) => ConnectionFactory::lookup(self.client_config()?, name)?,
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

    /// A connection through [`Target::factory`].
    pub fn connect(&self) -> Result<herald_client::Connection> {
        open(self.factory()?)
    }

    /// The client config file: the one named, else the first that exists
    /// of `config/client.toml` and the user's `herald/client.toml`.
    fn client_config(&self) -> Result<PathBuf> {
        if let Some(path) = &self.client_config {
            return Ok(path.clone());
        }
        let candidates = config_candidates(
            std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from),
            std::env::var_os("HOME").map(PathBuf::from),
        );
        candidates
            .iter()
            .find(|p| p.is_file())
            .cloned()
            .ok_or_else(|| {
                let tried: Vec<String> = candidates.iter().map(|p| p.display().to_string()).collect();
                Error::InvalidArgument(format!(
                    "--factory needs a client config file: none of {} exists (--client-config FILE names one)",
                    tried.join(", ")
                ))
            })
    }
}

/// A connection through `factory`; what the server says of it
/// (credentials it did not check) goes to stderr.
pub fn open(factory: ConnectionFactory) -> Result<herald_client::Connection> {
    let connection = factory.create_connection()?;
    if let Some(notice) = connection.server_notice() {
        eprintln!("herald: note: {notice}");
    }
    Ok(connection)
}

/// Where a client config file is looked for, in order: the current
/// directory's `config/client.toml`, then `herald/client.toml` in the
/// user's config directory (`$XDG_CONFIG_HOME`, else `~/.config`).
fn config_candidates(xdg: Option<PathBuf>, home: Option<PathBuf>) -> Vec<PathBuf> {
    let mut v = vec![Path::new("config").join("client.toml")];
    let user_dir = xdg
        .filter(|d| d.is_absolute())
        .or_else(|| home.map(|h| h.join(".config")));
    if let Some(dir) = user_dir {
        v.push(dir.join("herald").join("client.toml"));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_config_is_looked_for_here_then_in_the_users_directory() {
        let here = Path::new("config").join("client.toml");
        assert_eq!(
            config_candidates(None, Some("/home/a".into())),
            [here.clone(), "/home/a/.config/herald/client.toml".into()]
        );
        assert_eq!(
            config_candidates(Some("/x".into()), Some("/home/a".into())),
            [here.clone(), "/x/herald/client.toml".into()]
        );
        // A relative XDG_CONFIG_HOME is to be ignored, says the spec.
        assert_eq!(config_candidates(Some("rel".into()), None), [here]);
    }
}

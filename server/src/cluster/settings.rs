//! Declared topics, users and roles shared by the nodes of a cluster.
//!
//! Each node starts from its own config file. On top of it, the cluster
//! keeps in Redis what was changed through any node's management
//! interface: the set `herald:{herald}:topics` (topics declared for strict
//! mode), and the hashes `herald:{herald}:users` and `herald:{herald}:roles` (JSON entries shaped
//! as the config file's `[[auth.users]]` and `[auth.roles.NAME]`). A
//! change is written by the outbound thread and announced on channel
//! `herald:config`; every node reads the three again when it hears that,
//! when it connects and every 20 s, and applies them without a restart:
//! its declared topics become its file's and the shared ones, and its
//! users and roles its file's with the shared ones over them (a shared
//! entry wins over the file's of the same name). Connections already
//! logged in take their user's new permissions as after a reload.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{AuthSection, RoleEntry, UserEntry};

use super::common::Keys;

/// The names of the set and hashes under `P:{P}:` (a change is announced
/// on `Keys::settings_channel`, the message the node id).
const TOPICS: &str = "topics";
const USERS: &str = "users";
const ROLES: &str = "roles";

/// Removes a declared topic and its subtree from the set, atomically.
const UNDECLARE: &str = r"
local gone = 0
for _, m in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if m == ARGV[1] or string.sub(m, 1, #ARGV[1] + 1) == ARGV[1] .. '.' then
    gone = gone + redis.call('SREM', KEYS[1], m)
  end
end
return gone
";

/// What the nodes share of their configuration.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SharedSettings {
    /// Topics declared through the management interface.
    pub topics: BTreeSet<String>,
    /// Users by name.
    pub users: BTreeMap<String, UserEntry>,
    /// Roles by name.
    pub roles: BTreeMap<String, RoleEntry>,
}

/// A change made through a node's management interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// Declare a topic (strict mode).
    Declare(String),
    /// Remove a declared topic and its subtree.
    Undeclare(String),
    /// Add or replace a user.
    PutUser(UserEntry),
    /// Remove a user.
    DeleteUser(String),
    /// Add or replace a role.
    PutRole(String, RoleEntry),
    /// Remove a role.
    DeleteRole(String),
}

impl SharedSettings {
    /// `base` (a node's `[auth]`) with these users and roles over it.
    pub fn auth_over(&self, base: &AuthSection) -> AuthSection {
        let mut auth = base.clone();
        auth.users.retain(|u| !self.users.contains_key(&u.name));
        auth.users.extend(self.users.values().cloned());
        auth.roles
            .extend(self.roles.iter().map(|(k, v)| (k.clone(), v.clone())));
        auth
    }

    /// These settings after `change`.
    pub fn with(&self, change: &Change) -> SharedSettings {
        let mut next = self.clone();
        match change {
            Change::Declare(name) => {
                next.topics.insert(name.clone());
            }
            Change::Undeclare(name) => {
                let below = format!("{name}.");
                next.topics.retain(|t| t != name && !t.starts_with(&below));
            }
            Change::PutUser(user) => {
                next.users.insert(user.name.clone(), user.clone());
            }
            Change::DeleteUser(name) => {
                next.users.remove(name);
            }
            Change::PutRole(name, role) => {
                next.roles.insert(name.clone(), role.clone());
            }
            Change::DeleteRole(name) => {
                next.roles.remove(name);
            }
        }
        next
    }
}

/// Adds the commands that make `change` in Redis and announce it.
pub(super) fn write(pipe: &mut redis::Pipeline, keys: &Keys, change: &Change, node_id: &str) {
    match change {
        Change::Declare(name) => {
            pipe.cmd("SADD").arg(keys.own(TOPICS)).arg(name).ignore();
        }
        Change::Undeclare(name) => {
            pipe.cmd("EVAL")
                .arg(UNDECLARE)
                .arg(1)
                .arg(keys.own(TOPICS))
                .arg(name)
                .ignore();
        }
        Change::PutUser(user) => {
            pipe.cmd("HSET")
                .arg(keys.own(USERS))
                .arg(&user.name)
                .arg(json(user))
                .ignore();
        }
        Change::DeleteUser(name) => {
            pipe.cmd("HDEL").arg(keys.own(USERS)).arg(name).ignore();
        }
        Change::PutRole(name, role) => {
            pipe.cmd("HSET")
                .arg(keys.own(ROLES))
                .arg(name)
                .arg(json(role))
                .ignore();
        }
        Change::DeleteRole(name) => {
            pipe.cmd("HDEL").arg(keys.own(ROLES)).arg(name).ignore();
        }
    }
    pipe.cmd("PUBLISH")
        .arg(&keys.settings_channel)
        .arg(node_id)
        .ignore();
}

/// A config entry as the JSON Redis keeps.
fn json(entry: &impl serde::Serialize) -> String {
    // Plain structs of strings and lists: serializing cannot fail.
    serde_json::to_string(entry).unwrap_or_default()
}

/// Reads what the cluster shares. Entries that do not decode are skipped.
pub(super) fn load(con: &mut redis::Connection, keys: &Keys) -> redis::RedisResult<SharedSettings> {
    let topics: BTreeSet<String> = redis::cmd("SMEMBERS").arg(keys.own(TOPICS)).query(con)?;
    let users: Vec<(String, String)> = redis::cmd("HGETALL").arg(keys.own(USERS)).query(con)?;
    let roles: Vec<(String, String)> = redis::cmd("HGETALL").arg(keys.own(ROLES)).query(con)?;
    Ok(SharedSettings {
        topics: topics
            .into_iter()
            .filter(|t| herald_protocol::destination::validate_name(t).is_ok())
            .collect(),
        users: decode_all(USERS, users)
            .into_iter()
            .filter(|(name, u): &(String, UserEntry)| *name == u.name)
            .collect(),
        roles: decode_all(ROLES, roles),
    })
}

fn decode_all<T: serde::de::DeserializeOwned>(
    key: &str,
    entries: Vec<(String, String)>,
) -> BTreeMap<String, T> {
    entries
        .into_iter()
        .filter_map(|(name, json)| match serde_json::from_str(&json) {
            Ok(v) => Some((name, v)),
            Err(e) => {
                log::warn!("cluster: {key} entry '{name}' does not decode ({e}): ignored");
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str, roles: &[&str]) -> UserEntry {
        UserEntry {
            name: name.into(),
            password: format!("hash of {name}"),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn changes_apply_and_shared_entries_win_over_the_file() {
        let s = SharedSettings::default()
            .with(&Change::Declare("sales.eu".into()))
            .with(&Change::Declare("sales.eu.phones".into()))
            .with(&Change::Declare("salesforce".into()))
            .with(&Change::Undeclare("sales.eu".into()));
        assert_eq!(s.topics.iter().collect::<Vec<_>>(), ["salesforce"]);
        let s = s
            .with(&Change::PutUser(user("ann", &["ops"])))
            .with(&Change::PutRole("ops".into(), RoleEntry::default()))
            .with(&Change::PutUser(user("bob", &[])))
            .with(&Change::DeleteUser("bob".into()));
        let base = AuthSection {
            users: vec![user("ann", &[]), user("carl", &[])],
            ..AuthSection::default()
        };
        let auth = s.auth_over(&base);
        let names: Vec<_> = auth
            .users
            .iter()
            .map(|u| (u.name.as_str(), u.roles.len()))
            .collect();
        assert_eq!(
            names,
            [("carl", 0), ("ann", 1)],
            "the shared ann replaces the file's"
        );
        assert!(auth.roles.contains_key("ops"));
        assert!(!s
            .with(&Change::DeleteRole("ops".into()))
            .roles
            .contains_key("ops"));
    }

    #[test]
    fn entries_that_do_not_decode_are_skipped() {
        let roles: BTreeMap<String, RoleEntry> = decode_all(
            ROLES,
            vec![
                ("ok".into(), r#"{"publish": ["a.#"]}"#.into()),
                ("bad".into(), "{not json".into()),
                ("worse".into(), r#"{"publish": 7}"#.into()),
            ],
        );
        assert_eq!(roles.keys().collect::<Vec<_>>(), ["ok"]);
        assert_eq!(roles["ok"].publish, ["a.#"]);
    }
}

//! Users, roles and diverts changed in the config file itself, as the
//! management interface of a single node does: the file is edited in place (its
//! comments, order and layout kept), the result is checked as a whole
//! config before it replaces the file, and the file is replaced at once
//! (written beside it, then renamed), so that a crash leaves the old
//! file or the new one. The caller then reloads it.

use std::path::Path;

use thiserror::Error;
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, Value};

use crate::auth::{AuthSection, RoleEntry, UserEntry, Users};
use crate::config::{Config, DivertRule};

/// Why a change was not made; the file is as it was.
#[derive(Debug, Error)]
pub enum EditError {
    /// The file could not be read or replaced.
    #[error("{path}: {source}")]
    Io {
        /// The config file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// It is not TOML, or not TOML of the shape Herald writes to.
    #[error("{0}")]
    Shape(String),
    /// The change would make the config wrong (a user with a role that
    /// does not exist, a role still in use...).
    #[error("{0}")]
    Invalid(String),
    /// No such user or role in the file.
    #[error("no {0} '{1}' in the config file")]
    Missing(&'static str, String),
}

/// Adds `user`, or replaces the user of that name.
pub fn put_user(path: &Path, user: &UserEntry) -> Result<AuthSection, EditError> {
    edit(path, |auth| {
        let entry = user_table(user);
        match users(auth)? {
            Users_::Tables(list) => {
                let at = list
                    .iter()
                    .position(|t| has_name(t.get("name"), &user.name));
                match at.and_then(|i| list.get_mut(i)) {
                    Some(t) => set_fields(t, &entry),
                    None => list.push(entry),
                }
            }
            Users_::Inline(list) => {
                let entry = entry.into_inline_table();
                let at = list.iter().position(|v| inline_named(v, &user.name));
                match at {
                    Some(i) => {
                        list.replace(i, entry);
                    }
                    None => list.push(entry),
                }
                one_per_line(list);
            }
        }
        Ok(())
    })
}

/// Removes the user `name`.
pub fn remove_user(path: &Path, name: &str) -> Result<AuthSection, EditError> {
    edit(path, |auth| {
        let found = match users(auth)? {
            Users_::Tables(list) => {
                let before = list.len();
                list.retain(|t| !has_name(t.get("name"), name));
                list.len() < before
            }
            Users_::Inline(list) => {
                let before = list.len();
                list.retain(|v| !inline_named(v, name));
                one_per_line(list);
                list.len() < before
            }
        };
        found
            .then_some(())
            .ok_or_else(|| EditError::Missing("user", name.to_owned()))
    })
}

/// Adds the role `name`, or replaces it.
pub fn put_role(path: &Path, name: &str, role: &RoleEntry) -> Result<AuthSection, EditError> {
    edit(path, |auth| {
        let table = to_table(role)?;
        let roles = auth
            .entry("roles")
            .or_insert_with(|| Item::Table(implicit_table()));
        match roles {
            Item::Table(t) => {
                t.insert(name, Item::Table(table));
            }
            Item::Value(Value::InlineTable(t)) => {
                t.insert(name, Value::InlineTable(table.into_inline_table()));
            }
            _ => return Err(shape("auth.roles is not a table")),
        }
        Ok(())
    })
}

/// Removes the role `name`.
pub fn remove_role(path: &Path, name: &str) -> Result<AuthSection, EditError> {
    edit(path, |auth| {
        let removed = match auth.get_mut("roles") {
            Some(Item::Table(t)) => t.remove(name).is_some(),
            Some(Item::Value(Value::InlineTable(t))) => t.remove(name).is_some(),
            _ => false,
        };
        removed
            .then_some(())
            .ok_or_else(|| EditError::Missing("role", name.to_owned()))
    })
}

/// Reads the file, makes `change` to its `[auth]`, checks the result and
/// writes it; returns the new `[auth]`.
fn edit(
    path: &Path,
    change: impl FnOnce(&mut Table) -> Result<(), EditError>,
) -> Result<AuthSection, EditError> {
    let edited = |doc: &mut DocumentMut| {
        let auth = doc
            .entry("auth")
            .or_insert_with(|| Item::Table(Table::new()))
            .as_table_mut()
            .ok_or_else(|| shape("[auth] is not a table"))?;
        change(auth)
    };
    let users_hold = |config: &Config| {
        Users::from_config(&config.auth)
            .map(drop)
            .map_err(|e| EditError::Invalid(e.to_string()))
    };
    Ok(edit_config(path, edited, users_hold)?.auth)
}

/// Adds `divert`, or replaces the divert of its name.
pub fn put_divert(path: &Path, divert: &DivertRule) -> Result<Config, EditError> {
    let edited = |doc: &mut DocumentMut| {
        let mut entry = Table::new();
        entry.insert("name", toml_edit::value(&divert.name));
        entry.insert("from", toml_edit::value(&divert.from));
        entry.insert("to", toml_edit::value(&divert.to));
        if !divert.selector.is_empty() {
            entry.insert("selector", toml_edit::value(&divert.selector));
        }
        entry.insert("exclusive", toml_edit::value(divert.exclusive));
        let list = diverts(doc)?;
        let at = list
            .iter()
            .position(|t| has_name(t.get("name"), &divert.name));
        match at.and_then(|i| list.get_mut(i)) {
            Some(t) => *t = entry,
            None => list.push(entry),
        }
        Ok(())
    };
    edit_config(path, edited, |_| Ok(()))
}

/// Removes the divert `name`.
pub fn remove_divert(path: &Path, name: &str) -> Result<Config, EditError> {
    let edited = |doc: &mut DocumentMut| {
        let list = diverts(doc)?;
        let before = list.len();
        list.retain(|t| !has_name(t.get("name"), name));
        (list.len() < before)
            .then_some(())
            .ok_or_else(|| EditError::Missing("divert", name.to_owned()))
    };
    edit_config(path, edited, |_| Ok(()))
}

/// The file's `[[diverts]]`, made if it has none.
fn diverts(doc: &mut DocumentMut) -> Result<&mut ArrayOfTables, EditError> {
    doc.entry("diverts")
        .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()))
        .as_array_of_tables_mut()
        .ok_or_else(|| shape("diverts is not a list of [[diverts]] tables"))
}

/// Reads the file, makes `change` to it, checks the result as a whole
/// config and by `check`, and writes it; returns the new config.
fn edit_config(
    path: &Path,
    change: impl FnOnce(&mut DocumentMut) -> Result<(), EditError>,
    check: impl FnOnce(&Config) -> Result<(), EditError>,
) -> Result<Config, EditError> {
    let io = |source| EditError::Io {
        path: path.display().to_string(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let mut doc: DocumentMut = text
        .parse()
        .map_err(|e| shape(&format!("the config file does not parse: {e}")))?;
    change(&mut doc)?;
    let text = doc.to_string();
    let config = Config::parse(&text, &path.display().to_string())
        .map_err(|e| EditError::Invalid(e.to_string()))?;
    check(&config)?;
    replace(path, &text).map_err(io)?;
    Ok(config)
}

/// Writes `text` beside `path`, with its permissions, and renames it over.
fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".new");
    let new = path.with_file_name(name);
    let permissions = std::fs::metadata(path)?.permissions();
    let mut file = std::fs::File::create(&new)?;
    file.set_permissions(permissions)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&new, path)?;
    // The rename itself, durable.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// `auth.users`, in either of the forms TOML allows.
enum Users_<'a> {
    /// `[[auth.users]]` tables.
    Tables(&'a mut ArrayOfTables),
    /// `users = [{ name = ... }, ...]`.
    Inline(&'a mut toml_edit::Array),
}

fn users(auth: &mut Table) -> Result<Users_<'_>, EditError> {
    match auth
        .entry("users")
        .or_insert_with(|| Item::ArrayOfTables(ArrayOfTables::new()))
    {
        Item::ArrayOfTables(list) => Ok(Users_::Tables(list)),
        Item::Value(Value::Array(list)) => Ok(Users_::Inline(list)),
        _ => Err(shape("auth.users is not a list of tables")),
    }
}

/// One user to a line, as a person would write the list.
fn one_per_line(list: &mut toml_edit::Array) {
    for v in list.iter_mut() {
        v.decor_mut().set_prefix("\n    ");
        v.decor_mut().set_suffix("");
    }
    list.set_trailing_comma(true);
    list.set_trailing(if list.is_empty() { "" } else { "\n" });
}

fn has_name(item: Option<&Item>, name: &str) -> bool {
    item.and_then(Item::as_str) == Some(name)
}

fn inline_named(v: &Value, name: &str) -> bool {
    v.as_inline_table()
        .is_some_and(|t| t.get("name").and_then(Value::as_str) == Some(name))
}

fn user_table(user: &UserEntry) -> Table {
    let mut t = Table::new();
    t.insert("name", toml_edit::value(&user.name));
    t.insert("password", toml_edit::value(&user.password));
    let roles: toml_edit::Array = user.roles.iter().map(String::as_str).collect();
    t.insert("roles", toml_edit::value(roles));
    t
}

/// Sets `from`'s keys on `to`, keeping `to`'s other keys and decoration.
fn set_fields(to: &mut Table, from: &Table) {
    for (key, item) in from.iter() {
        to.insert(key, item.clone());
    }
}

/// A role as a TOML table, by its own serialization.
fn to_table(role: &RoleEntry) -> Result<Table, EditError> {
    let text = toml::to_string(role).map_err(|e| shape(&e.to_string()))?;
    let doc: DocumentMut = text.parse().map_err(|e| shape(&format!("{e}")))?;
    Ok(doc.as_table().clone())
}

/// A table that shows only through its subtables (`[auth.roles.x]`
/// without an `[auth.roles]` line).
fn implicit_table() -> Table {
    let mut t = Table::new();
    t.set_implicit(true);
    t
}

fn shape(why: &str) -> EditError {
    EditError::Shape(why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempDir;

    const HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHRzYWx0$Hm3hRCZxlsrwsU8Kj6Ov8Lqo1XS2Dl5/8QkvDgVnmSg";

    fn file(text: &str) -> (TempDir, std::path::PathBuf) {
        let dir = TempDir::new("auth-file");
        std::fs::create_dir_all(&dir.0).unwrap();
        let path = dir.0.join("herald.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn user(name: &str, roles: &[&str]) -> UserEntry {
        UserEntry {
            name: name.into(),
            password: HASH.into(),
            roles: roles.iter().map(|r| r.to_string()).collect(),
        }
    }

    fn ops() -> RoleEntry {
        RoleEntry {
            publish: vec!["queue:orders".into()],
            monitor: true,
            ..RoleEntry::default()
        }
    }

    #[test]
    fn the_embedded_config_takes_users_and_roles_and_keeps_its_comments() {
        let embedded = include_str!("../../config/herald.toml");
        let (_dir, path) = file(embedded);
        put_role(&path, "ops", &ops()).unwrap();
        let auth = put_user(&path, &user("ann", &["ops"])).unwrap();
        assert_eq!(auth.users, vec![user("ann", &["ops"])]);
        assert_eq!(auth.roles["ops"], ops());
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("# No users by default."), "comments kept");
        assert!(text.contains("users = [\n    { name = \"ann\""), "{text}");
        // Replaced in place, then removed; the role in use may not go.
        let auth = put_user(&path, &user("ann", &[])).unwrap();
        assert_eq!(auth.users, vec![user("ann", &[])]);
        let auth = put_user(&path, &user("bob", &["ops"])).unwrap();
        assert_eq!(auth.users.len(), 2);
        let e = remove_role(&path, "ops").unwrap_err();
        assert!(e.to_string().contains("no role 'ops'"), "{e}");
        let auth = remove_user(&path, "bob").unwrap();
        assert_eq!(auth.users, vec![user("ann", &[])]);
        let auth = remove_role(&path, "ops").unwrap();
        assert!(auth.roles.is_empty());
        assert!(matches!(
            remove_user(&path, "bob"),
            Err(EditError::Missing("user", _))
        ));
        assert!(matches!(
            remove_role(&path, "ops"),
            Err(EditError::Missing("role", _))
        ));
        // What is left parses as a config with the user.
        let config = Config::load(&path).unwrap();
        assert_eq!(config.auth.users, vec![user("ann", &[])]);
    }

    #[test]
    fn either_form_of_list_takes_users_and_a_file_without_auth_gets_one() {
        let (_dir, path) = file(
            "[auth]\nusers = [{ name = \"ann\", password = \"HASH\" }]\nroles = { ops = {} }\n"
                .replace("HASH", HASH)
                .as_str(),
        );
        let auth = put_user(&path, &user("bob", &["ops"])).unwrap();
        assert_eq!(auth.users.len(), 2);
        put_role(&path, "dev", &ops()).unwrap();
        assert_eq!(remove_user(&path, "ann").unwrap().users.len(), 1);

        let (_dir, path) = file("workers = 2\n");
        let auth = put_user(&path, &user("ann", &[])).unwrap();
        assert_eq!(auth.users.len(), 1);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("[[auth.users]]"), "{text}");
        put_user(&path, &user("bob", &[])).unwrap();
        assert_eq!(
            remove_user(&path, "ann").unwrap().users,
            vec![user("bob", &[])]
        );
        assert_eq!(Config::load(&path).unwrap().workers, 2);
    }

    #[test]
    fn a_bad_change_or_file_leaves_the_file_as_it_was() {
        let (_dir, path) = file("[auth]\nusers = []\n");
        let before = std::fs::read_to_string(&path).unwrap();
        let e = put_user(&path, &user("ann", &["nobody"])).unwrap_err();
        assert!(matches!(e, EditError::Invalid(_)), "{e}");
        let bad = UserEntry {
            password: "plain".into(),
            ..user("ann", &[])
        };
        assert!(matches!(put_user(&path, &bad), Err(EditError::Invalid(_))));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), before);

        let (_dir, path) = file("auth = 3\n");
        assert!(matches!(
            put_user(&path, &user("a", &[])),
            Err(EditError::Shape(_))
        ));
        let (_dir, path) = file("[auth\n");
        assert!(matches!(
            put_user(&path, &user("a", &[])),
            Err(EditError::Shape(_))
        ));
        let gone = std::path::Path::new("/nonexistent/herald.toml");
        assert!(matches!(
            put_user(gone, &user("a", &[])),
            Err(EditError::Io { .. })
        ));
    }
}

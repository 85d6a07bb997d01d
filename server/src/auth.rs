//! Authentication and authorization: users with Argon2 password hashes,
//! roles with destination patterns per permission.
//!
//! Logins are checked on a thread of their own, `herald-auth`: one Argon2
//! verification takes tens of milliseconds and 19 MiB, and a failed login
//! is answered only after `failed_login_delay_ms`; neither may hold up a
//! worker and the other connections it serves. The worker parks the
//! connection until the answer comes back through its inbox. The
//! management interface's logins take the same thread, so one password
//! is checked at a time, whatever comes in.
//!
//! Guessing is made slow and cheap to refuse: logins of a user from an
//! address with no recent failure are checked first, and a user who failed
//! `max_failed_logins` times from one address within
//! `failed_login_window_ms` is refused from there without a check until
//! the failures age out, told for how long (see [`Throttle`]). The lockout
//! is per user and address, so that a client that keeps failing locks out
//! neither other users nor the same user elsewhere; a connection that gives
//! no name is not a failed guess. Failed logins are logged with the peer's
//! address.
//!
//! With no users configured, credentials are ignored and every connection
//! may do everything (an open broker). With users, a connection that gives
//! a name must give its password and gets its roles' permissions; one that
//! gives none is anonymous, with `auth.anonymous_role`'s permissions unless
//! `auth.required`.

use std::collections::{HashMap, VecDeque};
use std::io::Read;
use std::net::IpAddr;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use herald_protocol::{DestinationKind, Pattern};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::sync::{lock, read, write};

/// `[auth]`: who may connect and what they may do.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    /// Every connection must log in as a user.
    pub required: bool,
    /// How long a failed login waits before its ERROR.
    pub failed_login_delay_ms: u32,
    /// Failed logins from one address, within `failed_login_window_ms`,
    /// after which its logins are refused unchecked.
    pub max_failed_logins: u32,
    /// How long a failed login counts against its address.
    pub failed_login_window_ms: u32,
    /// The role whose permissions anonymous connections have once users
    /// exist; "" = none at all.
    pub anonymous_role: String,
    /// `[[auth.users]]`.
    pub users: Vec<UserEntry>,
    /// `[auth.roles.NAME]`.
    pub roles: std::collections::BTreeMap<String, RoleEntry>,
}

impl Default for AuthSection {
    fn default() -> AuthSection {
        AuthSection {
            required: false,
            failed_login_delay_ms: 1000,
            max_failed_logins: 10,
            failed_login_window_ms: 60_000,
            anonymous_role: String::new(),
            users: Vec::new(),
            roles: std::collections::BTreeMap::new(),
        }
    }
}

/// `[[auth.users]]`: one user.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserEntry {
    /// The login name.
    pub name: String,
    /// The password's Argon2 hash in PHC form (`herald passwd` prints one).
    pub password: String,
    /// The roles whose permissions the user has.
    #[serde(default)]
    pub roles: Vec<String>,
}

/// `[auth.roles.NAME]`: what a role may do, as destination patterns
/// (`queue:` or `topic:` in front limits one to that kind).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoleEntry {
    /// Send to these destinations.
    pub publish: Vec<String>,
    /// Subscribe to these topics and consume from these queues.
    pub consume: Vec<String>,
    /// Browse these queues.
    pub browse: Vec<String>,
    /// Create and delete durable subscriptions on these topics.
    pub durable: Vec<String>,
    /// Read the management interface's views of connections, users,
    /// subscriptions and queues, and its metrics.
    pub monitor: bool,
    /// Use the management interface: read it, and change things through
    /// it (includes `monitor`).
    pub admin: bool,
}

/// What an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Send to a destination.
    Publish,
    /// Subscribe to a topic or consume from a queue.
    Consume,
    /// Browse a queue.
    Browse,
    /// Create or delete a durable subscription.
    Durable,
}

impl Permission {
    const ALL: [Permission; 4] = [
        Permission::Publish,
        Permission::Consume,
        Permission::Browse,
        Permission::Durable,
    ];

    /// Its name in the config and in errors.
    pub fn name(self) -> &'static str {
        match self {
            Permission::Publish => "publish",
            Permission::Consume => "consume",
            Permission::Browse => "browse",
            Permission::Durable => "durable",
        }
    }

    fn patterns(self, role: &RoleEntry) -> &[String] {
        match self {
            Permission::Publish => &role.publish,
            Permission::Consume => &role.consume,
            Permission::Browse => &role.browse,
            Permission::Durable => &role.durable,
        }
    }
}

/// One permission pattern: a destination pattern, for one kind or both.
struct Grant {
    kind: Option<DestinationKind>,
    pattern: Pattern,
}

/// Why a permission pattern does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum GrantError {
    /// A prefix other than `queue:` or `topic:`.
    #[error("'{text}': '{prefix}:' is neither 'queue:' nor 'topic:'")]
    Kind {
        /// The pattern as written.
        text: String,
        /// Its prefix.
        prefix: String,
    },
    /// Not a destination pattern.
    #[error("'{text}': {source}")]
    Pattern {
        /// The pattern as written.
        text: String,
        /// Why.
        source: herald_protocol::Error,
    },
}

impl Grant {
    fn parse(text: &str) -> Result<Grant, GrantError> {
        let (kind, pattern) = match text.split_once(':') {
            Some(("queue", rest)) => (Some(DestinationKind::Queue), rest),
            Some(("topic", rest)) => (Some(DestinationKind::Topic), rest),
            Some((other, _)) => {
                return Err(GrantError::Kind {
                    text: text.to_owned(),
                    prefix: other.to_owned(),
                })
            }
            None => (None, text),
        };
        let pattern = Pattern::parse(pattern).map_err(|source| GrantError::Pattern {
            text: text.to_owned(),
            source,
        })?;
        Ok(Grant { kind, pattern })
    }
}

/// What one connection may do.
pub struct Permissions {
    /// Grants per [`Permission`], in the order of `Permission::ALL`.
    grants: [Vec<Grant>; 4],
    monitor: bool,
    admin: bool,
    everything: bool,
}

impl Permissions {
    /// Anything at all: anonymous connections on an open broker.
    pub fn everything() -> Permissions {
        Permissions {
            grants: Default::default(),
            monitor: true,
            admin: true,
            everything: true,
        }
    }

    /// Nothing at all.
    pub fn none() -> Permissions {
        Permissions {
            grants: Default::default(),
            monitor: false,
            admin: false,
            everything: false,
        }
    }

    fn of_roles<'a>(roles: impl Iterator<Item = &'a RoleEntry>) -> Result<Permissions, GrantError> {
        let mut p = Permissions::none();
        for role in roles {
            p.admin |= role.admin;
            p.monitor |= role.monitor || role.admin;
            for (i, permission) in Permission::ALL.into_iter().enumerate() {
                for text in permission.patterns(role) {
                    p.grants[i].push(Grant::parse(text)?);
                }
            }
        }
        Ok(p)
    }

    /// Whether `permission` covers `target` of `kind`: a destination name,
    /// or a subscription pattern (then every name it matches must be
    /// covered).
    pub fn allows(&self, permission: Permission, kind: DestinationKind, target: &str) -> bool {
        if self.everything {
            return true;
        }
        let grants = self.grants[permission as usize]
            .iter()
            .filter(|g| g.kind.is_none_or(|k| k == kind));
        if !target.contains(['*', '#']) {
            return grants.into_iter().any(|g| g.pattern.matches(target));
        }
        match Pattern::parse(target) {
            Ok(wanted) => grants.into_iter().any(|g| g.pattern.covers(&wanted)),
            Err(_) => false,
        }
    }

    /// Whether the management interface may be used to change things.
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Whether the management interface's views may be read.
    pub fn is_monitor(&self) -> bool {
        self.monitor
    }
}

/// Who a connection is, and what it may do.
#[derive(Clone)]
pub struct Principal {
    /// The user name; empty for an anonymous connection.
    pub user: String,
    /// Its permissions.
    pub permissions: Arc<Permissions>,
    /// The reload its permissions come from (see
    /// [`Authenticator::refresh`]).
    generation: u64,
}

impl Principal {
    /// A connection that has not logged in: it may do nothing.
    pub fn nobody() -> Principal {
        static NOTHING: OnceLock<Arc<Permissions>> = OnceLock::new();
        Principal {
            user: String::new(),
            permissions: NOTHING
                .get_or_init(|| Arc::new(Permissions::none()))
                .clone(),
            generation: 0,
        }
    }

    /// Refuses, naming the permission, what this principal may not do.
    pub fn check(
        &self,
        permission: Permission,
        kind: DestinationKind,
        target: &str,
    ) -> Result<(), Denied> {
        if self.permissions.allows(permission, kind, target) {
            return Ok(());
        }
        Err(Denied {
            user: self.user.clone(),
            permission,
            kind,
            target: target.to_owned(),
        })
    }
}

/// What a user may not do: the permission it lacks, and where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("user '{user}' lacks the '{}' permission for {} '{target}'", permission.name(), kind_name(*kind))]
pub struct Denied {
    /// The user ("" = anonymous).
    pub user: String,
    /// The permission it lacks.
    pub permission: Permission,
    /// The destination's kind.
    pub kind: DestinationKind,
    /// The destination.
    pub target: String,
}

fn kind_name(kind: DestinationKind) -> &'static str {
    match kind {
        DestinationKind::Queue => "queue",
        DestinationKind::Topic => "topic",
    }
}

/// What is wrong with an `[auth]` section: the key, and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{key}: {why}")]
pub struct AuthConfigError {
    /// The config key at fault.
    pub key: &'static str,
    /// Why, naming the user or role.
    pub why: String,
}

struct User {
    /// The Argon2 hash in PHC form, checked when the config was loaded.
    hash: String,
    permissions: Arc<Permissions>,
}

/// The users and rules of one config.
pub struct Users {
    /// Which reload made it (0 = the config the server started with).
    generation: u64,
    required: bool,
    delay: Duration,
    failure_window: Duration,
    max_failures: u32,
    users: HashMap<String, User>,
    /// What an anonymous connection may do: everything on an open broker
    /// (no users), else `anonymous_role`'s permissions, or nothing.
    anonymous: Arc<Permissions>,
    /// The `[auth]` it was made from, for the management interface.
    section: AuthSection,
}

impl Users {
    /// Checks and compiles `[auth]`; a bad entry is named by its key.
    pub fn from_config(config: &AuthSection) -> Result<Users, AuthConfigError> {
        let fault = |key, why| AuthConfigError { key, why };
        for (name, role) in &config.roles {
            Permissions::of_roles(std::iter::once(role))
                .map_err(|e| fault("auth.roles", format!("role '{name}': {e}")))?;
        }
        let mut users = HashMap::new();
        for u in &config.users {
            if u.name.is_empty() {
                return Err(fault("auth.users.name", "a user name is empty".into()));
            }
            PasswordHash::new(&u.password).map_err(|e| {
                fault(
                    "auth.users.password",
                    format!(
                        "user '{}': not an Argon2 hash in PHC form ({e}); `herald passwd` prints one",
                        u.name
                    ),
                )
            })?;
            let roles = u
                .roles
                .iter()
                .map(|r| {
                    config.roles.get(r).ok_or_else(|| {
                        fault(
                            "auth.users.roles",
                            format!("user '{}': no role '{r}' in [auth.roles]", u.name),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let permissions = Permissions::of_roles(roles.into_iter())
                .map_err(|e| fault("auth.roles", format!("user '{}': {e}", u.name)))?;
            let user = User {
                hash: u.password.clone(),
                permissions: Arc::new(permissions),
            };
            if users.insert(u.name.clone(), user).is_some() {
                return Err(fault(
                    "auth.users.name",
                    format!("user '{}' is listed twice", u.name),
                ));
            }
        }
        // A missing role is refused even while there are no users: a typo
        // would take effect, silently, the day the first user is added.
        let role = match config.anonymous_role.as_str() {
            "" => None,
            name => Some(config.roles.get(name).ok_or_else(|| {
                fault(
                    "auth.anonymous_role",
                    format!("no role '{name}' in [auth.roles]"),
                )
            })?),
        };
        let anonymous = match (users.is_empty(), role) {
            (true, _) => Permissions::everything(),
            (false, None) => Permissions::none(),
            (false, Some(role)) => Permissions::of_roles(std::iter::once(role)).map_err(|e| {
                let name = &config.anonymous_role;
                fault("auth.roles", format!("role '{name}': {e}"))
            })?,
        };
        Ok(Users {
            generation: 0,
            required: config.required,
            delay: Duration::from_millis(config.failed_login_delay_ms.into()),
            failure_window: Duration::from_millis(config.failed_login_window_ms.into()),
            max_failures: config.max_failed_logins,
            users,
            anonymous: Arc::new(anonymous),
            section: config.clone(),
        })
    }

    /// What the server tells its operator of anonymous connections.
    pub fn describe_anonymous(&self, config: &AuthSection) -> String {
        match (
            self.users.is_empty(),
            self.required,
            config.anonymous_role.as_str(),
        ) {
            (true, _, _) => "no users are configured: every connection may do everything".into(),
            (false, true, _) => "every connection must log in as a user".into(),
            (false, false, "") => {
                "anonymous connections may connect and do nothing (auth.anonymous_role is empty)"
                    .into()
            }
            (false, false, role) => {
                format!("anonymous connections have the permissions of role '{role}'")
            }
        }
    }

    /// The permissions `user` has now; "" is anonymous.
    fn permissions_of(&self, user: &str) -> Arc<Permissions> {
        if user.is_empty() {
            return self.anonymous.clone();
        }
        match self.users.get(user) {
            Some(u) => u.permissions.clone(),
            None => Arc::new(Permissions::none()),
        }
    }

    /// The principal for these credentials, if no password check is
    /// needed: an open broker, or an anonymous connection where that is
    /// allowed.
    fn at_once(&self, user: &str) -> Option<Principal> {
        let open = self.users.is_empty() || (user.is_empty() && !self.required);
        open.then(|| Principal {
            user: String::new(),
            permissions: self.anonymous.clone(),
            generation: self.generation,
        })
    }

    /// Checks a password; unknown users cost the same time as known ones.
    fn verify(&self, user: &str, password: &str) -> Result<Principal, LoginError> {
        if user.is_empty() {
            return Err(LoginError::NameRequired);
        }
        let refused = || LoginError::Refused(user.to_owned());
        let (hash, permissions) = match self.users.get(user) {
            Some(u) => (u.hash.as_str(), Some(&u.permissions)),
            None => (dummy_hash(), None),
        };
        let parsed = PasswordHash::new(hash).map_err(|_| refused())?;
        let matched = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        match (matched, permissions) {
            (true, Some(permissions)) => Ok(Principal {
                user: user.to_owned(),
                permissions: permissions.clone(),
                generation: self.generation,
            }),
            _ => Err(refused()),
        }
    }
}

/// A hash of nothing anyone knows, verified against for unknown users.
fn dummy_hash() -> &'static str {
    static DUMMY: OnceLock<String> = OnceLock::new();
    DUMMY.get_or_init(|| hash_password("herald: no such user").unwrap_or_default())
}

/// Hashes a password with Argon2id and a random salt, in PHC form, for
/// `[[auth.users]]`.
pub fn hash_password(password: &str) -> Result<String, HashError> {
    let mut salt = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut salt))?;
    let argon2 = |e: argon2::password_hash::Error| HashError::Argon2(e.to_string());
    let salt = SaltString::encode_b64(&salt).map_err(argon2)?;
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(argon2)
}

/// A password for the config: `given` itself if it is an Argon2 hash in
/// PHC form (as `herald passwd` prints), else the hash of `given`.
pub fn password_hash(given: &str) -> Result<String, HashError> {
    match PasswordHash::new(given) {
        Ok(h) if h.algorithm.as_str().starts_with("argon2") => Ok(given.to_owned()),
        _ => hash_password(given),
    }
}

/// Why a password could not be hashed.
#[derive(Debug, Error)]
pub enum HashError {
    /// No random bytes for the salt.
    #[error("cannot read random bytes for a salt: {0}")]
    Random(#[from] std::io::Error),
    /// Argon2 refused (a salt or parameter out of its range).
    #[error("{0}")]
    Argon2(String),
}

/// Why a login failed. Every kind is `AuthenticationFailed` on the wire
/// (401 on the management interface); the text says which.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LoginError {
    /// The server requires users and none was named.
    #[error("this server requires a user name and password")]
    NameRequired,
    /// No such user, or the wrong password (not told apart).
    #[error("invalid user name or password for '{0}'")]
    Refused(String),
    /// Too many failures of the user from the address lately: not even
    /// checked.
    #[error(
        "too many failed logins as '{user}' from {from}: locked out for {}s more \
         (auth.max_failed_logins within auth.failed_login_window_ms)",
        .retry_after.as_secs().max(1)
    )]
    Throttled {
        /// The user name tried.
        user: String,
        /// The address it came from.
        from: String,
        /// How long until the failures age out.
        retry_after: Duration,
    },
    /// The server is stopping: nothing is checked any more.
    #[error("the server is stopping")]
    Stopping,
}

/// Called with the outcome of a login: the principal, or why not.
pub type LoginDone = Box<dyn FnOnce(Result<Principal, LoginError>) + Send>;

struct Job {
    user: String,
    password: String,
    /// Where the login came from, if known.
    peer: Option<IpAddr>,
    done: LoginDone,
}

/// Who tried to log in: the user name, from an address.
type Attempt = (String, IpAddr);

/// Failed logins by user and address, for a window of time.
pub struct Throttle {
    failures: HashMap<Attempt, (u32, Instant)>,
    window: Duration,
    max_failures: u32,
}

/// User and address pairs the throttle remembers at most; past it, the
/// oldest go.
const MAX_TRACKED: usize = 100_000;

impl Throttle {
    /// Remembers failures for `window`; refuses after `max_failures`.
    pub fn new(window: Duration, max_failures: u32) -> Throttle {
        Throttle {
            failures: HashMap::new(),
            window,
            max_failures,
        }
    }

    /// Failures of `user` from `peer` within the window before `now`, and
    /// when the last was.
    fn recent(&self, user: &str, peer: Option<IpAddr>, now: Instant) -> Option<(u32, Instant)> {
        let key = (user.to_owned(), peer?);
        self.failures
            .get(&key)
            .filter(|(_, last)| now.duration_since(*last) < self.window)
            .copied()
    }

    /// Whether logins of `user` from `peer` failed lately: they wait
    /// behind others.
    pub fn suspect(&self, user: &str, peer: Option<IpAddr>, now: Instant) -> bool {
        self.recent(user, peer, now).is_some()
    }

    /// How long `user` stays locked out from `peer`, if it failed too
    /// often lately to be checked at all.
    pub fn blocked(&self, user: &str, peer: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let (n, last) = self.recent(user, peer, now)?;
        (n >= self.max_failures).then(|| self.window.saturating_sub(now.duration_since(last)))
    }

    /// Counts a failure of `user` from `peer`; a failure after a quiet
    /// window starts the count again.
    pub fn failed(&mut self, user: &str, peer: Option<IpAddr>, now: Instant) {
        let Some(ip) = peer else {
            return;
        };
        let window = self.window;
        if self.failures.len() >= MAX_TRACKED {
            self.failures
                .retain(|_, (_, last)| now.duration_since(*last) < window);
        }
        if self.failures.len() >= MAX_TRACKED {
            return;
        }
        let entry = self
            .failures
            .entry((user.to_owned(), ip))
            .or_insert((0, now));
        if now.duration_since(entry.1) >= window {
            entry.0 = 0;
        }
        *entry = (entry.0.saturating_add(1), now);
    }
}

/// Logs connections in: at once where no password check is needed, on
/// the `herald-auth` thread otherwise.
pub struct Authenticator {
    users: Arc<RwLock<Arc<Users>>>,
    /// Counts reloads: what was verified before one must be again.
    generation: std::sync::atomic::AtomicU64,
    jobs: Mutex<Option<Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Authenticator {
    /// Compiles the config and starts the thread.
    pub fn start(config: &AuthSection) -> std::io::Result<Authenticator> {
        let users = Users::from_config(config).map_err(std::io::Error::other)?;
        let users = Arc::new(RwLock::new(Arc::new(users)));
        let (tx, rx) = mpsc::channel();
        let shared = users.clone();
        let thread = std::thread::Builder::new()
            .name("herald-auth".into())
            .spawn(move || run(rx, shared))?;
        Ok(Authenticator {
            users,
            generation: Default::default(),
            jobs: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Takes a reloaded `[auth]`: logins from now on use it, and
    /// connections already in take their user's new permissions when
    /// their worker next reads from them (see [`Authenticator::refresh`]).
    pub fn reload(&self, config: &AuthSection) -> Result<(), AuthConfigError> {
        let mut users = Users::from_config(config)?;
        let mut current = write(&self.users);
        users.generation = current.generation + 1;
        *current = Arc::new(users);
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// A logged-in user's permissions as the config says now, if a reload
    /// changed them since `principal` was made: a user removed by the
    /// reload may do nothing more, and anonymous connections take what
    /// the new config gives them.
    pub fn refresh(&self, principal: &Principal) -> Option<Principal> {
        if principal.generation == self.generation() {
            return None;
        }
        let users = self.current();
        Some(Principal {
            user: principal.user.clone(),
            permissions: users.permissions_of(&principal.user),
            generation: users.generation,
        })
    }

    /// What the server tells its operator of anonymous connections.
    pub fn describe_anonymous(&self, config: &AuthSection) -> String {
        self.current().describe_anonymous(config)
    }

    /// The `[auth]` in force: the config file's as last loaded, under a
    /// cluster's shared users and roles.
    pub fn section(&self) -> AuthSection {
        self.current().section.clone()
    }

    /// An anonymous connection's principal, if anonymous connections may
    /// connect (no users, or logins not required).
    pub fn anonymous(&self) -> Option<Principal> {
        self.current().at_once("")
    }

    /// How many reloads there have been.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether any user is configured (else everyone may do everything).
    pub fn has_users(&self) -> bool {
        !self.current().users.is_empty()
    }

    /// What a client that logs in as `user` is told, and the log warned
    /// of, when no users are configured: its credentials are not checked.
    /// `None` when they are (or none were given).
    pub fn unchecked(&self, user: &str, serial: u64) -> Option<String> {
        if user.is_empty() || self.has_users() {
            return None;
        }
        log::warn!(
            "connection {serial} logs in as '{user}', but no users are configured \
             ([[auth.users]]): its credentials are not checked"
        );
        Some(format!(
            "authentication is off: no users are configured, so the credentials \
             for '{user}' were not checked"
        ))
    }

    fn current(&self) -> Arc<Users> {
        read(&self.users).clone()
    }

    /// Logs a connection from `peer` in. Returns the principal if that
    /// takes no password check; otherwise `done` gets the outcome later, a
    /// failure only after the configured delay.
    pub fn login(
        &self,
        user: &str,
        password: &str,
        peer: Option<IpAddr>,
        done: LoginDone,
    ) -> Option<Principal> {
        if let Some(principal) = self.current().at_once(user) {
            return Some(principal);
        }
        self.check(user, password, peer, done);
        None
    }

    /// Checks a user's password on the auth thread, like any login:
    /// `done` gets the outcome, a failure after the delay. For the
    /// management interface, which takes no anonymous requests.
    pub fn check(&self, user: &str, password: &str, peer: Option<IpAddr>, done: LoginDone) {
        let job = Job {
            user: user.to_owned(),
            password: password.to_owned(),
            peer,
            done,
        };
        let jobs = lock(&self.jobs);
        match jobs.as_ref().map(|tx| tx.send(job)) {
            Some(Ok(())) => {}
            Some(Err(mpsc::SendError(job))) => (job.done)(Err(LoginError::Stopping)),
            None => {}
        }
    }
}

impl Drop for Authenticator {
    fn drop(&mut self) {
        lock(&self.jobs).take();
        let thread = lock(&self.thread).take();
        // The last reference to the server can go on the auth thread
        // itself (in a login's completion); it cannot wait for itself.
        if let Some(thread) = thread.filter(|t| t.thread().id() != std::thread::current().id()) {
            let _ = thread.join();
        }
    }
}

/// The auth thread: checks one login at a time, those from addresses
/// without recent failures first; holds failures back.
fn run(jobs: Receiver<Job>, users: Arc<RwLock<Arc<Users>>>) {
    let mut failed: VecDeque<(Instant, LoginDone, LoginError)> = VecDeque::new();
    let (mut fresh, mut suspect) = (VecDeque::new(), VecDeque::new());
    let mut throttle = {
        let u = read(&users);
        Throttle::new(u.failure_window, u.max_failures)
    };
    loop {
        let now = Instant::now();
        while failed.front().is_some_and(|(due, ..)| *due <= now) {
            if let Some((_, done, why)) = failed.pop_front() {
                done(Err(why));
            }
        }
        // Take in everything waiting, then wait only if there is no work.
        let mut incoming: Vec<Job> = jobs.try_iter().collect();
        if incoming.is_empty() && fresh.is_empty() && suspect.is_empty() {
            let next = match failed.front() {
                Some((due, ..)) => jobs.recv_timeout(due.saturating_duration_since(now)),
                None => jobs.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match next {
                Ok(job) => incoming.push(job),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        for job in incoming {
            match throttle.suspect(&job.user, job.peer, now) {
                true => suspect.push_back(job),
                false => fresh.push_back(job),
            }
        }
        let Some(job) = fresh.pop_front().or_else(|| suspect.pop_front()) else {
            continue;
        };
        let users = read(&users).clone();
        // A reload may have changed the rules.
        throttle.window = users.failure_window;
        throttle.max_failures = users.max_failures;
        let from = job
            .peer
            .map_or_else(|| "an unknown address".to_owned(), |ip| ip.to_string());
        if let Some(retry_after) = throttle.blocked(&job.user, job.peer, now) {
            log::warn!(
                "login as '{}' from {from} refused unchecked: too many failures",
                job.user
            );
            let why = LoginError::Throttled {
                user: job.user,
                from,
                retry_after,
            };
            failed.push_back((now + users.delay, job.done, why));
            continue;
        }
        match users.verify(&job.user, &job.password) {
            Ok(principal) => (job.done)(Ok(principal)),
            Err(why) => {
                log::warn!("failed login as '{}' from {from}: {why}", job.user);
                // No name is no guess: it locks nobody out.
                if why != LoginError::NameRequired {
                    throttle.failed(&job.user, job.peer, Instant::now());
                }
                failed.push_back((Instant::now() + users.delay, job.done, why));
            }
        }
    }
    // Stopping: answer whoever still waits.
    for job in fresh.into_iter().chain(suspect) {
        (job.done)(Err(LoginError::Stopping));
    }
    for (_, done, why) in failed {
        done(Err(why));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AuthSection {
        let mut c = AuthSection::default();
        c.roles.insert(
            "orders".into(),
            RoleEntry {
                publish: vec!["queue:orders.#".into(), "topic:events.*".into()],
                consume: vec!["sales.#".into()],
                ..RoleEntry::default()
            },
        );
        c.users.push(UserEntry {
            name: "alice".into(),
            password: hash_password("secret").unwrap(),
            roles: vec!["orders".into()],
        });
        c
    }

    #[test]
    fn the_throttle_counts_failures_per_user_and_address_within_its_window() {
        let mut t = Throttle::new(Duration::from_secs(60), 3);
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let now = Instant::now();
        assert!(!t.suspect("alice", Some(a), now));
        t.failed("alice", Some(a), now);
        assert!(t.suspect("alice", Some(a), now) && t.blocked("alice", Some(a), now).is_none());
        t.failed("alice", Some(a), now);
        let then = now + Duration::from_secs(10);
        t.failed("alice", Some(a), then);
        assert_eq!(
            t.blocked("alice", Some(a), then + Duration::from_secs(5)),
            Some(Duration::from_secs(55)),
            "locked out until the last failure ages out"
        );
        assert!(
            !t.suspect("alice", Some(b), now),
            "another address is not touched"
        );
        assert!(!t.suspect("bob", Some(a), now), "nor another user");
        let later = then + Duration::from_secs(61);
        assert!(!t.suspect("alice", Some(a), later), "failures age out");
        t.failed("alice", Some(a), later);
        assert!(
            t.blocked("alice", Some(a), later).is_none(),
            "and the count starts again"
        );
        t.failed("alice", None, now);
        assert!(
            !t.suspect("alice", None, now),
            "an unknown address is never held back"
        );
    }

    #[test]
    fn a_login_from_a_fresh_address_goes_before_a_guessing_one() {
        let mut c = config();
        c.failed_login_delay_ms = 0;
        c.max_failed_logins = 5;
        let auth = Authenticator::start(&c).unwrap();
        let (tx, rx) = mpsc::channel();
        let answer = |who: &'static str| -> LoginDone {
            let tx = tx.clone();
            Box::new(move |r: Result<Principal, LoginError>| {
                let _ = tx.send((who, r.map(|_| ()).map_err(|e| e.to_string())));
            })
        };
        let guesser: IpAddr = "10.0.0.9".parse().unwrap();
        let user: IpAddr = "10.0.0.1".parse().unwrap();
        // One failure marks the guesser; wait for it to be counted.
        auth.check("alice", "guess", Some(guesser), answer("guesser"));
        assert!(rx.recv().unwrap().1.is_err());
        for _ in 0..20 {
            auth.check("alice", "guess", Some(guesser), answer("guesser"));
        }
        auth.check("alice", "secret", Some(user), answer("user"));
        let order: Vec<_> = (0..21).map(|_| rx.recv().unwrap()).collect();
        let first_user = order.iter().position(|(who, _)| *who == "user").unwrap();
        // At most the guesses the thread took before the user's login was
        // queued (a loaded machine may delay the test thread a little).
        assert!(first_user <= 3, "the user waited for {first_user} guesses");
        assert!(order[first_user].1.is_ok());
        // Past max_failed_logins, guesses are refused without a check.
        let refused = order
            .iter()
            .filter(|(who, r)| {
                *who == "guesser" && r.as_ref().is_err_and(|e| e.contains("too many"))
            })
            .count();
        assert!(refused >= 15, "{refused} refused unchecked");
    }

    #[test]
    fn passwords_verify_and_wrong_ones_do_not() {
        let users = Users::from_config(&config()).unwrap();
        let alice = users.verify("alice", "secret").unwrap();
        assert_eq!(alice.user, "alice");
        for (user, password) in [("alice", "Secret"), ("bob", "secret"), ("", "")] {
            assert!(users.verify(user, password).is_err(), "{user}/{password}");
        }
        assert!(
            users.at_once("").is_some(),
            "anonymous allowed unless required"
        );
        assert!(users.at_once("alice").is_none(), "a named user is checked");
    }

    #[test]
    fn permissions_follow_kinds_and_patterns() {
        let users = Users::from_config(&config()).unwrap();
        let p = &users.verify("alice", "secret").unwrap().permissions;
        let (q, t) = (DestinationKind::Queue, DestinationKind::Topic);
        assert!(p.allows(Permission::Publish, q, "orders.eu"));
        assert!(
            !p.allows(Permission::Publish, t, "orders.eu"),
            "queue: only"
        );
        assert!(p.allows(Permission::Publish, t, "events.new"));
        assert!(!p.allows(Permission::Publish, t, "events.new.x"));
        assert!(p.allows(Permission::Consume, t, "sales.*"));
        assert!(p.allows(Permission::Consume, q, "sales.eu"));
        assert!(!p.allows(Permission::Consume, t, "#"));
        assert!(!p.allows(Permission::Browse, q, "orders.eu"));
        assert!(!p.is_admin());
        let e = users
            .verify("alice", "secret")
            .unwrap()
            .check(Permission::Browse, q, "orders.eu")
            .unwrap_err();
        assert_eq!(
            (e.permission, e.target.as_str()),
            (Permission::Browse, "orders.eu")
        );
        assert_eq!(
            e.to_string(),
            "user 'alice' lacks the 'browse' permission for queue 'orders.eu'"
        );
    }

    #[test]
    fn bad_auth_config_is_refused_by_key() {
        let mut c = config();
        c.users[0].password = "plain text".into();
        assert_eq!(
            Users::from_config(&c).err().unwrap().key,
            "auth.users.password"
        );
        let mut c = config();
        c.users[0].roles = vec!["nobody".into()];
        assert_eq!(
            Users::from_config(&c).err().unwrap().key,
            "auth.users.roles"
        );
        let mut c = config();
        c.users.push(c.users[0].clone());
        assert_eq!(Users::from_config(&c).err().unwrap().key, "auth.users.name");
        let mut c = config();
        c.roles.get_mut("orders").unwrap().browse = vec!["queues:x".into()];
        assert_eq!(Users::from_config(&c).err().unwrap().key, "auth.roles");
        let mut c = config();
        c.roles.get_mut("orders").unwrap().browse = vec!["a..b".into()];
        assert_eq!(Users::from_config(&c).err().unwrap().key, "auth.roles");
    }
}

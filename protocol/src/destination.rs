//! Destination names and subscription patterns.
//!
//! A name is dot-separated words: `sales.europe.smartphone`. Words are
//! non-empty and hold no `*`, `#`, white space or control characters. A
//! pattern is a name whose words may also be the wildcards of ActiveMQ
//! Artemis: `*` matches exactly one word, `#` matches zero or more words.

use std::fmt;

use crate::error::Error;

/// Longest name or pattern accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Whether a destination is a topic (every subscriber gets a copy) or a
/// queue (one consumer gets each message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DestinationKind {
    /// Publish/subscribe.
    Topic = 0,
    /// Point-to-point.
    Queue = 1,
}

impl DestinationKind {
    /// `"topic"` or `"queue"`, as URIs and people name it.
    pub fn as_str(self) -> &'static str {
        match self {
            DestinationKind::Topic => "topic",
            DestinationKind::Queue => "queue",
        }
    }

    /// The kind for its wire byte.
    pub fn from_u8(b: u8) -> Result<DestinationKind, Error> {
        match b {
            0 => Ok(DestinationKind::Topic),
            1 => Ok(DestinationKind::Queue),
            _ => Err(Error::invalid(
                "destination kind",
                format!("{b} is not 0 (topic) or 1 (queue)"),
            )),
        }
    }
}

/// A topic or queue, by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// Topic or queue.
    pub kind: DestinationKind,
    /// The dot-separated name (or, for a subscription, pattern).
    pub name: String,
}

impl Destination {
    /// A topic.
    pub fn topic(name: impl Into<String>) -> Destination {
        Destination {
            kind: DestinationKind::Topic,
            name: name.into(),
        }
    }

    /// A queue.
    pub fn queue(name: impl Into<String>) -> Destination {
        Destination {
            kind: DestinationKind::Queue,
            name: name.into(),
        }
    }
}

/// Every temporary destination's name starts with this, then the id of
/// the connection that made it and a dot: `temp.<connection id>.<rest>`.
/// Only that connection consumes a temporary queue or subscribes to a
/// temporary topic, and both end with it.
pub const TEMPORARY_PREFIX: &str = "temp.";

/// Whether `name` (or a pattern) is a temporary destination's.
pub fn is_temporary(name: &str) -> bool {
    name.starts_with(TEMPORARY_PREFIX)
}

/// The id of the connection that owns the temporary destination `name`,
/// if it is one.
pub fn temporary_owner(name: &str) -> Option<u64> {
    let rest = name.strip_prefix(TEMPORARY_PREFIX)?;
    rest.split('.').next()?.parse().ok()
}

/// The prefix of the temporary destinations of connection `id`.
pub fn temporary_prefix(id: impl std::fmt::Display) -> String {
    format!("{TEMPORARY_PREFIX}{id}.")
}

impl Destination {
    /// Whether this is a temporary queue or topic (see
    /// [`TEMPORARY_PREFIX`]).
    pub fn is_temporary(&self) -> bool {
        is_temporary(&self.name)
    }

    /// `queue://name` or `topic://name`, as a destination prints; a bare
    /// name is a topic. Any other scheme is refused, naming the two.
    pub fn from_uri(text: &str) -> Result<Destination, Error> {
        Destination::from_uri_or(text, DestinationKind::Topic)
    }

    /// `queue://name` or `topic://name`; a bare name is of kind `bare`.
    /// Everything that takes a destination from a person (the CLI's
    /// verbs, the management API) reads it here, so that the two
    /// schemes mean the same everywhere.
    pub fn from_uri_or(text: &str, bare: DestinationKind) -> Result<Destination, Error> {
        if let Some(name) = text.strip_prefix("queue://") {
            return Ok(Destination::queue(name));
        }
        if let Some(name) = text.strip_prefix("topic://") {
            return Ok(Destination::topic(name));
        }
        if let Some((scheme, _)) = text.split_once("://") {
            return Err(Error::invalid(
                "destination",
                format!(
                    "'{text}' has the unknown scheme '{scheme}://': use queue://NAME or topic://NAME"
                ),
            ));
        }
        Ok(Destination {
            kind: bare,
            name: text.to_owned(),
        })
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.kind.as_str(), self.name)
    }
}

fn check_common(s: &str, field: &'static str) -> Result<(), Error> {
    if s.is_empty() {
        return Err(Error::invalid(field, "empty"));
    }
    if s.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            field,
            format!("{} bytes long, at most {MAX_NAME_LEN}", s.len()),
        ));
    }
    if let Some(c) = s.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid(
            field,
            format!("'{s}' contains the character {c:?}"),
        ));
    }
    if let Some(i) = s.split('.').position(str::is_empty) {
        return Err(Error::invalid(
            field,
            format!("'{s}' has an empty word at position {}", i + 1),
        ));
    }
    Ok(())
}

/// The common case in one pass over the bytes: printable ASCII, no empty
/// word, no wildcard. Anything else takes the slower checks, which also
/// say what is wrong.
fn plain_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > MAX_NAME_LEN || b[0] == b'.' || b[b.len() - 1] == b'.' {
        return false;
    }
    // No early exit: a branch-free pass over a name that is almost always
    // plain is cheaper than one that stops early.
    let mut plain = true;
    let mut previous = 0;
    for &c in b {
        plain &= PLAIN[c as usize] & !(c == b'.' && previous == b'.');
        previous = c;
    }
    plain
}

/// Which bytes a plain name may hold: printable ASCII but the wildcards.
const PLAIN: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0x21;
    while c < 0x7f {
        table[c] = c != b'*' as usize && c != b'#' as usize;
        c += 1;
    }
    table
};

/// Checks a destination name: a publish target, no wildcards.
pub fn validate_name(name: &str) -> Result<(), Error> {
    if plain_name(name) {
        return Ok(());
    }
    check_common(name, "destination")?;
    if name.contains(['*', '#']) {
        return Err(Error::invalid(
            "destination",
            format!("'{name}' contains a wildcard; only subscriptions may use * and #"),
        ));
    }
    Ok(())
}

/// One word of a pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PatternWord {
    /// Matches this word exactly.
    Literal(String),
    /// `*`: exactly one word.
    Star,
    /// `#`: zero or more words.
    Hash,
}

/// A parsed subscription pattern.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Pattern {
    words: Vec<PatternWord>,
}

impl Pattern {
    /// Parses and checks a pattern; `*` and `#` must be whole words.
    /// Consecutive `#`s match what one does, so they become one.
    pub fn parse(pattern: &str) -> Result<Pattern, Error> {
        check_common(pattern, "pattern")?;
        let mut words = Vec::new();
        for w in pattern.split('.') {
            let word = match w {
                "*" => PatternWord::Star,
                "#" if words.last() == Some(&PatternWord::Hash) => continue,
                "#" => PatternWord::Hash,
                w if w.contains(['*', '#']) => {
                    return Err(Error::invalid(
                        "pattern",
                        format!("'{pattern}': wildcards must be whole words, not part of '{w}'"),
                    ))
                }
                w => PatternWord::Literal(w.to_owned()),
            };
            words.push(word);
        }
        Ok(Pattern { words })
    }

    /// The words, in order.
    pub fn words(&self) -> &[PatternWord] {
        &self.words
    }

    /// Whether the pattern has any wildcard.
    pub fn is_wildcard(&self) -> bool {
        self.words
            .iter()
            .any(|w| !matches!(w, PatternWord::Literal(_)))
    }

    /// Whether `name` matches. The broker's topic tree does the same for
    /// many patterns at once; this is the reference for one.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<&str> = name.split('.').collect();
        matches_words(&self.words, &name)
    }

    /// Whether every name `other` matches is matched by this pattern too
    /// (a permission for `sales.#` covers a subscription to `sales.*`).
    /// Conservative: a `#` in `other` is only covered by a `#`.
    pub fn covers(&self, other: &Pattern) -> bool {
        covers_words(&self.words, &other.words)
    }
}

/// Whether pattern `p` covers pattern `q`, by dynamic programming over
/// (word of `p`, word of `q`): O(|p| |q|) however many `#`s either has.
fn covers_words(p: &[PatternWord], q: &[PatternWord]) -> bool {
    // covered[j]: p[i..] covers q[j..], for the row i being filled.
    let mut covered: Vec<bool> = (0..=q.len()).map(|j| j == q.len()).collect();
    for word in p.iter().rev() {
        let below = covered.clone();
        for j in (0..=q.len()).rev() {
            covered[j] = match word {
                // `#` takes q[j..k] for any k: p[i+1..] covers some q[k..].
                PatternWord::Hash => below[j] || (j < q.len() && covered[j + 1]),
                PatternWord::Star => {
                    j < q.len()
                        && matches!(q[j], PatternWord::Star | PatternWord::Literal(_))
                        && below[j + 1]
                }
                PatternWord::Literal(w) => {
                    j < q.len()
                        && matches!(&q[j], PatternWord::Literal(v) if v == w)
                        && below[j + 1]
                }
            };
        }
    }
    covered[0]
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.words.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            match w {
                PatternWord::Star => f.write_str("*")?,
                PatternWord::Hash => f.write_str("#")?,
                PatternWord::Literal(l) => f.write_str(l)?,
            }
        }
        Ok(())
    }
}

/// Whether `pattern` matches `name`, by following every place in the
/// pattern the words so far can have reached (an NFA): O(|pattern| |name|)
/// however many `#`s the pattern has.
fn matches_words(pattern: &[PatternWord], name: &[&str]) -> bool {
    let mut at = vec![false; pattern.len() + 1];
    at[0] = true;
    close(pattern, &mut at);
    for word in name {
        let mut next = vec![false; pattern.len() + 1];
        for (i, p) in pattern.iter().enumerate().filter(|(i, _)| at[*i]) {
            match p {
                PatternWord::Hash => next[i] = true,
                PatternWord::Star => next[i + 1] = true,
                PatternWord::Literal(w) if w == word => next[i + 1] = true,
                PatternWord::Literal(_) => {}
            }
        }
        at = next;
        close(pattern, &mut at);
    }
    at[pattern.len()]
}

/// Adds the places reached by letting each `#` match no word.
fn close(pattern: &[PatternWord], at: &mut [bool]) {
    for (i, p) in pattern.iter().enumerate() {
        if at[i] && *p == PatternWord::Hash {
            at[i + 1] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_their_kind_and_unknown_schemes_are_refused() {
        assert_eq!(
            Destination::from_uri("queue://a.b"),
            Ok(Destination::queue("a.b"))
        );
        assert_eq!(
            Destination::from_uri("topic://a"),
            Ok(Destination::topic("a"))
        );
        assert_eq!(Destination::from_uri("a.b"), Ok(Destination::topic("a.b")));
        assert_eq!(
            Destination::from_uri_or("a.b", DestinationKind::Queue),
            Ok(Destination::queue("a.b"))
        );
        assert_eq!(
            Destination::from_uri_or("topic://a", DestinationKind::Queue),
            Ok(Destination::topic("a"))
        );
        let e = Destination::from_uri("quee://a").unwrap_err().to_string();
        assert!(
            e.contains("'quee://'") && e.contains("queue://NAME or topic://NAME"),
            "{e}"
        );
    }

    fn m(p: &str, n: &str) -> bool {
        Pattern::parse(p).unwrap().matches(n)
    }

    fn covers(p: &str, q: &str) -> bool {
        Pattern::parse(p)
            .unwrap()
            .covers(&Pattern::parse(q).unwrap())
    }

    #[test]
    fn coverage_between_patterns() {
        for (p, q) in [
            ("#", "a.b"),
            ("#", "#"),
            ("sales.#", "sales"),
            ("sales.#", "sales.*"),
            ("sales.#", "sales.eu.#"),
            ("sales.*", "sales.eu"),
            ("sales.*", "sales.*"),
            ("*.eu", "sales.eu"),
            ("a.#.z", "a.b.*.z"),
        ] {
            assert!(covers(p, q), "{p} covers {q}");
        }
        for (p, q) in [
            ("sales.*", "sales.#"),
            ("sales.*", "sales.eu.x"),
            ("sales.eu", "sales.*"),
            ("sales.#", "other"),
            ("*", "#"),
            ("a.#.z", "a.#"),
        ] {
            assert!(!covers(p, q), "{p} does not cover {q}");
        }
    }

    #[test]
    fn wildcards_follow_artemis() {
        assert!(m("sales.europe.#", "sales.europe"));
        assert!(m("sales.europe.#", "sales.europe.smartphone.red"));
        assert!(!m("sales.europe.#", "sales.asia.smartphone"));
        assert!(m("sales.*.smartphone", "sales.asia.smartphone"));
        assert!(!m("sales.*.smartphone", "sales.smartphone"));
        assert!(!m("sales.*", "sales.europe.smartphone"));
        assert!(m("#", "anything.at.all"));
        assert!(m("#.smartphone", "smartphone"));
        assert!(m("a.#.b", "a.b"));
        assert!(m("a.#.b", "a.x.y.b"));
        assert!(!m("a.#.b", "a.x.y"));
        assert!(m("sales", "sales"));
        assert!(!m("sales", "sales.europe"));
    }

    #[test]
    fn repeated_hashes_collapse_and_cost_polynomial_time() {
        let p = Pattern::parse("a.#.#.#.b").unwrap();
        assert_eq!(p.to_string(), "a.#.b");
        assert_eq!(p, Pattern::parse("a.#.b").unwrap());
        // Separated by `*`s they cannot collapse; matching still walks
        // each (place, word) pair once. Exponentially, this took hours.
        let nasty = format!("{}z", "#.*.".repeat(60));
        let topic = vec!["a"; 300].join(".");
        assert!(!m(&nasty, &topic));
        assert!(m(&nasty, &format!("{topic}.z")));
        let hashes = format!("{}z", "#.".repeat(20));
        let forty = vec!["w"; 40].join(".");
        assert!(!m(&hashes, &forty));
        // Coverage (permission checks) the same way.
        let grant = format!("a.{}q", "#.*.".repeat(60));
        let wanted = format!("a.{}.z", vec!["*"; 200].join("."));
        assert!(!covers(&grant, &wanted));
        assert!(covers(
            "a.#",
            &format!("a.{}", "#.*.".repeat(60).trim_end_matches('.'))
        ));
    }

    #[test]
    fn rejects_bad_names_and_patterns() {
        for bad in ["", "a..b", ".a", "a.", "a b", "a.*", "a.#", "a\u{7}"] {
            assert!(validate_name(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "a..b", "a.b*", "#a", "a b"] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?}");
        }
        assert!(validate_name(&"a".repeat(MAX_NAME_LEN + 1)).is_err());
        validate_name("sales.europe.smartphone").unwrap();
        assert!(Pattern::parse("sales.*.#").unwrap().is_wildcard());
    }

    #[test]
    fn the_fast_check_never_accepts_what_the_full_one_refuses() {
        let names = [
            "sales",
            "a.b.c",
            "a-b_c.D9",
            "café.menu",
            "a\u{2003}b",
            "a\tb",
            "~x",
            "a..b",
            ".",
            "*",
            "a.#",
            "x\u{7f}",
        ];
        for name in names {
            let full = check_common(name, "destination").is_ok() && !name.contains(['*', '#']);
            assert!(!plain_name(name) || full, "{name:?}");
            assert_eq!(validate_name(name).is_ok(), full, "{name:?}");
        }
    }
}

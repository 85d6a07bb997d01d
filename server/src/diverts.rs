//! Diverts (`[[diverts]]`), as Artemis's and RabbitMQ's exchange-to-queue
//! bindings: a copy of every message published to a destination that
//! `from` matches (and `selector` selects) is filed into `to` by the
//! broker itself, with no subscription held open by a client. An
//! exclusive divert takes the message away from where it was sent.
//!
//! A copy is diverted again by the diverts its new destination matches;
//! a chain that comes back to where it started is refused when the
//! diverts are read, so that routing always ends.

use std::sync::Arc;

use herald_protocol::destination::Pattern;
use herald_protocol::message::MessageRef;
use herald_protocol::selector::{Selector, SelectorLimits};
use herald_protocol::{Destination, DestinationKind};
use serde::{Deserialize, Serialize};

/// One `[[diverts]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DivertRule {
    /// Its name, unique: how the management interface names it.
    pub name: String,
    /// `topic://PATTERN` or `queue://PATTERN`: the destinations whose
    /// messages it copies.
    pub from: String,
    /// `queue://NAME` or `topic://NAME`: where the copies go.
    pub to: String,
    /// A JMS selector: only the messages it selects; empty = all.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// The message goes to `to` only, not where it was sent.
    #[serde(default)]
    pub exclusive: bool,
}

/// A divert, parsed.
#[derive(Debug)]
pub struct Divert {
    /// As configured.
    pub rule: DivertRule,
    from_kind: DestinationKind,
    from: Pattern,
    /// Where its copies go.
    pub to: Destination,
    selector: Option<Arc<Selector>>,
}

impl Divert {
    fn parse(rule: &DivertRule, limits: &SelectorLimits) -> Result<Divert, (&'static str, String)> {
        let name = &rule.name;
        if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
            return Err(("name", format!("{name:?}: 1 to 256 printable characters")));
        }
        let (from_kind, pattern) = scheme(&rule.from).map_err(|why| ("from", why))?;
        let from =
            Pattern::parse(pattern).map_err(|e| ("from", format!("'{}': {e}", rule.from)))?;
        let (to_kind, to_name) = scheme(&rule.to).map_err(|why| ("to", why))?;
        herald_protocol::destination::validate_name(to_name)
            .map_err(|e| ("to", format!("'{}': {e}", rule.to)))?;
        if herald_protocol::destination::is_temporary(to_name) {
            return Err(("to", format!("'{}': a temporary destination", rule.to)));
        }
        let selector = match rule.selector.trim() {
            "" => None,
            text => Some(Arc::new(
                Selector::parse_within(text, limits)
                    .map_err(|e| ("selector", format!("{text:?}: {e}")))?,
            )),
        };
        Ok(Divert {
            rule: rule.clone(),
            from_kind,
            from,
            to: Destination {
                kind: to_kind,
                name: to_name.to_owned(),
            },
            selector,
        })
    }

    /// Whether it copies messages sent to `name` of `kind`, whatever they
    /// hold.
    fn covers(&self, kind: DestinationKind, name: &str) -> bool {
        self.from_kind == kind && self.from.matches(name)
    }

    /// Whether its selector (if any) selects the message in `block`.
    fn selects(&self, block: &[u8]) -> bool {
        match &self.selector {
            None => true,
            Some(s) => MessageRef::read(block).is_ok_and(|m| s.matches_delivery(&m, 1)),
        }
    }
}

/// `queue://` or `topic://` and what follows.
fn scheme(uri: &str) -> Result<(DestinationKind, &str), String> {
    match uri.split_once("://") {
        Some(("queue", rest)) => Ok((DestinationKind::Queue, rest)),
        Some(("topic", rest)) => Ok((DestinationKind::Topic, rest)),
        _ => Err(format!("'{uri}': queue://NAME or topic://NAME")),
    }
}

/// Every divert in force.
#[derive(Debug, Default)]
pub struct Diverts {
    list: Vec<Divert>,
}

impl Diverts {
    /// The diverts of `rules`, or why one is wrong: (index, key, reason).
    pub fn new(
        rules: &[DivertRule],
        limits: &SelectorLimits,
    ) -> Result<Diverts, (usize, &'static str, String)> {
        let mut list: Vec<Divert> = Vec::with_capacity(rules.len());
        for (i, rule) in rules.iter().enumerate() {
            let d = Divert::parse(rule, limits).map_err(|(key, why)| (i, key, why))?;
            if list.iter().any(|o| o.rule.name == rule.name) {
                return Err((i, "name", format!("'{}' names two diverts", rule.name)));
            }
            list.push(d);
        }
        let diverts = Diverts { list };
        if let Some((i, path)) = diverts.find_loop() {
            return Err((i, "to", format!("a loop: {}", path.join(" -> "))));
        }
        Ok(diverts)
    }

    /// A chain of diverts that comes back to where it started, if there
    /// is one: the first divert's index, and the destinations on the way.
    fn find_loop(&self) -> Option<(usize, Vec<String>)> {
        // next[i]: the diverts that divert i's copies go through next.
        let next: Vec<Vec<usize>> = self
            .list
            .iter()
            .map(|d| {
                (0..self.list.len())
                    .filter(|&j| self.list[j].covers(d.to.kind, &d.to.name))
                    .collect()
            })
            .collect();
        // Depth first, colouring: 0 unseen, 1 on the path, 2 done.
        let mut colour = vec![0u8; self.list.len()];
        let mut path = Vec::new();
        for start in 0..self.list.len() {
            if colour[start] == 0 && self.visit(start, &next, &mut colour, &mut path) {
                let names = path
                    .iter()
                    .map(|&i: &usize| self.list[i].rule.from.clone())
                    .chain(path.first().map(|&i| self.list[i].rule.from.clone()))
                    .collect();
                return Some((path[0], names));
            }
        }
        None
    }

    fn visit(
        &self,
        at: usize,
        next: &[Vec<usize>],
        colour: &mut [u8],
        path: &mut Vec<usize>,
    ) -> bool {
        colour[at] = 1;
        path.push(at);
        for &j in &next[at] {
            if colour[j] == 1 {
                // The loop is the path from j on.
                let from = path.iter().position(|&k| k == j).unwrap_or(0);
                path.drain(..from);
                return true;
            }
            if colour[j] == 0 && self.visit(j, next, colour, path) {
                return true;
            }
        }
        path.pop();
        colour[at] = 2;
        false
    }

    /// Whether there are none (the publish path then pays nothing more).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The diverts that take the message in `block`, sent to `name` of
    /// `kind`.
    pub fn taking<'a>(
        &'a self,
        kind: DestinationKind,
        name: &'a str,
        block: &'a [u8],
    ) -> impl Iterator<Item = &'a Divert> + 'a {
        self.list
            .iter()
            .filter(move |d| d.covers(kind, name) && d.selects(block))
    }

    /// Every divert, as configured.
    pub fn rules(&self) -> impl Iterator<Item = &DivertRule> {
        self.list.iter().map(|d| &d.rule)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, from: &str, to: &str) -> DivertRule {
        DivertRule {
            name: name.into(),
            from: from.into(),
            to: to.into(),
            selector: String::new(),
            exclusive: false,
        }
    }

    fn diverts(rules: &[DivertRule]) -> Result<Diverts, (usize, &'static str, String)> {
        Diverts::new(rules, &SelectorLimits::default())
    }

    #[test]
    fn a_divert_takes_what_its_pattern_and_selector_take() {
        let mut eu = rule("eu", "topic://sales.#", "queue://eu-orders");
        eu.selector = "region = 'EU'".into();
        let d = diverts(&[eu, rule("all", "queue://in", "topic://audit")]).unwrap();
        let block = |region: &str| {
            let mut m = herald_protocol::Message::text("x").with_property("region", region);
            m.set_destination(Some(Destination::topic("sales.eu")));
            let mut b = bytes::BytesMut::new();
            m.encode(&mut b).unwrap();
            b.freeze()
        };
        let (eu_block, us_block) = (block("EU"), block("US"));
        let names = |kind, name, b: &[u8]| -> Vec<String> {
            d.taking(kind, name, b)
                .map(|d| d.rule.name.clone())
                .collect()
        };
        assert_eq!(names(DestinationKind::Topic, "sales.eu", &eu_block), ["eu"]);
        assert!(names(DestinationKind::Topic, "sales.eu", &us_block).is_empty());
        assert!(names(DestinationKind::Queue, "sales.eu", &eu_block).is_empty());
        assert_eq!(names(DestinationKind::Queue, "in", &us_block), ["all"]);
    }

    #[test]
    fn loops_and_bad_entries_are_refused_naming_the_key() {
        let (i, key, why) = diverts(&[
            rule("ab", "queue://a", "queue://b"),
            rule("bc", "queue://b", "topic://c.x"),
            rule("ca", "topic://c.*", "queue://a"),
        ])
        .unwrap_err();
        assert_eq!((i, key), (0, "to"));
        assert!(
            why.contains("queue://a -> queue://b -> topic://c.* -> queue://a"),
            "{why}"
        );
        // A chain that ends is fine.
        diverts(&[
            rule("ab", "queue://a", "queue://b"),
            rule("bc", "queue://b", "queue://c"),
        ])
        .unwrap();
        let refused = |r: DivertRule| diverts(&[r]).unwrap_err().1;
        assert_eq!(refused(rule("x", "sales.#", "queue://q")), "from");
        assert_eq!(refused(rule("x", "topic://a.b*", "queue://q")), "from");
        assert_eq!(refused(rule("x", "topic://a", "queue://a b")), "to");
        assert_eq!(refused(rule("x", "topic://a", "queue://q.#")), "to");
        assert_eq!(refused(rule("", "topic://a", "queue://q")), "name");
        let mut bad = rule("x", "topic://a", "queue://q");
        bad.selector = "a = = 1".into();
        assert_eq!(refused(bad), "selector");
        let twice = [
            rule("x", "topic://a", "queue://q"),
            rule("x", "topic://b", "queue://q"),
        ];
        assert_eq!(
            diverts(&twice).unwrap_err(),
            (1, "name", "'x' names two diverts".into())
        );
    }
}

//! Strict mode's declared topic tree.
//!
//! Declaring `sales.europe.smartphone` declares `sales` and `sales.europe`
//! too. A publish to an undeclared topic is refused with a message naming
//! the first word that is not declared, and under which parent.

use crate::collections::FastMap;

#[derive(Debug, Default)]
struct Node {
    children: FastMap<Box<str>, Node>,
}

/// The set of declared topics, as a tree of words.
#[derive(Debug, Default)]
pub struct DeclaredTopics {
    root: Node,
}

impl DeclaredTopics {
    /// A tree declaring every given name and its prefixes.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> DeclaredTopics {
        let mut t = DeclaredTopics::default();
        for name in names {
            let mut node = &mut t.root;
            for word in name.split('.') {
                node = node.children.entry(word.into()).or_default();
            }
        }
        t
    }

    /// Declares `name` and its prefixes.
    pub fn declare(&mut self, name: &str) {
        let mut node = &mut self.root;
        for word in name.split('.') {
            node = node.children.entry(word.into()).or_default();
        }
    }

    /// Removes `name` and everything under it; false if it was not
    /// declared.
    pub fn remove(&mut self, name: &str) -> bool {
        let (parent, last) = match name.rsplit_once('.') {
            Some((parent, last)) => (Some(parent), last),
            None => (None, name),
        };
        let mut node = &mut self.root;
        for word in parent.into_iter().flat_map(|p| p.split('.')) {
            match node.children.get_mut(word) {
                Some(child) => node = child,
                None => return false,
            }
        }
        node.children.remove(last).is_some()
    }

    /// Every declared topic, in order.
    pub fn names(&self) -> Vec<String> {
        fn walk(node: &Node, prefix: &str, out: &mut Vec<String>) {
            let mut words: Vec<&Box<str>> = node.children.keys().collect();
            words.sort();
            for word in words {
                let name = match prefix {
                    "" => word.to_string(),
                    p => format!("{p}.{word}"),
                };
                out.push(name.clone());
                walk(&node.children[word], &name, out);
            }
        }
        let mut out = Vec::new();
        walk(&self.root, "", &mut out);
        out
    }

    /// Ok if `topic` is declared; otherwise why not.
    pub fn check(&self, topic: &str) -> Result<(), Undeclared> {
        let mut node = &self.root;
        let mut parent = 0;
        for word in topic.split('.') {
            match node.children.get(word) {
                Some(child) => node = child,
                None => {
                    return Err(Undeclared {
                        topic: topic.to_owned(),
                        word: word.to_owned(),
                        parent: topic[..parent.max(1) - 1].to_owned(),
                    })
                }
            }
            parent += word.len() + 1;
        }
        Ok(())
    }
}

/// A topic outside strict mode's declared tree: its first word that is
/// not declared, under which declared parent ("" for a top-level one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("topic '{topic}' is not declared: {}", match parent.as_str() {
    "" => format!("'{word}' is not a declared top-level topic"),
    parent => format!("subtopic '{word}' is not declared under '{parent}'"),
})]
pub struct Undeclared {
    /// The topic.
    pub topic: String,
    /// Its first undeclared word.
    pub word: String,
    /// The declared topic that word is missing under.
    pub parent: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_missing_subtopic() {
        let t = DeclaredTopics::new(["sales.europe.smartphone", "sales.asia"]);
        assert!(t.check("sales").is_ok());
        assert!(t.check("sales.europe").is_ok());
        assert!(t.check("sales.europe.smartphone").is_ok());
        let missing = |topic| {
            let e = t.check(topic).unwrap_err();
            (e.word.clone(), e.parent.clone(), e.to_string())
        };
        let (word, parent, text) = missing("sales.africa.smartphone");
        assert_eq!((word.as_str(), parent.as_str()), ("africa", "sales"));
        assert!(
            text.contains("'africa'") && text.contains("under 'sales'"),
            "{text}"
        );
        let (word, parent, _) = missing("sales.europe.laptop");
        assert_eq!((word.as_str(), parent.as_str()), ("laptop", "sales.europe"));
        let (word, parent, text) = missing("weather");
        assert_eq!((word.as_str(), parent.as_str()), ("weather", ""));
        assert!(
            text.contains("'weather'") && text.contains("top-level"),
            "{text}"
        );
        assert!(DeclaredTopics::new([]).check("a").is_err());
    }
}

//! LIKE patterns, matched without backtracking.
//!
//! A pattern is split at its `%`s into segments of literal text and `_`s.
//! The first segment must match at the start, the last at the end, and
//! each one between at its leftmost place after the one before: taking
//! the leftmost place never loses a match, so no choice is ever undone.
//! A segment of plain text is found with a linear substring search; one
//! with `_`s is tried at each candidate place, and every comparison is
//! charged to the evaluation's budget, so the cost stays bounded.

use super::eval::Budget;

/// One piece of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// This text.
    Text(String),
    /// This many characters, whatever they are (`_`s).
    Any(usize),
}

/// The pieces between two `%`s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Segment {
    pieces: Vec<Piece>,
    /// Characters it matches: its text's and its `_`s.
    chars: usize,
}

impl Segment {
    fn push_char(&mut self, c: char) {
        self.chars += 1;
        match self.pieces.last_mut() {
            Some(Piece::Text(t)) => t.push(c),
            _ => self.pieces.push(Piece::Text(c.to_string())),
        }
    }

    fn push_any(&mut self) {
        self.chars += 1;
        match self.pieces.last_mut() {
            Some(Piece::Any(n)) => *n += 1,
            _ => self.pieces.push(Piece::Any(1)),
        }
    }

    /// Where a match of this segment starting at byte `at` of `s` ends.
    fn match_at(&self, s: &str, mut at: usize, budget: &mut Budget) -> Option<usize> {
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => {
                    if !budget.charge(t.len() as u64) || !s[at..].starts_with(t.as_str()) {
                        return None;
                    }
                    at += t.len();
                }
                Piece::Any(n) => {
                    if !budget.charge(*n as u64) {
                        return None;
                    }
                    at = skip_chars(s, at, *n)?;
                }
            }
        }
        Some(at)
    }

    /// The end of this segment's leftmost match in `s[from..to]`.
    fn find(&self, s: &str, from: usize, to: usize, budget: &mut Budget) -> Option<usize> {
        let window = &s[..to];
        if let [Piece::Text(t)] = self.pieces.as_slice() {
            let i = find_charged(window, from, t, budget)?;
            return Some(i + t.len());
        }
        let mut start = from;
        loop {
            // A segment that opens with text can only start where that
            // text is; one that opens with `_` may start anywhere.
            if let Some(Piece::Text(t)) = self.pieces.first() {
                start = find_charged(window, start, t, budget)?;
            }
            if let Some(end) = self.match_at(window, start, budget) {
                return Some(end);
            }
            start = skip_chars(window, start, 1)?;
            if budget.exhausted() {
                return None;
            }
        }
    }
}

/// Where `t` first occurs in `s` at or after byte `from`, charging the
/// bytes the search passed over.
fn find_charged(s: &str, from: usize, t: &str, budget: &mut Budget) -> Option<usize> {
    let found = s[from..].find(t);
    let scanned = found.map_or(s.len() - from, |i| i + t.len());
    if !budget.charge(scanned as u64) {
        return None;
    }
    found.map(|i| from + i)
}

/// The byte `n` characters after byte `at` of `s`.
fn skip_chars(s: &str, at: usize, n: usize) -> Option<usize> {
    if n == 0 {
        return Some(at);
    }
    let mut chars = s[at..].char_indices();
    chars.nth(n - 1).map(|(i, c)| at + i + c.len_utf8())
}

/// A compiled LIKE pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Like {
    /// The segments between `%`s; one when there is no `%`.
    segments: Vec<Segment>,
}

impl Like {
    /// Compiles `pattern`: `%` is any run of characters, `_` any one,
    /// and `escape` quotes the character after it.
    pub fn new(pattern: &str, escape: Option<char>) -> Result<Like, String> {
        let mut segments = vec![Segment::default()];
        let mut chars = pattern.chars();
        while let Some(c) = chars.next() {
            let segment = segments.last_mut().expect("never empty");
            if Some(c) == escape {
                match chars.next() {
                    Some(next) => segment.push_char(next),
                    None => return Err("LIKE pattern ends with its escape character".into()),
                }
            } else if c == '%' {
                segments.push(Segment::default());
            } else if c == '_' {
                segment.push_any();
            } else {
                segment.push_char(c);
            }
        }
        Ok(Like { segments })
    }

    /// Bytes it holds beyond its own size.
    pub fn memory(&self) -> usize {
        self.segments
            .iter()
            .map(|s| {
                std::mem::size_of::<Segment>()
                    + s.pieces
                        .iter()
                        .map(|p| match p {
                            Piece::Text(t) => std::mem::size_of::<Piece>() + t.len(),
                            Piece::Any(_) => std::mem::size_of::<Piece>(),
                        })
                        .sum::<usize>()
            })
            .sum()
    }

    /// Whether `s` matches, within `budget` (false once it runs out).
    pub fn is_match(&self, s: &str, budget: &mut Budget) -> bool {
        let (first, rest) = self.segments.split_first().expect("never empty");
        let Some((last, middle)) = rest.split_last() else {
            return first.match_at(s, 0, budget) == Some(s.len());
        };
        let Some(mut at) = first.match_at(s, 0, budget) else {
            return false;
        };
        // The last segment matches a fixed number of characters, so it
        // can only start that many characters before the end.
        let Some(tail) = start_of_last(s, last.chars, budget) else {
            return false;
        };
        if tail < at || last.match_at(s, tail, budget) != Some(s.len()) {
            return false;
        }
        for segment in middle.iter().filter(|m| m.chars > 0) {
            match segment.find(s, at, tail, budget) {
                Some(end) => at = end,
                None => return false,
            }
        }
        !budget.exhausted()
    }
}

/// The byte where the last `n` characters of `s` begin.
fn start_of_last(s: &str, n: usize, budget: &mut Budget) -> Option<usize> {
    if n == 0 {
        return Some(s.len());
    }
    if !budget.charge(n as u64) {
        return None;
    }
    s.char_indices().rev().nth(n - 1).map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn like(pattern: &str, s: &str) -> bool {
        Like::new(pattern, Some('\\'))
            .unwrap()
            .is_match(s, &mut Budget::new(u64::MAX))
    }

    #[test]
    fn wildcards_anchor_at_both_ends() {
        for (pattern, s, want) in [
            ("abc", "abc", true),
            ("abc", "abcd", false),
            ("a_c", "abc", true),
            ("a_c", "ac", false),
            ("a%", "a", true),
            ("%a", "ba", true),
            ("%a", "ab", false),
            ("%", "", true),
            ("%%", "x", true),
            ("_", "", false),
            ("_", "é", true),
            ("__", "é", false),
            ("%b%", "abc", true),
            ("%b%", "ac", false),
            ("a%b%c", "abc", true),
            ("a%b%c", "acbc", true),
            ("a%b%c", "acb", false),
            ("a%bc%bd", "abcbd", true),
            ("a%bc%bd", "abcd", false),
            ("a%bc%bd", "abcxbcbd", true),
            ("%a_b%", "xxaxbyy", true),
            ("%a_b%", "xxabyy", false),
            ("%_a_%", "xax", true),
            ("%_a_%", "ax", false),
            ("%_a_%", "xxa", false),
            ("%_a_%", "xxaxx", true),
            ("12%3", "123", true),
            ("12%3", "12993", true),
            ("12%3", "1234", false),
            ("%ab", "aab", true),
            ("a%a", "a", false),
            ("a%a", "aa", true),
            ("\\%%", "%x", true),
            ("\\%%", "x%", false),
            ("\\_", "_", true),
            ("\\_", "x", false),
        ] {
            assert_eq!(like(pattern, s), want, "{pattern:?} against {s:?}");
        }
    }

    #[test]
    fn a_pathological_pattern_costs_linear_time() {
        let pattern = format!("{}b", "%a".repeat(2000));
        let s = "a".repeat(300_000);
        let like = Like::new(&pattern, None).unwrap();
        let mut budget = Budget::new(u64::MAX);
        assert!(!like.is_match(&s, &mut budget));
        let mut budget = Budget::new(u64::MAX);
        let with_b = format!("{s}b");
        assert!(like.is_match(&with_b, &mut budget));
    }

    #[test]
    fn a_pattern_past_its_budget_does_not_match() {
        let like = Like::new("%a_b%", None).unwrap();
        let s = "a".repeat(100_000);
        let mut budget = Budget::new(10_000);
        assert!(!like.is_match(&s, &mut budget));
        assert!(budget.exhausted());
    }
}

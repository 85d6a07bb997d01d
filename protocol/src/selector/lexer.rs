//! Tokens of the selector language, each with its byte position.

use super::SelectorError;

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Ident(String),
    Str(String),
    Long(i64),
    Double(f64),
    /// A keyword, upper-cased: AND OR NOT BETWEEN LIKE IN IS NULL ESCAPE
    /// TRUE FALSE MATCHES.
    Kw(&'static str),
    /// An operator or punctuation: = <> < <= > >= + - * / ( ) ,
    Op(&'static str),
    End,
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Ident(name) => write!(f, "the identifier {name}"),
            Tok::Str(s) => write!(f, "the string '{}'", s.replace('\'', "''")),
            Tok::Long(n) => write!(f, "the number {n}"),
            Tok::Double(n) => write!(f, "the number {n}"),
            Tok::Kw(k) => write!(f, "the keyword {k}"),
            Tok::Op(op) => write!(f, "'{op}'"),
            Tok::End => write!(f, "the end"),
        }
    }
}

/// What people write for an operator in other languages, and what a
/// selector says instead.
const FOREIGN_OPS: [(&str, &str); 5] = [
    ("==", "use = for equality"),
    ("!=", "use <> for inequality"),
    ("&&", "use AND"),
    ("||", "use OR"),
    ("!", "use NOT"),
];

const KEYWORDS: [&str; 11] = [
    "AND", "OR", "NOT", "BETWEEN", "LIKE", "IN", "IS", "NULL", "ESCAPE", "TRUE", "FALSE",
];
const MATCHES: &str = "MATCHES";
const OPS: [&str; 13] = [
    "<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",",
];

/// Splits a selector into tokens; the last is always [`Tok::End`].
pub fn tokenize(src: &str) -> Result<Vec<(Tok, usize)>, SelectorError> {
    let bytes = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c == b'\'' {
            // '' inside a string is one quote.
            let mut s = String::new();
            i += 1;
            loop {
                let Some(rel) = src[i..].find('\'') else {
                    return Err(SelectorError::new(start, "unterminated string literal"));
                };
                s.push_str(&src[i..i + rel]);
                i += rel + 1;
                if bytes.get(i) == Some(&b'\'') {
                    s.push('\'');
                    i += 1;
                } else {
                    break;
                }
            }
            out.push((Tok::Str(s), start));
        } else if c.is_ascii_digit()
            || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            let (tok, len) = number(&src[i..]).map_err(|m| SelectorError::new(start, m))?;
            out.push((tok, start));
            i += len;
        } else if src[i..]
            .chars()
            .next()
            .is_some_and(|ch| ch.is_alphabetic() || ch == '_' || ch == '$')
        {
            // Not empty: the first character is one of the word's.
            let len = src[i..]
                .find(|ch: char| !(ch.is_alphanumeric() || ch == '_' || ch == '$'))
                .unwrap_or(src.len() - i);
            let word = &src[i..i + len];
            let upper = word.to_ascii_uppercase();
            let tok = match KEYWORDS.iter().find(|k| **k == upper) {
                Some(k) => Tok::Kw(k),
                None if upper == MATCHES => Tok::Kw(MATCHES),
                None => Tok::Ident(word.to_owned()),
            };
            out.push((tok, start));
            i += len;
        } else if let Some((op, hint)) = FOREIGN_OPS.iter().find(|(op, _)| src[i..].starts_with(op))
        {
            return Err(SelectorError::new(
                start,
                format!("'{op}' is not a selector operator: {hint}"),
            ));
        } else if let Some(op) = OPS.iter().find(|op| src[i..].starts_with(**op)) {
            out.push((Tok::Op(op), start));
            i += op.len();
        } else {
            let ch = src[i..].chars().next().unwrap_or('?');
            return Err(SelectorError::new(
                start,
                format!("unexpected character '{ch}'"),
            ));
        }
    }
    out.push((Tok::End, src.len()));
    Ok(out)
}

/// A numeric literal at the start of `s`: an integer (decimal, or hex with
/// 0x, optionally suffixed L) or a decimal with a point and/or exponent
/// (optionally suffixed F or D).
fn number(s: &str) -> Result<(Tok, usize), String> {
    let b = s.as_bytes();
    if b.len() > 1 && b[0] == b'0' && (b[1] == b'x' || b[1] == b'X') {
        let len = 2 + s[2..]
            .find(|c: char| !c.is_ascii_hexdigit())
            .unwrap_or(s.len() - 2);
        let v = i64::from_str_radix(&s[2..len], 16).map_err(|e| format!("bad hex literal: {e}"))?;
        let suffix = usize::from(matches!(b.get(len), Some(b'l' | b'L')));
        return Ok((Tok::Long(v), len + suffix));
    }
    let mut len = 0;
    let mut float = false;
    while len < b.len() && b[len].is_ascii_digit() {
        len += 1;
    }
    if b.get(len) == Some(&b'.') {
        float = true;
        len += 1;
        while len < b.len() && b[len].is_ascii_digit() {
            len += 1;
        }
    }
    if matches!(b.get(len), Some(b'e' | b'E')) {
        float = true;
        len += 1;
        if matches!(b.get(len), Some(b'+' | b'-')) {
            len += 1;
        }
        let digits = len;
        while len < b.len() && b[len].is_ascii_digit() {
            len += 1;
        }
        if len == digits {
            return Err("exponent without digits".into());
        }
    }
    let text = &s[..len];
    match b.get(len) {
        Some(b'f' | b'F' | b'd' | b'D') => {
            let v = text
                .parse::<f64>()
                .map_err(|e| format!("bad number: {e}"))?;
            Ok((Tok::Double(v), len + 1))
        }
        _ if float => Ok((
            Tok::Double(text.parse().map_err(|e| format!("bad number: {e}"))?),
            len,
        )),
        Some(b'l' | b'L') => Ok((
            Tok::Long(
                text.parse()
                    .map_err(|_| format!("integer {text} out of range"))?,
            ),
            len + 1,
        )),
        _ => Ok((
            Tok::Long(
                text.parse()
                    .map_err(|_| format!("integer {text} out of range"))?,
            ),
            len,
        )),
    }
}

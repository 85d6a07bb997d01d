//! Recursive descent over the JMS selector grammar, loosest binding first:
//! OR, AND, NOT, comparisons (= <> < <= > >= BETWEEN LIKE IN IS NULL
//! MATCHES), + -, * /, unary + -.

use regex::Regex;

use super::lexer::Tok;
use super::SelectorError;

#[derive(Debug, Clone)]
pub enum Expr {
    Ident(String),
    Str(String),
    Long(i64),
    Double(f64),
    Bool(bool),
    Null,
    Neg(Box<Expr>),
    Arith(char, Box<Expr>, Box<Expr>),
    Cmp(&'static str, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Between {
        negated: bool,
        value: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
    },
    Like {
        negated: bool,
        ident: String,
        pattern: Regex,
    },
    In {
        negated: bool,
        ident: String,
        list: Vec<String>,
    },
    IsNull {
        negated: bool,
        ident: String,
    },
    Matches {
        negated: bool,
        ident: String,
        regex: Regex,
    },
}

impl Expr {
    /// Whether this node yields a truth value (what a selector must be).
    pub fn is_condition(&self) -> bool {
        matches!(
            self,
            Expr::Cmp(..)
                | Expr::Not(_)
                | Expr::And(..)
                | Expr::Or(..)
                | Expr::Between { .. }
                | Expr::Like { .. }
                | Expr::In { .. }
                | Expr::IsNull { .. }
                | Expr::Matches { .. }
                | Expr::Bool(_)
                | Expr::Ident(_)
        )
    }
}

pub struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
}

impl Parser {
    pub fn new(toks: Vec<(Tok, usize)>) -> Parser {
        Parser { toks, at: 0 }
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.at].0
    }

    fn pos(&self) -> usize {
        self.toks[self.at].1
    }

    fn next(&mut self) -> Tok {
        let t = self.toks[self.at].0.clone();
        if self.at + 1 < self.toks.len() {
            self.at += 1;
        }
        t
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        if self.peek() == tok {
            self.next();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, tok: &Tok, what: &str) -> Result<(), SelectorError> {
        if self.eat(tok) {
            Ok(())
        } else {
            Err(self.error(format!("expected {what}")))
        }
    }

    fn error(&self, message: impl Into<String>) -> SelectorError {
        let found = match self.peek() {
            Tok::End => "the end".to_owned(),
            t => format!("{t:?}"),
        };
        SelectorError::new(self.pos(), format!("{}, found {found}", message.into()))
    }

    pub fn parse(mut self) -> Result<Expr, SelectorError> {
        let e = self.or()?;
        if *self.peek() != Tok::End {
            return Err(self.error("expected an operator or the end"));
        }
        Ok(e)
    }

    fn or(&mut self) -> Result<Expr, SelectorError> {
        let mut e = self.and()?;
        while self.eat(&Tok::Kw("OR")) {
            e = Expr::Or(Box::new(e), Box::new(self.and()?));
        }
        Ok(e)
    }

    fn and(&mut self) -> Result<Expr, SelectorError> {
        let mut e = self.not()?;
        while self.eat(&Tok::Kw("AND")) {
            e = Expr::And(Box::new(e), Box::new(self.not()?));
        }
        Ok(e)
    }

    fn not(&mut self) -> Result<Expr, SelectorError> {
        if self.eat(&Tok::Kw("NOT")) {
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.comparison()
    }

    fn ident_of(&self, e: &Expr, op: &str, pos: usize) -> Result<String, SelectorError> {
        match e {
            Expr::Ident(name) => Ok(name.clone()),
            _ => Err(SelectorError::new(
                pos,
                format!("{op} needs an identifier on its left"),
            )),
        }
    }

    fn string(&mut self, what: &str) -> Result<String, SelectorError> {
        match self.peek().clone() {
            Tok::Str(s) => {
                self.next();
                Ok(s)
            }
            _ => Err(self.error(format!("expected a string literal for {what}"))),
        }
    }

    fn comparison(&mut self) -> Result<Expr, SelectorError> {
        let left_pos = self.pos();
        let left = self.sum()?;
        if let Tok::Op(op @ ("=" | "<>" | "<" | "<=" | ">" | ">=")) = *self.peek() {
            self.next();
            let right = self.sum()?;
            return Ok(Expr::Cmp(op, Box::new(left), Box::new(right)));
        }
        if self.eat(&Tok::Kw("IS")) {
            let negated = self.eat(&Tok::Kw("NOT"));
            self.expect(&Tok::Kw("NULL"), "NULL after IS")?;
            let ident = self.ident_of(&left, "IS NULL", left_pos)?;
            return Ok(Expr::IsNull { negated, ident });
        }
        let negated = self.eat(&Tok::Kw("NOT"));
        match self.peek() {
            Tok::Kw("BETWEEN") => {
                self.next();
                let low = self.sum()?;
                self.expect(&Tok::Kw("AND"), "AND in BETWEEN")?;
                let high = self.sum()?;
                Ok(Expr::Between {
                    negated,
                    value: Box::new(left),
                    low: Box::new(low),
                    high: Box::new(high),
                })
            }
            Tok::Kw("LIKE") => {
                self.next();
                let ident = self.ident_of(&left, "LIKE", left_pos)?;
                let pattern_pos = self.pos();
                let pattern = self.string("LIKE")?;
                let escape = if self.eat(&Tok::Kw("ESCAPE")) {
                    let pos = self.pos();
                    let e = self.string("ESCAPE")?;
                    let mut chars = e.chars();
                    match (chars.next(), chars.next()) {
                        (Some(c), None) => Some(c),
                        _ => {
                            return Err(SelectorError::new(
                                pos,
                                "ESCAPE takes exactly one character",
                            ))
                        }
                    }
                } else {
                    None
                };
                let pattern =
                    like_regex(&pattern, escape).map_err(|m| SelectorError::new(pattern_pos, m))?;
                Ok(Expr::Like {
                    negated,
                    ident,
                    pattern,
                })
            }
            Tok::Kw("IN") => {
                self.next();
                let ident = self.ident_of(&left, "IN", left_pos)?;
                self.expect(&Tok::Op("("), "( after IN")?;
                let mut list = vec![self.string("IN")?];
                while self.eat(&Tok::Op(",")) {
                    list.push(self.string("IN")?);
                }
                self.expect(&Tok::Op(")"), ") closing IN")?;
                Ok(Expr::In {
                    negated,
                    ident,
                    list,
                })
            }
            Tok::Kw("MATCHES") => {
                self.next();
                let ident = self.ident_of(&left, "MATCHES", left_pos)?;
                let pos = self.pos();
                let source = self.string("MATCHES")?;
                let regex = Regex::new(&source)
                    .map_err(|e| SelectorError::new(pos, format!("bad regular expression: {e}")))?;
                Ok(Expr::Matches {
                    negated,
                    ident,
                    regex,
                })
            }
            _ if negated => Err(self.error("expected BETWEEN, LIKE, IN or MATCHES after NOT")),
            _ => Ok(left),
        }
    }

    fn sum(&mut self) -> Result<Expr, SelectorError> {
        let mut e = self.product()?;
        while let Tok::Op(op @ ("+" | "-")) = *self.peek() {
            self.next();
            let r = self.product()?;
            e = Expr::Arith(op.chars().next().unwrap_or('+'), Box::new(e), Box::new(r));
        }
        Ok(e)
    }

    fn product(&mut self) -> Result<Expr, SelectorError> {
        let mut e = self.unary()?;
        while let Tok::Op(op @ ("*" | "/")) = *self.peek() {
            self.next();
            let r = self.unary()?;
            e = Expr::Arith(op.chars().next().unwrap_or('*'), Box::new(e), Box::new(r));
        }
        Ok(e)
    }

    fn unary(&mut self) -> Result<Expr, SelectorError> {
        if self.eat(&Tok::Op("-")) {
            return Ok(match self.unary()? {
                Expr::Long(v) => Expr::Long(v.wrapping_neg()),
                Expr::Double(v) => Expr::Double(-v),
                e => Expr::Neg(Box::new(e)),
            });
        }
        if self.eat(&Tok::Op("+")) {
            return self.unary();
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr, SelectorError> {
        let e = match self.peek().clone() {
            Tok::Ident(name) => Expr::Ident(name),
            Tok::Str(s) => Expr::Str(s),
            Tok::Long(v) => Expr::Long(v),
            Tok::Double(v) => Expr::Double(v),
            Tok::Kw("TRUE") => Expr::Bool(true),
            Tok::Kw("FALSE") => Expr::Bool(false),
            Tok::Kw("NULL") => Expr::Null,
            Tok::Op("(") => {
                self.next();
                let e = self.or()?;
                self.expect(&Tok::Op(")"), ")")?;
                return Ok(e);
            }
            _ => return Err(self.error("expected a value, an identifier or (")),
        };
        self.next();
        Ok(e)
    }
}

/// Translates a LIKE pattern (% any run, _ one character, `escape`
/// quoting the next one) into an anchored regular expression.
fn like_regex(pattern: &str, escape: Option<char>) -> Result<Regex, String> {
    let mut re = String::from("(?s)^");
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(next) => re.push_str(&regex::escape(&next.to_string())),
                None => return Err("LIKE pattern ends with its escape character".into()),
            }
        } else if c == '%' {
            re.push_str(".*");
        } else if c == '_' {
            re.push('.');
        } else {
            re.push_str(&regex::escape(&c.to_string()));
        }
    }
    re.push('$');
    Regex::new(&re).map_err(|e| format!("bad LIKE pattern: {e}"))
}

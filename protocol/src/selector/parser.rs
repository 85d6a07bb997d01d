//! Recursive descent over the JMS selector grammar, loosest binding first:
//! OR, AND, NOT, comparisons (= <> < <= > >= BETWEEN LIKE IN IS NULL
//! MATCHES), + -, * /, unary + -.
//!
//! Every recursion (parentheses, NOT, unary signs) and every arithmetic
//! chain counts against the depth limit, and AND and OR chains are kept
//! flat, so the tree's depth, and with it the stack that parsing,
//! evaluating and dropping it take, is bounded by the limit.

use std::collections::HashMap;

use regex_automata::meta::Regex;

use super::lexer::Tok;
use super::like::Like;
use super::{SelectorError, SelectorLimits};

/// Bytes of lazy-DFA cache a `MATCHES` regex may fill on each thread that
/// searches with it.
const REGEX_CACHE_BYTES: usize = 256 << 10;

#[derive(Debug, Clone)]
pub enum Expr {
    /// An identifier: the slot its value is put in.
    Ident(usize),
    Str(String),
    Long(i64),
    Double(f64),
    Bool(bool),
    Null,
    Neg(Box<Expr>),
    Arith(char, Box<Expr>, Box<Expr>),
    Cmp(&'static str, Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Between {
        negated: bool,
        value: Box<Expr>,
        low: Box<Expr>,
        high: Box<Expr>,
    },
    Like {
        negated: bool,
        ident: usize,
        pattern: Like,
    },
    In {
        negated: bool,
        ident: usize,
        list: Vec<String>,
    },
    IsNull {
        negated: bool,
        ident: usize,
    },
    Matches {
        negated: bool,
        ident: usize,
        regex: Box<Regex>,
        /// Steps charged per byte searched: a bigger automaton may cost
        /// more per byte when the lazy DFA gives way to the PikeVM.
        cost_per_byte: u64,
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

/// What parsing yields: the tree, the identifiers by slot, and the
/// memory the tree holds beyond the source text.
pub struct Parsed {
    pub expr: Expr,
    pub names: Vec<String>,
    pub memory: usize,
}

pub struct Parser<'l> {
    toks: Vec<(Tok, usize)>,
    at: usize,
    limits: &'l SelectorLimits,
    depth: usize,
    nodes: usize,
    memory: usize,
    slots: HashMap<String, usize>,
    names: Vec<String>,
}

impl<'l> Parser<'l> {
    pub fn new(toks: Vec<(Tok, usize)>, limits: &'l SelectorLimits) -> Parser<'l> {
        Parser {
            toks,
            at: 0,
            limits,
            depth: 0,
            nodes: 0,
            memory: 0,
            slots: HashMap::new(),
            names: Vec::new(),
        }
    }

    /// Goes one level deeper, or refuses a selector nested too deeply.
    fn descend(&mut self) -> Result<(), SelectorError> {
        self.depth += 1;
        if self.depth > self.limits.max_depth {
            return Err(SelectorError::new(
                self.pos(),
                format!(
                    "the selector nests more than {} levels deep",
                    self.limits.max_depth
                ),
            ));
        }
        Ok(())
    }

    /// Counts `n` more nodes of `bytes` bytes beyond their own size.
    fn grow(&mut self, n: usize, bytes: usize) -> Result<(), SelectorError> {
        self.nodes += n;
        self.memory += n * std::mem::size_of::<Expr>() + bytes;
        if self.nodes > self.limits.max_nodes {
            return Err(SelectorError::new(
                self.pos(),
                format!("the selector has more than {} terms", self.limits.max_nodes),
            ));
        }
        Ok(())
    }

    /// The slot of identifier `name`.
    fn slot(&mut self, name: String) -> usize {
        if let Some(&slot) = self.slots.get(&name) {
            return slot;
        }
        let slot = self.names.len();
        self.memory += 2 * name.len();
        self.names.push(name.clone());
        self.slots.insert(name, slot);
        slot
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
        SelectorError::new(
            self.pos(),
            format!("{}, found {}", message.into(), self.peek()),
        )
    }

    pub fn parse(mut self) -> Result<Parsed, SelectorError> {
        let expr = self.or()?;
        if *self.peek() != Tok::End {
            return Err(self.error("expected an operator or the end"));
        }
        Ok(Parsed {
            expr,
            names: self.names,
            memory: self.memory,
        })
    }

    fn or(&mut self) -> Result<Expr, SelectorError> {
        let first = self.and()?;
        if *self.peek() != Tok::Kw("OR") {
            return Ok(first);
        }
        let mut terms = vec![first];
        while self.eat(&Tok::Kw("OR")) {
            terms.push(self.and()?);
        }
        self.grow(1, 0)?;
        Ok(Expr::Or(terms))
    }

    fn and(&mut self) -> Result<Expr, SelectorError> {
        let first = self.not()?;
        if *self.peek() != Tok::Kw("AND") {
            return Ok(first);
        }
        let mut terms = vec![first];
        while self.eat(&Tok::Kw("AND")) {
            terms.push(self.not()?);
        }
        self.grow(1, 0)?;
        Ok(Expr::And(terms))
    }

    fn not(&mut self) -> Result<Expr, SelectorError> {
        if self.eat(&Tok::Kw("NOT")) {
            self.descend()?;
            let inner = self.not()?;
            self.depth -= 1;
            self.grow(1, 0)?;
            return Ok(Expr::Not(Box::new(inner)));
        }
        self.comparison()
    }

    fn ident_of(&self, e: &Expr, op: &str, pos: usize) -> Result<usize, SelectorError> {
        match e {
            Expr::Ident(slot) => Ok(*slot),
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
                self.grow(1, s.len())?;
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
            self.grow(1, 0)?;
            return Ok(Expr::Cmp(op, Box::new(left), Box::new(right)));
        }
        if self.eat(&Tok::Kw("IS")) {
            let negated = self.eat(&Tok::Kw("NOT"));
            self.expect(&Tok::Kw("NULL"), "NULL after IS")?;
            let ident = self.ident_of(&left, "IS NULL", left_pos)?;
            self.grow(1, 0)?;
            return Ok(Expr::IsNull { negated, ident });
        }
        let negated = self.eat(&Tok::Kw("NOT"));
        match self.peek() {
            Tok::Kw("BETWEEN") => {
                self.next();
                let low = self.sum()?;
                self.expect(&Tok::Kw("AND"), "AND in BETWEEN")?;
                let high = self.sum()?;
                self.grow(1, 0)?;
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
                    Like::new(&pattern, escape).map_err(|m| SelectorError::new(pattern_pos, m))?;
                self.grow(1, pattern.memory())?;
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
                self.grow(1, list.capacity() * std::mem::size_of::<String>())?;
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
                let regex = Regex::builder()
                    .configure(
                        Regex::config()
                            .nfa_size_limit(Some(self.limits.max_regex_bytes))
                            .onepass_size_limit(Some(self.limits.max_regex_bytes))
                            .dfa_size_limit(Some(self.limits.max_regex_bytes))
                            .hybrid_cache_capacity(REGEX_CACHE_BYTES),
                    )
                    .build(&source)
                    .map_err(|e| {
                        SelectorError::new(
                            pos,
                            format!(
                                "bad regular expression (at most {} bytes compiled): {e}",
                                self.limits.max_regex_bytes
                            ),
                        )
                    })?;
                let compiled = regex.memory_usage();
                self.grow(1, compiled + REGEX_CACHE_BYTES)?;
                Ok(Expr::Matches {
                    negated,
                    ident,
                    regex: Box::new(regex),
                    cost_per_byte: 1 + (compiled / 4096) as u64,
                })
            }
            _ if negated => Err(self.error("expected BETWEEN, LIKE, IN or MATCHES after NOT")),
            _ => Ok(left),
        }
    }

    /// A left-deep chain of `ops` over `operand`s: each link is a level
    /// deeper in the tree, so each counts against the depth limit.
    fn chain(
        &mut self,
        ops: [&'static str; 2],
        operand: fn(&mut Self) -> Result<Expr, SelectorError>,
    ) -> Result<Expr, SelectorError> {
        let depth = self.depth;
        let mut e = operand(self)?;
        while let Tok::Op(op) = *self.peek() {
            if !ops.contains(&op) {
                break;
            }
            self.next();
            self.descend()?;
            let r = operand(self)?;
            self.grow(1, 0)?;
            e = Expr::Arith(op.chars().next().unwrap_or('+'), Box::new(e), Box::new(r));
        }
        self.depth = depth;
        Ok(e)
    }

    fn sum(&mut self) -> Result<Expr, SelectorError> {
        self.chain(["+", "-"], Self::product)
    }

    fn product(&mut self) -> Result<Expr, SelectorError> {
        self.chain(["*", "/"], Self::unary)
    }

    fn unary(&mut self) -> Result<Expr, SelectorError> {
        let sign = match self.peek() {
            Tok::Op("-") => -1,
            Tok::Op("+") => 1,
            _ => return self.primary(),
        };
        self.next();
        self.descend()?;
        let inner = self.unary()?;
        self.depth -= 1;
        if sign > 0 {
            return Ok(inner);
        }
        Ok(match inner {
            Expr::Long(v) => Expr::Long(v.wrapping_neg()),
            Expr::Double(v) => Expr::Double(-v),
            e => {
                self.grow(1, 0)?;
                Expr::Neg(Box::new(e))
            }
        })
    }

    fn primary(&mut self) -> Result<Expr, SelectorError> {
        self.grow(1, 0)?;
        let e = match self.peek().clone() {
            Tok::Ident(name) => Expr::Ident(self.slot(name)),
            Tok::Str(s) => {
                self.memory += s.len();
                Expr::Str(s)
            }
            Tok::Long(v) => Expr::Long(v),
            Tok::Double(v) => Expr::Double(v),
            Tok::Kw("TRUE") => Expr::Bool(true),
            Tok::Kw("FALSE") => Expr::Bool(false),
            Tok::Kw("NULL") => Expr::Null,
            Tok::Op("(") => {
                self.next();
                self.descend()?;
                let e = self.or()?;
                self.depth -= 1;
                self.expect(&Tok::Op(")"), ")")?;
                return Ok(e);
            }
            _ => return Err(self.error("expected a value, an identifier or (")),
        };
        self.next();
        Ok(e)
    }
}

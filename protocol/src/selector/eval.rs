//! Evaluation with SQL's three-valued logic: NULL (here `None`-like
//! [`FieldValue::Null`]) is UNKNOWN, and a selector selects a message only
//! when it evaluates to TRUE.
//!
//! Every node and every byte a string operation scans is charged to a
//! [`Budget`]; once it runs out, the rest evaluates to UNKNOWN and the
//! selector does not select the message.

use std::cmp::Ordering;

use super::parser::Expr;
use super::FieldValue;

type V<'a> = FieldValue<'a>;

/// Steps one evaluation may still take.
pub struct Budget {
    left: u64,
    exhausted: bool,
}

impl Budget {
    /// A budget of `steps`.
    pub fn new(steps: u64) -> Budget {
        Budget {
            left: steps,
            exhausted: false,
        }
    }

    /// Takes `steps`; false (for good) if there are not that many left.
    pub fn charge(&mut self, steps: u64) -> bool {
        match self.left.checked_sub(steps) {
            Some(left) if !self.exhausted => {
                self.left = left;
                true
            }
            _ => {
                self.exhausted = true;
                false
            }
        }
    }

    /// Whether a charge was ever refused.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }
}

/// The value of `e`, with identifiers' values in `slots`.
pub fn eval<'a>(e: &'a Expr, slots: &[V<'a>], budget: &mut Budget) -> V<'a> {
    if !budget.charge(1) {
        return V::Null;
    }
    let f = slots;
    match e {
        Expr::Ident(slot) => f[*slot],
        Expr::Str(s) => V::Str(s),
        Expr::Long(v) => V::Long(*v),
        Expr::Double(v) => V::Double(*v),
        Expr::Bool(b) => V::Bool(*b),
        Expr::Null => V::Null,
        Expr::Neg(inner) => match eval(inner, f, budget) {
            V::Long(v) => V::Long(v.wrapping_neg()),
            V::Double(v) => V::Double(-v),
            _ => V::Null,
        },
        Expr::Arith(op, l, r) => arith(*op, eval(l, f, budget), eval(r, f, budget)),
        Expr::Cmp(op, l, r) => compare(op, eval(l, f, budget), eval(r, f, budget)),
        Expr::Not(inner) => not(eval(inner, f, budget)),
        // FALSE decides an AND and TRUE an OR; UNKNOWN does not.
        Expr::And(terms) => junction(terms, false, f, budget),
        Expr::Or(terms) => junction(terms, true, f, budget),
        Expr::Between {
            negated,
            value,
            low,
            high,
        } => {
            let v = eval(value, f, budget);
            let ge = truth(compare(">=", v, eval(low, f, budget)));
            let le = truth(compare("<=", v, eval(high, f, budget)));
            let inside = match (ge, le) {
                (Some(false), _) | (_, Some(false)) => V::Bool(false),
                (Some(true), Some(true)) => V::Bool(true),
                _ => V::Null,
            };
            negate_if(*negated, inside)
        }
        Expr::Like {
            negated,
            ident,
            pattern,
        } => match f[*ident] {
            V::Str(s) => negate_if(*negated, V::Bool(pattern.is_match(s, budget))),
            _ => V::Null,
        },
        Expr::Matches {
            negated,
            ident,
            regex,
            cost_per_byte,
        } => match f[*ident] {
            V::Str(s) if budget.charge((s.len() as u64).saturating_mul(*cost_per_byte)) => {
                negate_if(*negated, V::Bool(regex.is_match(s)))
            }
            _ => V::Null,
        },
        Expr::In {
            negated,
            ident,
            list,
        } => match f[*ident] {
            V::Str(s) if budget.charge(list.len() as u64) => {
                negate_if(*negated, V::Bool(list.iter().any(|x| x == s)))
            }
            _ => V::Null,
        },
        Expr::IsNull { negated, ident } => {
            let null = matches!(f[*ident], V::Null);
            V::Bool(null != *negated)
        }
    }
}

/// An AND (`decider` false) or an OR (`decider` true) of `terms`: the
/// decider if any term is it, else UNKNOWN if any term is, else the other.
fn junction<'a>(terms: &'a [Expr], decider: bool, f: &[V<'a>], budget: &mut Budget) -> V<'a> {
    let mut unknown = false;
    for term in terms {
        match truth(eval(term, f, budget)) {
            Some(b) if b == decider => return V::Bool(decider),
            Some(_) => {}
            None => unknown = true,
        }
    }
    if unknown {
        V::Null
    } else {
        V::Bool(!decider)
    }
}

fn truth(v: V<'_>) -> Option<bool> {
    match v {
        V::Bool(b) => Some(b),
        _ => None,
    }
}

fn not(v: V<'_>) -> V<'_> {
    match v {
        V::Bool(b) => V::Bool(!b),
        _ => V::Null,
    }
}

fn negate_if(negated: bool, v: V<'_>) -> V<'_> {
    if negated {
        not(v)
    } else {
        v
    }
}

fn arith<'a>(op: char, l: V<'a>, r: V<'a>) -> V<'a> {
    match (l, r) {
        (V::Long(a), V::Long(b)) => match op {
            '+' => V::Long(a.wrapping_add(b)),
            '-' => V::Long(a.wrapping_sub(b)),
            '*' => V::Long(a.wrapping_mul(b)),
            _ if b == 0 => V::Null,
            _ => V::Long(a.wrapping_div(b)),
        },
        (a, b) => match (as_f64(a), as_f64(b)) {
            (Some(a), Some(b)) => V::Double(match op {
                '+' => a + b,
                '-' => a - b,
                '*' => a * b,
                _ => a / b,
            }),
            _ => V::Null,
        },
    }
}

fn as_f64(v: V<'_>) -> Option<f64> {
    match v {
        V::Long(v) => Some(v as f64),
        V::Double(v) => Some(v),
        _ => None,
    }
}

fn compare<'a>(op: &str, l: V<'a>, r: V<'a>) -> V<'a> {
    let ordering = match (l, r) {
        (V::Null, _) | (_, V::Null) => return V::Null,
        (V::Long(a), V::Long(b)) => Some(a.cmp(&b)),
        (V::Str(a), V::Str(b)) => {
            // Strings and booleans compare only for (in)equality.
            return match op {
                "=" => V::Bool(a == b),
                "<>" => V::Bool(a != b),
                _ => V::Null,
            };
        }
        (V::Bool(a), V::Bool(b)) => {
            return match op {
                "=" => V::Bool(a == b),
                "<>" => V::Bool(a != b),
                _ => V::Null,
            };
        }
        (a, b) => match (as_f64(a), as_f64(b)) {
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => return V::Null,
        },
    };
    let Some(o) = ordering else {
        // NaN compares as unknown.
        return V::Null;
    };
    V::Bool(match op {
        "=" => o == Ordering::Equal,
        "<>" => o != Ordering::Equal,
        "<" => o == Ordering::Less,
        "<=" => o != Ordering::Greater,
        ">" => o == Ordering::Greater,
        _ => o != Ordering::Less,
    })
}

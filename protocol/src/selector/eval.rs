//! Evaluation with SQL's three-valued logic: NULL (here `None`-like
//! [`FieldValue::Null`]) is UNKNOWN, and a selector selects a message only
//! when it evaluates to TRUE.

use std::cmp::Ordering;

use super::parser::Expr;
use super::{FieldValue, Fields};

type V<'a> = FieldValue<'a>;

pub fn eval<'a>(e: &'a Expr, f: &'a dyn Fields<'a>) -> V<'a> {
    match e {
        Expr::Ident(name) => f.field(name),
        Expr::Str(s) => V::Str(s),
        Expr::Long(v) => V::Long(*v),
        Expr::Double(v) => V::Double(*v),
        Expr::Bool(b) => V::Bool(*b),
        Expr::Null => V::Null,
        Expr::Neg(inner) => match eval(inner, f) {
            V::Long(v) => V::Long(v.wrapping_neg()),
            V::Double(v) => V::Double(-v),
            _ => V::Null,
        },
        Expr::Arith(op, l, r) => arith(*op, eval(l, f), eval(r, f)),
        Expr::Cmp(op, l, r) => compare(op, eval(l, f), eval(r, f)),
        Expr::Not(inner) => not(eval(inner, f)),
        Expr::And(l, r) => match (truth(eval(l, f)), truth(eval(r, f))) {
            (Some(false), _) | (_, Some(false)) => V::Bool(false),
            (Some(true), Some(true)) => V::Bool(true),
            _ => V::Null,
        },
        Expr::Or(l, r) => match (truth(eval(l, f)), truth(eval(r, f))) {
            (Some(true), _) | (_, Some(true)) => V::Bool(true),
            (Some(false), Some(false)) => V::Bool(false),
            _ => V::Null,
        },
        Expr::Between {
            negated,
            value,
            low,
            high,
        } => {
            let v = eval(value, f);
            let ge = truth(compare(">=", v, eval(low, f)));
            let le = truth(compare("<=", v, eval(high, f)));
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
        } => match f.field(ident) {
            V::Str(s) => negate_if(*negated, V::Bool(pattern.is_match(s))),
            _ => V::Null,
        },
        Expr::Matches {
            negated,
            ident,
            regex,
        } => match f.field(ident) {
            V::Str(s) => negate_if(*negated, V::Bool(regex.is_match(s))),
            _ => V::Null,
        },
        Expr::In {
            negated,
            ident,
            list,
        } => match f.field(ident) {
            V::Str(s) => negate_if(*negated, V::Bool(list.iter().any(|x| x == s))),
            _ => V::Null,
        },
        Expr::IsNull { negated, ident } => {
            let null = matches!(f.field(ident), V::Null);
            V::Bool(null != *negated)
        }
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

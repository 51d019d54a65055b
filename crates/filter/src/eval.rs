//! Evaluating an expression against one record. Two-valued logic: a comparison on a missing
//! field (no such header, a null header value, a null key) or, for a number literal, on a
//! value that is not a decimal number, is false; `NOT` inverts whatever its operand gave. So
//! `tag != 'red'` is false for an untagged record, while `NOT tag = 'red'` is true.

use std::cmp::Ordering;

use tinymq_protocol::batch::Record;

use crate::ast::{Expr, Field, Literal};
use crate::number::Decimal;
use crate::TAG_HEADER;

/// What a filter reads from a record. With several headers of one name, the first counts.
pub trait RecordFields {
    /// The record key; `None` for a null key.
    fn key(&self) -> Option<&[u8]>;
    /// The value of the first header named `name`; `None` when absent or null.
    fn header(&self, name: &str) -> Option<&[u8]>;
}

impl RecordFields for Record {
    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| h.value.as_deref())
    }
}

impl Field {
    fn read<'r>(&self, record: &'r (impl RecordFields + ?Sized)) -> Option<&'r [u8]> {
        match self {
            Field::Tag => record.header(TAG_HEADER),
            Field::Key => record.key(),
            Field::Header(name) => record.header(name),
        }
    }
}

impl Literal {
    /// The field compared to the literal; `None` when they cannot be compared (a number
    /// literal against a value that is not a number).
    fn compare(&self, value: &[u8]) -> Option<Ordering> {
        match self {
            Literal::Str(s) => Some(value.cmp(s.as_bytes())),
            Literal::Num(n) => Some(Decimal::parse(value)?.cmp(&n.as_decimal())),
        }
    }
}

impl Expr {
    /// Whether `record` satisfies the expression. Recursion is bounded by the parser's depth
    /// limit (`FILTER_DEPTH_MAX`).
    pub fn matches(&self, record: &(impl RecordFields + ?Sized)) -> bool {
        match self {
            Expr::Or(items) => items.iter().any(|e| e.matches(record)),
            Expr::And(items) => items.iter().all(|e| e.matches(record)),
            Expr::Not(inner) => !inner.matches(record),
            Expr::Compare { field, op, literal } => field
                .read(record)
                .and_then(|v| literal.compare(v))
                .is_some_and(|o| op.holds(o)),
            Expr::In {
                field,
                negated,
                items,
            } => field.read(record).is_some_and(|v| {
                if *negated {
                    // NOT IN needs every item comparable and different: a number item against
                    // a non-number value decides nothing, as `!=` would not hold either.
                    items
                        .iter()
                        .all(|l| l.compare(v).is_some_and(|o| o != Ordering::Equal))
                } else {
                    items.iter().any(|l| l.compare(v) == Some(Ordering::Equal))
                }
            }),
            Expr::Like {
                field,
                negated,
                pattern,
            } => field
                .read(record)
                .is_some_and(|v| like(v, pattern) != *negated),
            Expr::IsNull { field, negated } => field.read(record).is_none() != *negated,
        }
    }
}

/// `LIKE`: a trailing `%` matches any rest; without one the pattern must equal the value.
fn like(value: &[u8], pattern: &str) -> bool {
    match pattern.strip_suffix('%') {
        Some(prefix) => value.starts_with(prefix.as_bytes()),
        None => value == pattern.as_bytes(),
    }
}

/// Fields given directly, for tests and client-side evaluation.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl RecordFields for Fields {
    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }
}

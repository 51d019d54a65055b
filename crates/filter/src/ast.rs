//! The expression tree of a filter and its printed form. Printing is canonical: an `AND`/`OR`
//! operand of `AND`, `OR` or `NOT` is parenthesized (nothing else is), so `parse(print(e))`
//! gives `e` back (a property test holds it to that) and the printed form nests no deeper
//! than the text it was parsed from.

use std::fmt;

use crate::number::Number;

/// What a predicate reads from a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field {
    /// The header `tag`.
    Tag,
    /// The record key.
    Key,
    /// The header NAME (`header.NAME`, NAME = `[A-Za-z0-9_.-]+`).
    Header(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// A literal: a string compares bytes, a number compares the field read as a decimal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Literal {
    Str(String),
    Num(Number),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Two or more alternatives.
    Or(Vec<Expr>),
    /// Two or more conjuncts.
    And(Vec<Expr>),
    Not(Box<Expr>),
    Compare {
        field: Field,
        op: CompareOp,
        literal: Literal,
    },
    /// `field IN (...)`, or `NOT IN` when `negated`.
    In {
        field: Field,
        negated: bool,
        items: Vec<Literal>,
    },
    /// `field LIKE 'prefix%'` (or an exact pattern without `%`); `NOT LIKE` when `negated`.
    Like {
        field: Field,
        negated: bool,
        pattern: String,
    },
    /// `field IS NULL`, or `IS NOT NULL` when `negated`.
    IsNull {
        field: Field,
        negated: bool,
    },
}

impl CompareOp {
    pub fn symbol(self) -> &'static str {
        match self {
            CompareOp::Eq => "=",
            CompareOp::Ne => "!=",
            CompareOp::Lt => "<",
            CompareOp::Le => "<=",
            CompareOp::Gt => ">",
            CompareOp::Ge => ">=",
        }
    }

    /// Whether `ordering` (field compared to literal) satisfies the operator.
    pub fn holds(self, ordering: std::cmp::Ordering) -> bool {
        use std::cmp::Ordering::*;
        match self {
            CompareOp::Eq => ordering == Equal,
            CompareOp::Ne => ordering != Equal,
            CompareOp::Lt => ordering == Less,
            CompareOp::Le => ordering != Greater,
            CompareOp::Gt => ordering == Greater,
            CompareOp::Ge => ordering != Less,
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Tag => f.write_str("tag"),
            Field::Key => f.write_str("key"),
            Field::Header(name) => write!(f, "header.{name}"),
        }
    }
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Str(s) => write!(f, "'{}'", s.replace('\'', "''")),
            Literal::Num(n) => n.fmt(f),
        }
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Or(items) => write_joined(f, items, " OR "),
            Expr::And(items) => write_joined(f, items, " AND "),
            Expr::Not(inner) => {
                f.write_str("NOT ")?;
                write_operand(f, inner)
            }
            Expr::Compare { field, op, literal } => {
                write!(f, "{field} {} {literal}", op.symbol())
            }
            Expr::In {
                field,
                negated,
                items,
            } => {
                write!(f, "{field} {}IN (", if *negated { "NOT " } else { "" })?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    item.fmt(f)?;
                }
                f.write_str(")")
            }
            Expr::Like {
                field,
                negated,
                pattern,
            } => {
                let not = if *negated { "NOT " } else { "" };
                let pattern = Literal::Str(pattern.clone());
                write!(f, "{field} {not}LIKE {pattern}")
            }
            Expr::IsNull { field, negated } => {
                write!(f, "{field} IS {}NULL", if *negated { "NOT " } else { "" })
            }
        }
    }
}

fn write_joined(f: &mut fmt::Formatter<'_>, items: &[Expr], separator: &str) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(separator)?;
        }
        write_operand(f, item)?;
    }
    Ok(())
}

/// An operand of AND, OR or NOT: parenthesized when it is itself an AND or OR, so that it
/// parses back as one operand.
fn write_operand(f: &mut fmt::Formatter<'_>, item: &Expr) -> fmt::Result {
    match item {
        Expr::And(_) | Expr::Or(_) => write!(f, "({item})"),
        _ => fmt::Display::fmt(item, f),
    }
}

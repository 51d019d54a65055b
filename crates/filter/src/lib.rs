//! Filter expressions (docs/queues.md, "Filters"): `tag = 'red'`,
//! `header.region IN ('eu', 'us') AND header.priority > 3`. Parsing with errors that point at
//! a column, evaluation against one record, and the selection of matching records out of
//! record batches, which the broker uses so that non-matching records never cross the network.
//!
//! - [`ast`]: the expression tree and its printed (re-parseable) form;
//! - [`parse`]: the winnow parser and its limits;
//! - [`eval`]: [`RecordFields`] and how a comparison is decided;
//! - [`raw`]: records read in place from a batch, offset gaps allowed (filtered batches);
//! - [`select`]: re-encoding batches to keep only chosen records.
//!
//! No I/O: the broker reads the log and writes the response.

pub mod ast;
pub mod error;
pub mod eval;
pub mod number;
pub mod parse;
pub mod raw;
pub mod select;

pub use ast::{CompareOp, Expr, Field, Literal};
pub use error::FilterError;
pub use eval::RecordFields;
pub use raw::{decode_sparse, RawRecord};
pub use select::{select, SelectError, SelectOptions, Selection};

/// Longest filter text accepted, in bytes (the wire limit of `FetchRequest.filter`).
pub const FILTER_TEXT_BYTES_MAX: usize = 4096;
/// Deepest nesting of parentheses and `NOT`s: bounds the parser's and evaluator's recursion.
pub const FILTER_DEPTH_MAX: usize = 32;
/// Most literals in one `IN (...)` list.
pub const FILTER_IN_LIST_ITEMS_MAX: usize = 1000;
/// The header that holds a record's tag (`produce --tag`).
pub const TAG_HEADER: &str = "tag";

/// A parsed filter expression, ready to evaluate against records.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    expr: Expr,
}

impl Filter {
    /// Parses `text` (at most [`FILTER_TEXT_BYTES_MAX`] bytes); errors name the column.
    pub fn parse(text: &str) -> Result<Filter, FilterError> {
        parse::parse(text).map(|expr| Filter { expr })
    }

    /// Whether the record's fields satisfy the expression.
    pub fn matches(&self, record: &(impl RecordFields + ?Sized)) -> bool {
        self.expr.matches(record)
    }

    pub fn expr(&self) -> &Expr {
        &self.expr
    }
}

impl From<Expr> for Filter {
    fn from(expr: Expr) -> Filter {
        Filter { expr }
    }
}

/// The expression in its canonical form (parses back to the same tree).
impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.expr.fmt(f)
    }
}

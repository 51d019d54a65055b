//! The filter parser: winnow combinators for the tokens, recursive descent for the grammar
//! (docs/queues.md, "Filters"):
//!
//! ```text
//! filter    = or
//! or        = and { OR and }
//! and       = not { AND not }
//! not       = NOT not | "(" or ")" | predicate
//! predicate = field ( op literal | [NOT] IN "(" literal { "," literal } ")"
//!                   | [NOT] LIKE string | IS [NOT] NULL )
//! field     = tag | key | header.NAME          NAME = [A-Za-z0-9_.-]+
//! op        = "=" | "!=" | "<>" | "<" | "<=" | ">" | ">="
//! literal   = string | number                 string = '...' ('' is a quote)
//! number    = -?[0-9]+(.[0-9]+)?
//! ```
//!
//! Keywords and the field words `tag`, `key`, `header.` are case-insensitive; header names
//! are not. The first thing that does not fit the grammar is refused with a message and the
//! position of that thing. Limits ([`crate::FILTER_TEXT_BYTES_MAX`], [`crate::FILTER_DEPTH_MAX`],
//! [`crate::FILTER_IN_LIST_ITEMS_MAX`]) are checked while parsing, so no input can make the
//! parser recurse or allocate beyond them.

use winnow::ascii::multispace0;
use winnow::error::{ContextError, ErrMode};
use winnow::prelude::*;
use winnow::stream::Stream;
use winnow::token::{take_till, take_while};

use crate::ast::{CompareOp, Expr, Field, Literal};
use crate::number::Number;
use crate::{FilterError, FILTER_DEPTH_MAX, FILTER_IN_LIST_ITEMS_MAX, FILTER_TEXT_BYTES_MAX};

type Error = ContextError<String>;
type PResult<T> = ModalResult<T, Error>;

/// Parses a whole filter text.
pub fn parse(text: &str) -> Result<Expr, FilterError> {
    if text.len() > FILTER_TEXT_BYTES_MAX {
        return Err(FilterError::at(
            text,
            FILTER_TEXT_BYTES_MAX,
            format!(
                "the filter is {} bytes, more than FILTER_TEXT_BYTES_MAX ({FILTER_TEXT_BYTES_MAX})",
                text.len()
            ),
        ));
    }
    let mut input = text;
    filter(&mut input).map_err(|e| {
        let message = match e {
            ErrMode::Cut(e) | ErrMode::Backtrack(e) => e.context().next().cloned(),
            ErrMode::Incomplete(_) => None,
        };
        let message = message.unwrap_or_else(|| "unexpected input".to_string());
        FilterError::at(text, text.len() - input.len(), message)
    })
}

/// Fails here (no backtracking) with `message`.
fn cut<T>(message: impl Into<String>) -> PResult<T> {
    let mut error = ContextError::new();
    error.push(message.into());
    Err(ErrMode::Cut(error))
}

fn filter(input: &mut &str) -> PResult<Expr> {
    multispace0.parse_next(input)?;
    if input.is_empty() {
        return cut("empty filter: expected a field (tag, key or header.NAME), NOT or '('");
    }
    let expr = or_expr(input, 0)?;
    multispace0.parse_next(input)?;
    if !input.is_empty() {
        return cut("expected AND, OR or the end of the filter");
    }
    Ok(expr)
}

fn or_expr(input: &mut &str, depth: usize) -> PResult<Expr> {
    let mut items = vec![and_expr(input, depth)?];
    while next_keyword(input, "OR")? {
        items.push(and_expr(input, depth)?);
    }
    Ok(one_or(items, Expr::Or))
}

fn and_expr(input: &mut &str, depth: usize) -> PResult<Expr> {
    let mut items = vec![not_expr(input, depth)?];
    while next_keyword(input, "AND")? {
        items.push(not_expr(input, depth)?);
    }
    Ok(one_or(items, Expr::And))
}

fn one_or(mut items: Vec<Expr>, many: fn(Vec<Expr>) -> Expr) -> Expr {
    match items.pop() {
        Some(only) if items.is_empty() => only,
        Some(last) => {
            items.push(last);
            many(items)
        }
        None => many(items),
    }
}

fn not_expr(input: &mut &str, depth: usize) -> PResult<Expr> {
    multispace0.parse_next(input)?;
    let start = input.checkpoint();
    if keyword(input, "NOT")? {
        let inner_depth = nest(input, &start, depth)?;
        return Ok(Expr::Not(Box::new(not_expr(input, inner_depth)?)));
    }
    if opt_char(input, '(')? {
        let inner_depth = nest(input, &start, depth)?;
        let inner = or_expr(input, inner_depth)?;
        multispace0.parse_next(input)?;
        if !opt_char(input, ')')? {
            return cut("expected ')', AND or OR");
        }
        return Ok(inner);
    }
    predicate(input)
}

/// One level deeper, refused (at `start`) beyond FILTER_DEPTH_MAX.
fn nest<'a>(
    input: &mut &'a str,
    start: &<&'a str as Stream>::Checkpoint,
    depth: usize,
) -> PResult<usize> {
    if depth >= FILTER_DEPTH_MAX {
        input.reset(start);
        return cut(format!(
            "parentheses and NOTs nest deeper than FILTER_DEPTH_MAX ({FILTER_DEPTH_MAX})"
        ));
    }
    Ok(depth + 1)
}

const OPERATORS: [(&str, CompareOp); 7] = [
    ("<>", CompareOp::Ne),
    ("!=", CompareOp::Ne),
    ("<=", CompareOp::Le),
    (">=", CompareOp::Ge),
    ("=", CompareOp::Eq),
    ("<", CompareOp::Lt),
    (">", CompareOp::Gt),
];

fn predicate(input: &mut &str) -> PResult<Expr> {
    let field = field(input)?;
    multispace0.parse_next(input)?;
    for (symbol, op) in OPERATORS {
        if input.starts_with(symbol) {
            winnow::token::literal(symbol).parse_next(input)?;
            multispace0.parse_next(input)?;
            let literal = literal(input, &format!("after '{symbol}'"))?;
            return Ok(Expr::Compare { field, op, literal });
        }
    }
    if keyword(input, "IS")? {
        multispace0.parse_next(input)?;
        let negated = keyword(input, "NOT")?;
        multispace0.parse_next(input)?;
        if !keyword(input, "NULL")? {
            return cut(if negated {
                "expected NULL after IS NOT"
            } else {
                "expected NULL or NOT NULL after IS"
            });
        }
        return Ok(Expr::IsNull { field, negated });
    }
    let negated = keyword(input, "NOT")?;
    multispace0.parse_next(input)?;
    if keyword(input, "IN")? {
        let items = in_list(input)?;
        return Ok(Expr::In {
            field,
            negated,
            items,
        });
    }
    if keyword(input, "LIKE")? {
        let pattern = like_pattern(input)?;
        return Ok(Expr::Like {
            field,
            negated,
            pattern,
        });
    }
    if negated {
        return cut("expected IN or LIKE after NOT");
    }
    cut(format!(
        "expected an operator after {field}: =, !=, <>, <, <=, >, >=, IN, NOT IN, LIKE, \
         NOT LIKE, IS NULL or IS NOT NULL"
    ))
}

fn field(input: &mut &str) -> PResult<Field> {
    let start = input.checkpoint();
    let word: &str = take_while(0.., |c: char| {
        c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
    })
    .parse_next(input)?;
    let header_prefix = "header.";
    let field = if word.eq_ignore_ascii_case("tag") {
        Some(Field::Tag)
    } else if word.eq_ignore_ascii_case("key") {
        Some(Field::Key)
    } else {
        match (
            word.get(..header_prefix.len()),
            word.get(header_prefix.len()..),
        ) {
            (Some(prefix), Some(name))
                if prefix.eq_ignore_ascii_case(header_prefix) && !name.is_empty() =>
            {
                Some(Field::Header(name.to_string()))
            }
            _ => None,
        }
    };
    match field {
        Some(field) => Ok(field),
        None => {
            input.reset(&start);
            cut("expected a field (tag, key or header.NAME), NOT or '('")
        }
    }
}

fn in_list(input: &mut &str) -> PResult<Vec<Literal>> {
    multispace0.parse_next(input)?;
    if !opt_char(input, '(')? {
        return cut("expected '(' after IN");
    }
    let mut items = Vec::new();
    loop {
        multispace0.parse_next(input)?;
        if items.len() == FILTER_IN_LIST_ITEMS_MAX {
            return cut(format!(
                "more than FILTER_IN_LIST_ITEMS_MAX ({FILTER_IN_LIST_ITEMS_MAX}) items in an \
                 IN list"
            ));
        }
        items.push(literal(input, "in the IN list")?);
        multispace0.parse_next(input)?;
        if opt_char(input, ')')? {
            return Ok(items);
        }
        if !opt_char(input, ',')? {
            return cut("expected ',' or ')' in the IN list");
        }
    }
}

fn like_pattern(input: &mut &str) -> PResult<String> {
    multispace0.parse_next(input)?;
    let start = input.checkpoint();
    if !input.starts_with('\'') {
        return cut("expected a quoted pattern after LIKE, such as 'eu-%'");
    }
    let pattern = string(input)?;
    let percent = pattern.find('%');
    if percent.is_some_and(|i| i + 1 != pattern.len()) {
        input.reset(&start);
        return cut("'%' may only end a LIKE pattern (LIKE matches a prefix)");
    }
    Ok(pattern)
}

fn literal(input: &mut &str, context: &str) -> PResult<Literal> {
    if input.starts_with('\'') {
        return string(input).map(Literal::Str);
    }
    if input.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return number(input).map(Literal::Num);
    }
    cut(format!("expected a literal ('text' or a number) {context}"))
}

/// `'...'` with `''` standing for one quote.
fn string(input: &mut &str) -> PResult<String> {
    let start = input.checkpoint();
    '\''.parse_next(input)?;
    let mut text = String::new();
    loop {
        let chunk: &str = take_till(0.., '\'').parse_next(input)?;
        text.push_str(chunk);
        if !opt_char(input, '\'')? {
            input.reset(&start);
            return cut("unterminated string: expected a closing '");
        }
        if !opt_char(input, '\'')? {
            return Ok(text);
        }
        text.push('\'');
    }
}

fn number(input: &mut &str) -> PResult<Number> {
    let start = *input;
    let negative = opt_char(input, '-')?;
    if digits(input)?.is_empty() {
        return cut(if negative {
            "expected digits after '-'"
        } else {
            "expected a number"
        });
    }
    if opt_char(input, '.')? && digits(input)?.is_empty() {
        return cut("expected digits after '.'");
    }
    let text = &start[..start.len() - input.len()];
    match Number::parse(text) {
        Some(n) => Ok(n),
        None => cut("not a number"),
    }
}

fn digits<'a>(input: &mut &'a str) -> PResult<&'a str> {
    take_while(0.., |c: char| c.is_ascii_digit()).parse_next(input)
}

/// Consumes `c` if it comes next.
fn opt_char(input: &mut &str, c: char) -> PResult<bool> {
    Ok(winnow::combinator::opt(c).parse_next(input)?.is_some())
}

/// Consumes the keyword `word` (any case, whole word) if it comes next.
fn keyword(input: &mut &str, word: &str) -> PResult<bool> {
    let start = input.checkpoint();
    let found: &str =
        take_while(0.., |c: char| c.is_ascii_alphanumeric() || c == '_').parse_next(input)?;
    if found.eq_ignore_ascii_case(word) {
        return Ok(true);
    }
    input.reset(&start);
    Ok(false)
}

/// After optional whitespace, consumes the keyword `word` if it comes next; otherwise leaves
/// the input as it was.
fn next_keyword(input: &mut &str, word: &str) -> PResult<bool> {
    let start = input.checkpoint();
    multispace0.parse_next(input)?;
    if keyword(input, word)? {
        return Ok(true);
    }
    input.reset(&start);
    Ok(false)
}

#[cfg(test)]
mod tests;

//! Parser examples: what parses to what, what is refused and where.

use super::*;
use crate::eval::Fields;
use crate::Filter;

fn fields(key: Option<&str>, headers: &[(&str, &str)]) -> Fields {
    Fields {
        key: key.map(|k| k.as_bytes().to_vec()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.as_bytes().to_vec())))
            .collect(),
    }
}

fn matches(filter: &str, record: &Fields) -> bool {
    Filter::parse(filter)
        .unwrap_or_else(|e| panic!("{filter}: {e}"))
        .matches(record)
}

fn refused(filter: &str) -> FilterError {
    match Filter::parse(filter) {
        Ok(f) => panic!("{filter:?} parsed as {f}"),
        Err(e) => e,
    }
}

#[test]
fn the_issue_examples() {
    let red = fields(None, &[("tag", "red")]);
    assert!(matches("tag = 'red'", &red));
    assert!(!matches("tag = 'blue'", &red));
    let eu4 = fields(None, &[("region", "eu"), ("priority", "4")]);
    let us3 = fields(None, &[("region", "us"), ("priority", "3")]);
    let f = "header.region IN ('eu', 'us') AND header.priority > 3";
    assert!(matches(f, &eu4));
    assert!(!matches(f, &us3));
}

#[test]
fn precedence_not_and_or() {
    let r = fields(Some("k"), &[("tag", "a")]);
    // NOT binds tighter than AND, AND tighter than OR.
    assert!(matches("tag = 'x' AND tag = 'y' OR tag = 'a'", &r));
    assert!(!matches("tag = 'x' AND (tag = 'y' OR tag = 'a')", &r));
    assert!(matches("NOT tag = 'x' AND key = 'k'", &r));
    assert!(!matches("NOT (tag = 'a' AND key = 'k')", &r));
    assert!(matches("not tag = 'b' and KEY = 'k' Or tag = 'zz'", &r));
}

#[test]
fn missing_fields_and_non_numbers_make_comparisons_false() {
    let empty = Fields::default();
    assert!(!matches("tag != 'red'", &empty));
    assert!(matches("NOT tag = 'red'", &empty));
    assert!(!matches("tag NOT IN ('a')", &empty));
    assert!(matches("tag IS NULL", &empty));
    assert!(!matches("key IS NOT NULL", &empty));
    let word = fields(None, &[("n", "ten")]);
    assert!(!matches("header.n > 3", &word));
    assert!(!matches("header.n != 3", &word));
    assert!(!matches("header.n NOT IN (3, 4)", &word));
    assert!(matches("header.n NOT IN ('x', 'y')", &word));
}

#[test]
fn numbers_strings_like_and_in() {
    let r = fields(Some("eu-west"), &[("p", "10"), ("q", "it's")]);
    assert!(matches("header.p > 9", &r), "numeric, not byte order");
    assert!(
        matches("header.p < '9'", &r),
        "a string literal compares bytes"
    );
    assert!(matches("header.p = 10.0 AND header.p >= -1.5", &r));
    assert!(matches("header.p <> 11 AND header.p != 9", &r));
    assert!(matches("key LIKE 'eu-%' AND key NOT LIKE 'us%'", &r));
    assert!(matches("key LIKE 'eu-west'", &r));
    assert!(!matches("key LIKE 'eu'", &r));
    assert!(matches("header.q = 'it''s'", &r));
    assert!(matches("header.p IN ('x', 10)", &r));
}

#[test]
fn printing_is_canonical_and_parses_back() {
    let f = Filter::parse("NOT tag='a' and header.x-y.z in (1,'b''c') or key is not null").unwrap();
    let printed = f.to_string();
    assert_eq!(
        printed,
        "(NOT tag = 'a' AND header.x-y.z IN (1, 'b''c')) OR key IS NOT NULL"
    );
    assert_eq!(Filter::parse(&printed).unwrap(), f);
    let nested = Filter::parse("NOT NOT (tag = 'a' OR (key = 'b' OR key = 'c'))").unwrap();
    assert_eq!(
        nested.to_string(),
        "NOT NOT (tag = 'a' OR (key = 'b' OR key = 'c'))"
    );
}

#[test]
fn errors_point_at_the_column() {
    let e = refused("tag = AND x");
    assert_eq!(e.column, 7);
    let shown = e.to_string();
    assert!(shown.starts_with(
        "column 7: expected a literal ('text' or a number) after '=' in: tag = AND x\n"
    ));
    let (text_line, caret_line) = shown.split_once('\n').unwrap();
    assert_eq!(caret_line.trim(), "^");
    assert_eq!(
        caret_line.find('^'),
        text_line.find("AND x"),
        "the caret sits under the column"
    );
    let cases: [(&str, usize, &str); 14] = [
        ("", 1, "empty filter"),
        ("tag", 4, "expected an operator"),
        ("colour = 'red'", 1, "expected a field"),
        ("tag = 'red", 7, "unterminated string"),
        ("tag = 'a' AND", 14, "expected a field"),
        ("tag = 'a' xor tag = 'b'", 11, "expected AND, OR"),
        ("(tag = 'a'", 11, "expected ')'"),
        ("tag IN 'a'", 8, "expected '('"),
        ("tag IN ('a' 'b')", 13, "expected ',' or ')'"),
        ("tag LIKE 'a%b'", 10, "'%' may only end"),
        ("tag IS NOT 'x'", 12, "expected NULL"),
        ("tag = 1.", 9, "expected digits after '.'"),
        ("tag NOT = 'a'", 9, "expected IN or LIKE"),
        ("header. = 'a'", 1, "expected a field"),
    ];
    for (text, column, message) in cases {
        let e = refused(text);
        assert_eq!(e.column, column, "{text:?}: {e}");
        assert!(e.message.contains(message), "{text:?}: {e}");
    }
}

#[test]
fn limits_are_enforced() {
    let deep_ok = format!("{}tag = 'a'{}", "(".repeat(32), ")".repeat(32));
    assert!(Filter::parse(&deep_ok).is_ok());
    let too_deep = format!("{}tag = 'a'{}", "(".repeat(33), ")".repeat(33));
    let e = refused(&too_deep);
    assert_eq!(e.column, 33, "{e}");
    assert!(e.message.contains("FILTER_DEPTH_MAX"));
    let nots = format!("{}tag = 'a'", "NOT ".repeat(33));
    assert!(refused(&nots).message.contains("FILTER_DEPTH_MAX"));
    let items = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    assert!(Filter::parse(&format!("tag IN ({})", items(1000))).is_ok());
    let e = refused(&format!("tag IN ({})", items(1001)));
    assert!(e.message.contains("FILTER_IN_LIST_ITEMS_MAX"), "{e}");
    let long = format!("tag = '{}'", "x".repeat(FILTER_TEXT_BYTES_MAX));
    let e = refused(&long);
    assert!(e.message.contains("FILTER_TEXT_BYTES_MAX"), "{e}");
    assert!(
        e.to_string().contains('…'),
        "a long text is echoed as a window"
    );
}

//! Properties of the filter crate: (a) a generated expression printed and parsed back is the
//! same expression and decides every record the same; (b) the parser never panics on arbitrary
//! input and refuses malformed input with a column inside the text; (c) `select` keeps exactly
//! the records a per-record evaluation keeps, at their offsets, and moves past the rest.

use bytes::Bytes;
use proptest::prelude::*;
use tinymq_filter::eval::Fields;
use tinymq_filter::number::Number;
use tinymq_filter::{
    decode_sparse, select, CompareOp, Expr, Field, Filter, Literal, RecordFields, SelectOptions,
};
use tinymq_protocol::batch::{
    stamp_base_offset, BatchBuilder, BatchIter, Compression, ProducerStamp, RecordInput,
};

/// Small alphabets, so that generated expressions often hit generated records.
const VALUES: [&str; 7] = ["red", "blue", "eu", "eu-west", "3", "-1.5", "10"];
const HEADERS: [&str; 3] = ["region", "priority", "x.y-z"];

fn field() -> impl Strategy<Value = Field> {
    prop_oneof![
        Just(Field::Tag),
        Just(Field::Key),
        prop::sample::select(&HEADERS[..]).prop_map(|h| Field::Header(h.to_string())),
    ]
}

fn literal() -> impl Strategy<Value = Literal> {
    prop_oneof![
        prop::sample::select(&VALUES[..]).prop_map(|v| Literal::Str(v.to_string())),
        Just(Literal::Str("it's".into())),
        (-20i64..20, prop::option::of(0u32..100)).prop_map(|(i, frac)| {
            let text = match frac {
                Some(f) => format!("{i}.{f}"),
                None => i.to_string(),
            };
            Literal::Num(Number::parse(&text).expect("a number"))
        }),
    ]
}

fn op() -> impl Strategy<Value = CompareOp> {
    prop::sample::select(
        &[
            CompareOp::Eq,
            CompareOp::Ne,
            CompareOp::Lt,
            CompareOp::Le,
            CompareOp::Gt,
            CompareOp::Ge,
        ][..],
    )
}

fn predicate() -> impl Strategy<Value = Expr> {
    prop_oneof![
        (field(), op(), literal()).prop_map(|(field, op, literal)| Expr::Compare {
            field,
            op,
            literal
        }),
        (
            field(),
            any::<bool>(),
            prop::collection::vec(literal(), 1..4)
        )
            .prop_map(|(field, negated, items)| Expr::In {
                field,
                negated,
                items
            }),
        (
            field(),
            any::<bool>(),
            prop::sample::select(&["eu%", "eu-west", "%", "r%"][..])
        )
            .prop_map(|(field, negated, p)| Expr::Like {
                field,
                negated,
                pattern: p.to_string()
            }),
        (field(), any::<bool>()).prop_map(|(field, negated)| Expr::IsNull { field, negated }),
    ]
}

/// Expressions up to a depth the printed form (which parenthesizes every operand) keeps
/// within FILTER_DEPTH_MAX.
pub fn expr() -> impl Strategy<Value = Expr> {
    predicate().prop_recursive(5, 40, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|e| Expr::Not(Box::new(e))),
            prop::collection::vec(inner.clone(), 2..4).prop_map(Expr::And),
            prop::collection::vec(inner, 2..4).prop_map(Expr::Or),
        ]
    })
}

fn value() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop::option::weighted(0.8, prop::sample::select(&VALUES[..]))
        .prop_map(|v| v.map(|v| v.as_bytes().to_vec()))
}

fn fields() -> impl Strategy<Value = Fields> {
    let names = prop::sample::select(&["tag", "region", "priority", "x.y-z", "other"][..]);
    (value(), prop::collection::vec((names, value()), 0..5)).prop_map(|(key, headers)| Fields {
        key,
        headers: headers
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn printed_expressions_parse_back_and_decide_the_same(
        e in expr(),
        records in prop::collection::vec(fields(), 1..20),
    ) {
        let printed = e.to_string();
        let parsed = Filter::parse(&printed)
            .unwrap_or_else(|err| panic!("{printed}: {err}"));
        prop_assert_eq!(parsed.expr(), &e);
        let original = Filter::from(e);
        for r in &records {
            prop_assert_eq!(parsed.matches(r), original.matches(r));
        }
    }

    #[test]
    fn arbitrary_text_never_panics_and_errors_point_inside(text in ".{0,80}") {
        check_refusal(&text);
    }

    #[test]
    fn filter_like_text_never_panics_and_errors_point_inside(
        words in prop::collection::vec(prop::sample::select(&[
            "tag", "key", "header.a", "header.", "=", "!=", "<>", "<", ">=", "IN", "in", "NOT", "LIKE", "IS", "NULL", "AND", "or", "(", ")", ",", "'x'", "'e%'", "''''", "'", "-", "12", "1.5", "-3", ".", " ", "\t",
        ][..]), 0..16),
    ) {
        check_refusal(&words.concat());
        check_refusal(&words.join(" "));
    }

    #[test]
    fn mangled_expressions_are_refused_inside_the_text(
        e in expr(),
        cut_at in any::<prop::sample::Index>(),
        insert in prop::sample::select(&["(", ")", "'", "AND", "=", ",", "IN", "%", "-", "."][..]),
    ) {
        let printed = e.to_string();
        let mut at = cut_at.index(printed.len() + 1);
        while !printed.is_char_boundary(at) {
            at -= 1;
        }
        check_refusal(&printed[..at]);
        let mangled = format!("{}{insert}{}", &printed[..at], &printed[at..]);
        check_refusal(&mangled);
        if insert == "'" {
            // A valid filter holds an even number of quotes: one more cannot parse.
            prop_assert!(Filter::parse(&mangled).is_err(), "{} parsed", mangled);
        }
    }
}

/// Parses `text`; a refusal must name a column inside it (or just past its end) and show it,
/// and what parses must print in a form that parses back to the same expression.
fn check_refusal(text: &str) {
    let parsed = Filter::parse(text);
    if let Ok(filter) = &parsed {
        let printed = filter.to_string();
        assert_eq!(
            Filter::parse(&printed).as_ref(),
            Ok(filter),
            "{text:?} -> {printed:?}"
        );
    }
    if let Err(e) = parsed {
        let chars = text.chars().count();
        assert!(
            e.column >= 1 && e.column <= chars + 1,
            "{text:?}: column {} of {chars} chars",
            e.column
        );
        assert!(e.to_string().starts_with(&format!("column {}: ", e.column)));
    }
}

fn build_batch(base_offset: i64, compression: Compression, records: &[Fields]) -> Bytes {
    let mut builder = BatchBuilder::new(compression, ProducerStamp::NONE);
    for (i, r) in records.iter().enumerate() {
        let headers: Vec<(&str, Option<&[u8]>)> = r
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_deref()))
            .collect();
        let value = i.to_string();
        builder.push(&RecordInput {
            timestamp_ms: 5_000 + i as i64,
            key: r.key.as_deref(),
            value: Some(value.as_bytes()),
            headers: &headers,
        });
    }
    let mut bytes = builder.build().expect("builds").to_vec();
    stamp_base_offset(&mut bytes, base_offset);
    Bytes::from(bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn select_keeps_exactly_what_evaluation_keeps(
        e in expr(),
        batches in prop::collection::vec(
            (prop::collection::vec(fields(), 1..8), any::<bool>()), 1..6),
        from_skip in 0i64..4,
    ) {
        let filter = Filter::from(e);
        let (mut input, mut expected, mut offset) = (Vec::new(), Vec::new(), 100i64);
        let from_offset = offset + from_skip;
        let mut scanned = 0u64;
        for (records, compressed) in &batches {
            let codec = if *compressed { Compression::Lz4 } else { Compression::None };
            input.extend_from_slice(&build_batch(offset, codec, records));
            for r in records {
                if offset >= from_offset {
                    scanned += 1;
                    if filter.matches(r) {
                        expected.push(offset);
                    }
                }
                offset += 1;
            }
        }
        let options = SelectOptions { from_offset, decompressed_bytes_max: 1 << 20 };
        let s = select(&input, |_, r: &dyn RecordFields| filter.matches(r), &options)
            .expect("selects");
        let mut got = Vec::new();
        for batch in BatchIter::new(s.records.clone()) {
            for record in decode_sparse(&batch.expect("valid batch"), 1 << 20).expect("decodes") {
                prop_assert!(filter.matches(&record));
                got.push(record.offset);
            }
        }
        prop_assert_eq!(&got, &expected);
        prop_assert_eq!(s.kept, expected.len() as u64);
        prop_assert_eq!(s.kept + s.dropped, scanned);
        prop_assert_eq!(s.next_offset, offset.max(from_offset));
    }
}

//! Filter expressions from arbitrary text: the parser must never panic; whatever parses must
//! print in a form that parses back to the same expression, and a refusal must name a column
//! inside the text. The remaining bytes are run through `select` as batches (as the broker
//! runs log data through it), which must not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tinymq_filter::{select, Filter, RecordFields, SelectOptions, FILTER_TEXT_BYTES_MAX};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let split = (usize::from(split) * rest.len() / 255).min(rest.len());
    let (text, batches) = rest.split_at(split);
    let text = String::from_utf8_lossy(text);
    match Filter::parse(&text) {
        Ok(filter) => {
            let printed = filter.to_string();
            // Printing normalizes spacing, so it may outgrow the text limit; it never nests
            // deeper than the text.
            if printed.len() <= FILTER_TEXT_BYTES_MAX {
                let again = Filter::parse(&printed).expect("the printed form parses");
                assert_eq!(again, filter, "{printed}");
            }
            let options = SelectOptions {
                from_offset: 0,
                decompressed_bytes_max: 1 << 20,
            };
            let _ = select(batches, |_, r: &dyn RecordFields| filter.matches(r), &options);
        }
        Err(e) => {
            assert!(e.column >= 1 && e.column <= text.chars().count() + 1);
        }
    }
});

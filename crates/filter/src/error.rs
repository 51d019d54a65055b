//! Why a filter text was refused, and where: the 1-based column (in characters) of the first
//! thing that does not fit, shown under the text with a caret.

use std::fmt;

/// A refused filter. `Display` gives the wire text of INVALID_FILTER:
///
/// ```text
/// column 7: expected a literal after '=' in: tag = AND x
///                                                  ^
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct FilterError {
    /// 1-based, in characters; one past the last character when the text ended too early.
    pub column: usize,
    pub message: String,
    /// The text as echoed (a window around the column for long texts), single-line.
    snippet: String,
    /// The caret's position inside `snippet`, in characters.
    snippet_column: usize,
}

/// Characters of context shown either side of the column in a long text.
const SNIPPET_CONTEXT_CHARS: usize = 60;

impl FilterError {
    /// An error at byte `offset` of `text` (clamped to the text).
    pub fn at(text: &str, offset: usize, message: impl Into<String>) -> FilterError {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let column = text[..offset].chars().count() + 1;
        let chars: Vec<char> = text
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let from = (column - 1).saturating_sub(SNIPPET_CONTEXT_CHARS);
        let to = (column + SNIPPET_CONTEXT_CHARS).min(chars.len());
        let mut snippet = String::new();
        if from > 0 {
            snippet.push('…');
        }
        snippet.extend(&chars[from..to]);
        if to < chars.len() {
            snippet.push('…');
        }
        FilterError {
            column,
            message: message.into(),
            snippet,
            snippet_column: column - from + usize::from(from > 0),
        }
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head = format!("column {}: {} in: ", self.column, self.message);
        let indent = head.chars().count() + self.snippet_column - 1;
        write!(f, "{head}{}\n{}^", self.snippet, " ".repeat(indent))
    }
}

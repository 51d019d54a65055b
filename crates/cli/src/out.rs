//! Standard output for every tool command. A reader that goes away (`tinymq topic list |
//! head -1`) is a normal way for a listing to end: writes fail with [`Closed`], which `main`
//! turns into exit status 0, instead of `println!`'s panic (exit 101).

use std::io::Write;

/// Standard output was closed by its reader; the command stops and exits 0.
#[derive(Debug)]
pub struct Closed;

impl std::fmt::Display for Closed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("standard output closed")
    }
}

impl std::error::Error for Closed {}

/// Writes `args` and a newline to stdout, flushed (so a closed reader is noticed now).
pub fn line(args: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(io_error)
}

/// A write error as the command's error: [`Closed`] for a reader that went away.
pub fn io_error(e: std::io::Error) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Closed.into()
    } else {
        anyhow::Error::new(e).context("writing to standard output")
    }
}

/// `println!` for tool output: `outln!("{x}")?` ends the command quietly when stdout closes.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::line(format_args!($($arg)*))
    };
}

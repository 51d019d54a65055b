//! The frame of the log's small text checkpoint files (`leader-epoch-checkpoint`,
//! `log-start-offset-checkpoint`): a first line with the crc32c of everything after it, as 8
//! lowercase hex digits, then the body's lines, each ending in a newline. A file that does not
//! frame a body whole (torn, truncated, bit-flipped, not text) is refused with the reason, and
//! its owner decides what a damaged checkpoint means.

/// The file's bytes for `body` (lines ending in `\n`).
pub(crate) fn framed(body: &str) -> Vec<u8> {
    let mut bytes = format!("{:08x}\n", crc32c::crc32c(body.as_bytes())).into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// The body of a file's bytes, checked against its CRC, without its final newline.
pub(crate) fn body(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_string())?;
    let (crc, body) = text.split_once('\n').ok_or("no CRC line")?;
    let stored = (crc.len() == 8)
        .then(|| u32::from_str_radix(crc, 16).ok())
        .flatten()
        .ok_or_else(|| format!("bad CRC line {crc:?}"))?;
    let computed = crc32c::crc32c(body.as_bytes());
    if stored != computed {
        return Err(format!(
            "CRC mismatch: stored {stored:08x}, computed {computed:08x}"
        ));
    }
    Ok(body.strip_suffix('\n').ok_or("no final newline")?)
}

/// A non-negative decimal number, digits only.
pub(crate) fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad number {text:?}"));
    }
    text.parse()
        .map_err(|_| format!("number {text:?} out of range"))
}

/// Reads and decodes the checkpoint at `path`: `Ok(None)` without one, `Err` (why) for one
/// that is longer than `bytes_max`, unreadable, or that `decode` refuses.
pub(crate) fn load<T>(
    storage: &dyn crate::storage::Storage,
    path: &std::path::Path,
    bytes_max: u64,
    decode: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Result<Option<T>, String> {
    if !storage.exists(path) {
        return Ok(None);
    }
    let read = || -> std::io::Result<Result<T, String>> {
        let file = storage.open(path, false)?;
        let len = file.byte_len()?;
        if len > bytes_max {
            return Ok(Err(format!("{len} bytes, over {bytes_max}")));
        }
        // Bounded just above.
        let mut bytes = vec![0u8; len as usize];
        file.read_exact_at(&mut bytes, 0)?;
        Ok(decode(&bytes))
    };
    read()
        .unwrap_or_else(|e| Err(format!("unreadable: {e}")))
        .map(Some)
}

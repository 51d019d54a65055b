//! The process's own figures from Linux `/proc`: CPU time, resident memory, open files.

pub(crate) struct ProcStat {
    pub cpu_seconds: f64,
    pub rss_bytes: u64,
}

/// From `/proc/self/stat`: fields 14 and 15 (utime, stime, in clock ticks) and 24 (rss, in
/// pages), counted after the command name, which may itself hold spaces and parentheses.
pub(crate) fn stat() -> Option<ProcStat> {
    let text = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n.checked_sub(3)?)?.parse().ok() };
    let (utime, stime, rss) = (field(14)?, field(15)?, field(24)?);
    // SAFETY: sysconf reads a constant of the running system; no memory is passed.
    let (ticks, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    let page = u64::try_from(page).ok()?;
    Some(ProcStat {
        cpu_seconds: utime.saturating_add(stime) as f64 / ticks as f64,
        rss_bytes: rss.saturating_mul(page),
    })
}

pub(crate) fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(entries.count() as u64)
}

//! Flag value parsers shared by the commands: numbers where 0 (or another value) would mean
//! nothing are refused while the arguments are parsed, with the rule in the message, rather
//! than silently standing for a default; and English counts ("1 partition").

/// A count or size of at least 1.
pub fn positive_u32(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("must be at least 1 (leave the flag out for the default)".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

/// A count, size or duration of at least 1.
pub fn positive_u64(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(0) => Err("must be at least 1 (leave the flag out for the default)".into()),
        Ok(v) => Ok(v),
        Err(e) => Err(e.to_string()),
    }
}

/// A size of at least 1.
pub fn positive_usize(text: &str) -> Result<usize, String> {
    positive_u64(text).and_then(|v| usize::try_from(v).map_err(|e| e.to_string()))
}

/// A number of seconds above 0.
pub fn positive_secs(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a number above 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// At least 1, or -1 for "no bound" (0 would mean nothing).
pub fn positive_or_unbounded(text: &str) -> Result<i64, String> {
    match text.parse::<i64>() {
        Ok(v) if v == -1 || v >= 1 => Ok(v),
        Ok(_) => Err("must be at least 1, or -1 for no bound".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// `HOST:PORT` to the address to bind: an IP address, or a host name resolved here (its first
/// address, IPv4 first), as clients accept both.
pub fn socket_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    let all: Vec<_> = text
        .to_socket_addrs()
        .map_err(|e| format!("{text}: not HOST:PORT, or the host name does not resolve ({e})"))?
        .collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .copied()
        .ok_or_else(|| format!("{text}: the host name resolves to no address"))
}

/// `n noun` with the noun in the plural unless n is 1.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_refused_and_minus_one_only_where_it_means_unbounded() {
        assert!(positive_u32("0").is_err());
        assert_eq!(positive_u32("3"), Ok(3));
        assert!(positive_or_unbounded("0").is_err());
        assert!(positive_or_unbounded("-2").is_err());
        assert_eq!(positive_or_unbounded("-1"), Ok(-1));
        assert!(positive_secs("0").is_err());
        assert_eq!(count(1u32, "partition"), "1 partition");
        assert_eq!(count(2u32, "partition"), "2 partitions");
        assert!(socket_addr("localhost:7").unwrap().ip().is_loopback());
        assert!(socket_addr("localhost").is_err(), "no port");
    }
}

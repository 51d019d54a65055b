//! How a client secures its connections: TLS (trusting the given CA, with an optional client
//! certificate) and a login for the server's authentication. The default is neither: plain
//! TCP, no login.

pub use tinymq_auth::ScramMechanism;
pub use tinymq_tls::ClientTls;

/// Security for every connection a client (or a node's outgoing link) opens.
#[derive(Clone, Default, Debug)]
pub struct Security {
    /// `None`: plain TCP.
    pub tls: Option<ClientTls>,
    /// `None`: no authentication exchange after the handshake.
    pub login: Option<Login>,
}

/// The credentials a connection authenticates with after its handshake.
#[derive(Clone)]
pub struct Login {
    pub mechanism: ScramMechanism,
    pub user: String,
    pub password: String,
    /// Act as this user (nodes only, for requests they make on a user's behalf).
    pub authzid: Option<String>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("mechanism", &self.mechanism)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("authzid", &self.authzid)
            .finish()
    }
}

/// The host part of `host:port` (`[::1]:9092` → `::1`), the TLS server name to check.
pub(crate) fn host_of(addr: &str) -> &str {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => addr,
    };
    host.trim_start_matches('[').trim_end_matches(']')
}

#[cfg(test)]
mod tests {
    use super::host_of;

    #[test]
    fn host_of_strips_the_port_and_brackets() {
        assert_eq!(host_of("127.0.0.1:21581"), "127.0.0.1");
        assert_eq!(host_of("localhost:1"), "localhost");
        assert_eq!(host_of("[::1]:9092"), "::1");
        assert_eq!(host_of("node-3"), "node-3");
    }
}

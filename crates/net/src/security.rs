//! What a listener asks of a connection before serving it: TLS (a [`ServerTls`] whose
//! configuration may be reloaded while the listener runs) and, beside it, authentication.

pub use tinymq_tls::{ClientAuth, ServerTls};

/// The security of one listener; cheap to clone (a reload through any clone is seen by all).
#[derive(Debug, Clone, Default)]
pub struct ListenerSecurity {
    /// `None`: plain TCP. `Some`: every connection must start with a TLS handshake.
    pub tls: Option<ServerTls>,
}

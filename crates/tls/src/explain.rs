//! Plain-language reasons for the TLS failures people meet when setting TLS up: an untrusted
//! or expired certificate, a name the certificate does not cover, a missing client
//! certificate, and a server that does not speak TLS at all.

use rustls::{AlertDescription, CertificateError};

/// The explanation of `e` when it is a TLS failure (a certificate refused, an alert, a peer
/// that does not speak TLS): a failure that trying again does not cure. `None` for plain I/O
/// errors (a reset, a timeout), which may be transient.
pub fn tls_failure(e: &std::io::Error) -> Option<String> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .map(|_| explain(e))
}

/// What went wrong in a TLS handshake, in words that say what to fix.
pub fn explain(e: &std::io::Error) -> String {
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return match e.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => format!(
                "the server closed the connection during the TLS handshake ({e}); does it speak TLS on this port?"
            ),
            _ => e.to_string(),
        };
    };
    if is_not_tls_answer(tls) {
        return format!("the server does not speak TLS on this port ({tls}); connect without --tls-ca, or give the server --tls-cert/--tls-key");
    }
    match tls {
        rustls::Error::InvalidCertificate(cert) => match cert {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => format!(
                "the server's certificate is not trusted: it is not signed by the CA given with --tls-ca ({tls})"
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("the server's certificate has expired ({tls})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("the server's certificate is not valid yet ({tls})")
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("the server's certificate does not name the address connected to ({tls})")
            }
            CertificateError::Other(other) => match misissued(&format!("{other:?}")) {
                Some(why) => format!("the server's certificate was refused: {why} ({tls})"),
                None => format!("the server's certificate was refused ({tls})"),
            },
            _ => format!("the server's certificate was refused ({tls})"),
        },
        rustls::Error::AlertReceived(
            AlertDescription::CertificateRequired | AlertDescription::HandshakeFailure,
        ) => format!(
            "the server refused the TLS handshake ({tls}); it may require a client certificate (--tls-cert/--tls-key)"
        ),
        rustls::Error::AlertReceived(
            AlertDescription::UnknownCA
            | AlertDescription::BadCertificate
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::DecryptError,
        ) => format!(
            "the server refused this client's certificate ({tls}); is it signed by the server's --tls-ca and still valid?"
        ),
        _ => format!("TLS handshake failed: {tls}"),
    }
}

/// The two ways a hand-made certificate usually goes wrong, in words: webpki reports them only
/// by their variant names.
fn misissued(detail: &str) -> Option<&'static str> {
    if detail.contains("UnsupportedCertVersion") {
        Some("it is an X.509 v1 certificate; sign it again with extensions (subjectAltName, extendedKeyUsage), e.g. `openssl x509 -req ... -extfile ext.cnf` as docs/operate.md shows")
    } else if detail.contains("CaUsedAsEndEntity") {
        Some("it is the CA certificate itself; give the server a certificate signed by that CA, not the CA's own")
    } else {
        None
    }
}

/// Whether a TLS client's handshake failed because the other end is not a TLS server: a
/// tinymq server answers a ClientHello on a plain port with an `unexpected_message` alert;
/// anything else that is not TLS shows up as an unreadable record.
pub fn is_not_tls_answer(e: &rustls::Error) -> bool {
    matches!(
        e,
        rustls::Error::AlertReceived(AlertDescription::UnexpectedMessage)
            | rustls::Error::InvalidMessage(_)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_made_certificate_mistakes_are_named() {
        let v1 = misissued("OtherError(UnsupportedCertVersion)").unwrap();
        assert!(v1.contains("X.509 v1"), "{v1}");
        let ca = misissued("OtherError(CaUsedAsEndEntity)").unwrap();
        assert!(ca.contains("CA certificate itself"), "{ca}");
        assert_eq!(misissued("OtherError(Something)"), None);
    }
}

//! The identity a verified client certificate carries: its subject's common name.

use rustls_pki_types::CertificateDer;
use x509_parser::prelude::{FromDer, X509Certificate};

/// Longest principal name taken from a certificate (longer ones are not used as names).
pub const PRINCIPAL_BYTES_MAX: usize = 255;

/// The subject CN of the end-entity certificate (the first of `certs`), when it has one
/// that is usable as a name: 1..=255 bytes of UTF-8 without control characters. Call it only
/// with certificates the TLS handshake verified.
pub fn peer_principal(certs: &[CertificateDer<'_>]) -> Option<String> {
    let leaf = certs.first()?;
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let cn = subject.iter_common_name().next()?.as_str().ok()?;
    let usable =
        !cn.is_empty() && cn.len() <= PRINCIPAL_BYTES_MAX && !cn.chars().any(char::is_control);
    usable.then(|| cn.to_string())
}

//! Loading, reloading and principal extraction, on certificates made with rcgen.

use std::path::{Path, PathBuf};

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

use crate::{peer_principal, server_name, ClientAuth, ClientTls, ServerTls, TlsError};

struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// A CA and a leaf (subject CN `cn`, when given) written to `dir`.
fn pki(dir: &Path, cn: Option<&str>) -> Files {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "test ca");
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let files = Files {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    std::fs::write(&files.ca, ca_cert.pem()).unwrap();
    std::fs::write(&files.cert, cert.pem()).unwrap();
    std::fs::write(&files.key, key.serialize_pem()).unwrap();
    files
}

#[test]
fn the_principal_is_the_subject_common_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = pki(dir, Some("alice"));
    let certs = crate::pem::certificates(&files.cert).unwrap();
    assert_eq!(peer_principal(&certs).as_deref(), Some("alice"));
    let files = pki(dir, None);
    let certs = crate::pem::certificates(&files.cert).unwrap();
    assert_eq!(peer_principal(&certs), None, "no CN, no principal");
    assert_eq!(peer_principal(&[]), None);
}

#[test]
fn load_errors_name_the_file_and_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = pki(dir, Some("server"));
    let missing = dir.join("missing.pem");
    let err = ServerTls::load(&missing, &files.key, None, ClientAuth::None).unwrap_err();
    assert!(err.to_string().contains("missing.pem"), "{err}");
    let err = ServerTls::load(&files.cert, &files.cert, None, ClientAuth::None).unwrap_err();
    assert!(matches!(err, TlsError::NoKey { .. }), "{err}");
    let err = ServerTls::load(&files.key, &files.key, None, ClientAuth::None).unwrap_err();
    assert!(matches!(err, TlsError::NoCertificates { .. }), "{err}");
    let err = ServerTls::load(&files.cert, &files.key, None, ClientAuth::Required).unwrap_err();
    assert!(matches!(err, TlsError::ClientAuthWithoutCa(_)), "{err}");
    let err = ClientTls::load(&files.ca, Some(&files.cert), None).unwrap_err();
    assert!(matches!(err, TlsError::HalfClientIdentity), "{err}");
    ServerTls::load(
        &files.cert,
        &files.key,
        Some(&files.ca),
        ClientAuth::Optional,
    )
    .unwrap();
    ClientTls::load(&files.ca, Some(&files.cert), Some(&files.key)).unwrap();
}

#[test]
fn a_failed_reload_keeps_the_configuration_in_force() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let files = pki(dir, Some("server"));
    let tls = ServerTls::load(&files.cert, &files.key, Some(&files.ca), ClientAuth::None).unwrap();
    let before = tls.config();
    std::fs::write(&files.key, "not a key").unwrap();
    assert!(tls.reload().is_err());
    assert!(
        Arc::ptr_eq(&before, &tls.config()),
        "the old configuration stays"
    );
    pki(dir, Some("server"));
    tls.reload().unwrap();
    let shared = tls.clone();
    assert!(
        !Arc::ptr_eq(&before, &shared.config()),
        "clones see the reload"
    );
}

#[test]
fn client_auth_and_server_names_parse() {
    assert_eq!("required".parse(), Ok(ClientAuth::Required));
    assert_eq!("optional".parse(), Ok(ClientAuth::Optional));
    assert_eq!("none".parse(), Ok(ClientAuth::None));
    assert!("yes".parse::<ClientAuth>().is_err());
    assert!(matches!(
        server_name("127.0.0.1").unwrap(),
        rustls_pki_types::ServerName::IpAddress(_)
    ));
    assert!(matches!(
        server_name("[::1]").unwrap(),
        rustls_pki_types::ServerName::IpAddress(_)
    ));
    assert!(matches!(
        server_name("broker-1.example").unwrap(),
        rustls_pki_types::ServerName::DnsName(_)
    ));
    assert!(server_name("not a name").is_err());
}

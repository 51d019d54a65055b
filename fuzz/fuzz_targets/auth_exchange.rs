//! Drives both sides of a SCRAM exchange with arbitrary peer messages: a `ScramServer` with an
//! arbitrary client-first and client-final (also after a valid client-first, so the final's
//! parser and proof check are reached), and a `ScramClient` with an arbitrary server-first and
//! server-final. Nothing may panic, and an exchange must never succeed on forged messages.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tinymq_auth::{CredentialLookup, ScramClient, ScramMechanism, ScramServer, StoredCredential};

struct Alice;

impl CredentialLookup for Alice {
    fn credential(&self, user: &str, m: ScramMechanism) -> Option<StoredCredential> {
        static CREDS: OnceLock<[StoredCredential; 2]> = OnceLock::new();
        let creds = CREDS.get_or_init(|| {
            ScramMechanism::ALL.map(|m| StoredCredential::derive(m, "secret password", 4096))
        });
        (user == "alice").then(|| creds.iter().find(|c| c.mechanism == m).cloned())?
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, rest)) = data.split_first() else { return };
    let mechanism = ScramMechanism::ALL[usize::from(control & 1)];
    let split = (usize::from(control >> 1) * rest.len() / 128).min(rest.len());
    let (first, last) = rest.split_at(split);

    let mut server = ScramServer::new(mechanism);
    if server.first(first, &Alice).is_ok() {
        // The password is unknown to the input, so no arbitrary final can succeed.
        assert!(server.finish(last).is_err());
    }
    let mut server = ScramServer::new(mechanism);
    if server.first(b"n,,n=alice,r=fuzznonce", &Alice).is_ok() {
        assert!(server.finish(last).is_err());
    }

    let mut client = ScramClient::with_nonce(mechanism, "alice", "pw", None, "fuzz");
    client.first();
    if client.second(first).is_ok() {
        assert!(client.finish(last).is_err());
    }
});

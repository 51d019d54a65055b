//! SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as two state machines with no I/O:
//! [`ScramServer`] for one exchange on a server, [`ScramClient`] for one on a client.
//!
//! Messages are parsed strictly by the RFC's grammar, each at most [`SCRAM_MESSAGE_BYTES_MAX`]
//! bytes. Channel binding is not offered: a client sends `n,` (or `y,`), never `p=`. An
//! authorization identity (`a=`) is carried through to [`Authenticated::authzid`]; whether it
//! may be used is the caller's decision. Passwords are used as their UTF-8 bytes (no SASLprep).
//!
//! Each server exchange adds 24 random bytes to the client's nonce, and the client-final must
//! carry that combined nonce, so a client-final recorded from one exchange fails in any other.
//! For an unknown user the server goes on with a fake verifier derived from
//! [`CredentialLookup::fake_key`] (the cluster secret's, else a per-process random key), and
//! fails at `finish` with the same error as for a wrong password.

use std::sync::OnceLock;

use subtle::ConstantTimeEq;

use crate::credential::{
    check_iterations, ClientKeys, CredentialLookup, ScramMechanism, StoredCredential,
    SCRAM_ITERATIONS_DEFAULT, SCRAM_SALT_BYTES_MAX, SCRAM_SALT_BYTES_MIN, USER_NAME_BYTES_MAX,
};
use crate::crypto;
use crate::error::AuthError;
use crate::node::parse_node_user;
use crate::principal::Principal;

/// Longest SCRAM message either side accepts.
pub const SCRAM_MESSAGE_BYTES_MAX: usize = 4096;
/// Random bytes each side adds to the nonce (before base64).
const NONCE_RANDOM_BYTES: usize = 24;

/// Who a successful exchange proved the peer to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Authenticated {
    pub user: String,
    /// The identity the client asked to act as (`a=`), if any.
    pub authzid: Option<String>,
}

impl Authenticated {
    /// The principal the login proves: `Node:broker-3` for node user `node:broker:3`,
    /// otherwise `User:NAME`. (Acting as `authzid` instead is the caller's decision.)
    pub fn principal(&self) -> Principal {
        match parse_node_user(&self.user) {
            Some((kind, id)) => Principal::node(kind, id),
            None => Principal::user(&self.user),
        }
    }
}

/// The server side of one exchange: `first` answers the client-first with the server-first,
/// `finish` checks the client-final and answers with the server-final (`v=...`). Any error
/// ends the exchange; start a new `ScramServer` for another attempt.
pub struct ScramServer {
    mechanism: ScramMechanism,
    fixed_nonce: Option<String>,
    /// See [`ScramServer::accepting_repeated_client_nonce`].
    repeated_client_nonce_ok: bool,
    state: ServerState,
}

/// Shows the mechanism and the step, never keys.
impl std::fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let step = match &self.state {
            ServerState::Initial => "initial",
            ServerState::WaitingFinal(_) => "waiting for client-final",
            ServerState::Done => "done",
        };
        write!(f, "ScramServer({}, {step})", self.mechanism)
    }
}

enum ServerState {
    Initial,
    WaitingFinal(Box<ServerExchange>),
    Done,
}

struct ServerExchange {
    user: String,
    authzid: Option<String>,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    /// The client's part of `nonce` (its first bytes).
    client_nonce_bytes: usize,
    credential: StoredCredential,
    /// False when the user is unknown and `credential` is the fake one.
    known: bool,
}

impl ScramServer {
    pub fn new(mechanism: ScramMechanism) -> ScramServer {
        ScramServer {
            mechanism,
            fixed_nonce: None,
            repeated_client_nonce_ok: false,
            state: ServerState::Initial,
        }
    }

    /// Also accepts a client-final whose `r=` is the client nonce followed by the whole
    /// combined nonce: what librdkafka before 2.6.1 sends (its PR #4895), which Kafka brokers
    /// accept. The combined nonce must still be there in full, so the server's fresh part
    /// still defeats a replay. Only the Kafka listener uses this.
    pub fn accepting_repeated_client_nonce(mut self) -> ScramServer {
        self.repeated_client_nonce_ok = true;
        self
    }

    /// A server whose nonce part is `server_nonce` instead of random: for test vectors only.
    /// A fixed server nonce would let a recorded client-final be replayed, so this exists
    /// only in this crate's tests.
    #[cfg(test)]
    pub fn with_nonce(mechanism: ScramMechanism, server_nonce: &str) -> ScramServer {
        ScramServer {
            fixed_nonce: Some(server_nonce.to_string()),
            ..ScramServer::new(mechanism)
        }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    /// Whether `finish` succeeded (or failed): the exchange is over either way.
    pub fn is_done(&self) -> bool {
        matches!(self.state, ServerState::Done)
    }

    pub fn first(
        &mut self,
        client_first: &[u8],
        lookup: &dyn CredentialLookup,
    ) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, ServerState::Initial) {
            self.state = ServerState::Done;
            return Err(AuthError::OutOfOrder("client-first sent twice"));
        }
        self.state = ServerState::Done;
        let text = message_text(client_first)?;
        let first = ClientFirst::parse(text)?;
        let (credential, known) = match lookup.credential(&first.user, self.mechanism) {
            Some(c) if c.mechanism == self.mechanism && c.validate().is_ok() => (c, true),
            _ => (
                fake_credential(self.mechanism, &first.user, lookup.fake_key())?,
                false,
            ),
        };
        let server_part = match &self.fixed_nonce {
            Some(n) => n.clone(),
            None => crypto::b64(&crypto::try_random_bytes::<NONCE_RANDOM_BYTES>()?),
        };
        let nonce = format!("{}{server_part}", first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            crypto::b64(&credential.salt),
            credential.iterations
        );
        let reply = server_first.clone().into_bytes();
        self.state = ServerState::WaitingFinal(Box::new(ServerExchange {
            user: first.user,
            authzid: first.authzid,
            gs2_header: first.gs2_header.to_string(),
            client_first_bare: first.bare.to_string(),
            server_first,
            client_nonce_bytes: first.nonce.len(),
            nonce,
            credential,
            known,
        }));
        Ok(reply)
    }

    /// Whether `nonce` is the client nonce and then the combined one, when that is accepted.
    fn repeated_nonce(&self, ex: &ServerExchange, nonce: &str) -> bool {
        let client_nonce = ex.nonce.get(..ex.client_nonce_bytes).unwrap_or_default();
        self.repeated_client_nonce_ok
            && nonce.len() == client_nonce.len() + ex.nonce.len()
            && nonce.starts_with(client_nonce)
            && nonce.ends_with(ex.nonce.as_str())
    }

    pub fn finish(&mut self, client_final: &[u8]) -> Result<(Vec<u8>, Authenticated), AuthError> {
        let ServerState::WaitingFinal(ex) = std::mem::replace(&mut self.state, ServerState::Done)
        else {
            return Err(AuthError::OutOfOrder(
                "client-final before client-first, or twice",
            ));
        };
        let text = message_text(client_final)?;
        let fin = ClientFinal::parse(text)?;
        if fin.channel_binding != ex.gs2_header.as_bytes() {
            return Err(AuthError::malformed(
                "c= does not repeat the client-first's gs2 header",
            ));
        }
        if fin.nonce != ex.nonce && !self.repeated_nonce(&ex, fin.nonce) {
            return Err(AuthError::NonceMismatch);
        }
        let m = self.mechanism;
        let auth_message = format!(
            "{},{},{}",
            ex.client_first_bare, ex.server_first, fin.without_proof
        );
        let client_signature = crypto::hmac(m, &ex.credential.stored_key, auth_message.as_bytes());
        if fin.proof.len() != client_signature.len() {
            return Err(AuthError::AuthenticationFailed);
        }
        let client_key: Vec<u8> = fin
            .proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        let matches = crypto::hash(m, &client_key).ct_eq(&ex.credential.stored_key);
        if !bool::from(matches & subtle::Choice::from(u8::from(ex.known))) {
            return Err(AuthError::AuthenticationFailed);
        }
        let server_signature = crypto::hmac(m, &ex.credential.server_key, auth_message.as_bytes());
        let reply = format!("v={}", crypto::b64(&server_signature)).into_bytes();
        Ok((
            reply,
            Authenticated {
                user: ex.user,
                authzid: ex.authzid,
            },
        ))
    }
}

/// The verifier an unknown user is "checked" against: stable per user for a given key (so a
/// repeated probe sees the same salt, as for a real user) and unknowable without it. `key` is
/// the lookup's [`CredentialLookup::fake_key`]; without one a per-process random key is used.
///
/// Its iteration count is always [`SCRAM_ITERATIONS_DEFAULT`]: a real user created with
/// another count (`tinymq user create --iterations`) answers with that count, and so can be told
/// from an unknown user by anyone who knows the default. Operators who care keep the default.
fn fake_credential(
    m: ScramMechanism,
    user: &str,
    key: Option<[u8; 32]>,
) -> Result<StoredCredential, AuthError> {
    static PROCESS_KEY: OnceLock<[u8; 32]> = OnceLock::new();
    let key = match key {
        Some(key) => key,
        None => match PROCESS_KEY.get() {
            Some(key) => *key,
            None => {
                let fresh = crypto::try_random_bytes::<32>()?;
                // A racing first call may win; every later call then uses its key.
                *PROCESS_KEY.get_or_init(|| fresh)
            }
        },
    };
    let derive =
        |label: &str| crypto::hmac(m, &key, format!("{label}\0{}\0{user}", m.name()).as_bytes());
    let mut salt = derive("salt");
    salt.truncate(16);
    Ok(StoredCredential {
        mechanism: m,
        salt,
        iterations: SCRAM_ITERATIONS_DEFAULT,
        stored_key: derive("stored"),
        server_key: derive("server"),
    })
}

/// The client side of one exchange: `first`, then `second` with the server-first, then
/// `finish` with the server-final, which proves the server holds this user's verifier.
pub struct ScramClient {
    mechanism: ScramMechanism,
    user: String,
    password: String,
    authzid: Option<String>,
    nonce: String,
    state: ClientState,
}

/// Shows the mechanism and user, never the password.
impl std::fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScramClient({}, user {:?})", self.mechanism, self.user)
    }
}

enum ClientState {
    Initial,
    SentFirst,
    SentFinal { server_signature: Vec<u8> },
    Failed,
}

impl ScramClient {
    pub fn new(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        authzid: Option<&str>,
    ) -> ScramClient {
        let nonce = crypto::b64(&crypto::random_bytes::<NONCE_RANDOM_BYTES>());
        ScramClient::with_nonce(mechanism, user, password, authzid, &nonce)
    }

    /// A client with a fixed nonce instead of a random one: for test vectors only.
    #[doc(hidden)]
    pub fn with_nonce(
        mechanism: ScramMechanism,
        user: &str,
        password: &str,
        authzid: Option<&str>,
        nonce: &str,
    ) -> ScramClient {
        ScramClient {
            mechanism,
            user: user.to_string(),
            password: password.to_string(),
            authzid: authzid.map(str::to_string),
            nonce: nonce.to_string(),
            state: ClientState::Initial,
        }
    }

    pub fn mechanism(&self) -> ScramMechanism {
        self.mechanism
    }

    fn gs2_header(&self) -> String {
        match &self.authzid {
            Some(a) => format!("n,a={},", encode_saslname(a)),
            None => "n,,".to_string(),
        }
    }

    fn client_first_bare(&self) -> String {
        format!("n={},r={}", encode_saslname(&self.user), self.nonce)
    }

    /// The client-first message.
    pub fn first(&mut self) -> Vec<u8> {
        if matches!(self.state, ClientState::Initial) {
            self.state = ClientState::SentFirst;
        }
        format!("{}{}", self.gs2_header(), self.client_first_bare()).into_bytes()
    }

    /// Checks the server-first and answers with the client-final (with the proof).
    pub fn second(&mut self, server_first: &[u8]) -> Result<Vec<u8>, AuthError> {
        if !matches!(self.state, ClientState::SentFirst) {
            self.state = ClientState::Failed;
            return Err(AuthError::OutOfOrder(
                "server-first before client-first, or twice",
            ));
        }
        self.state = ClientState::Failed;
        let text = message_text(server_first)?;
        let sf = ServerFirst::parse(text)?;
        if sf.nonce.len() <= self.nonce.len() || !sf.nonce.starts_with(&self.nonce) {
            return Err(AuthError::malformed(
                "the server's nonce does not extend the client's",
            ));
        }
        if !(SCRAM_SALT_BYTES_MIN..=SCRAM_SALT_BYTES_MAX).contains(&sf.salt.len()) {
            return Err(AuthError::malformed(format!(
                "salt of {} bytes, expected {SCRAM_SALT_BYTES_MIN}..={SCRAM_SALT_BYTES_MAX}",
                sf.salt.len()
            )));
        }
        check_iterations(sf.iterations).map_err(|e| AuthError::malformed(e.to_string()))?;
        let m = self.mechanism;
        let keys = ClientKeys::new(m, self.password.as_bytes(), &sf.salt, sf.iterations);
        let stored_key = crypto::hash(m, &keys.client_key);
        let without_proof = format!(
            "c={},r={}",
            crypto::b64(self.gs2_header().as_bytes()),
            sf.nonce
        );
        let auth_message = format!("{},{},{}", self.client_first_bare(), text, without_proof);
        let client_signature = crypto::hmac(m, &stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = keys
            .client_key
            .iter()
            .zip(&client_signature)
            .map(|(k, s)| k ^ s)
            .collect();
        let server_signature = crypto::hmac(m, &keys.server_key, auth_message.as_bytes());
        self.state = ClientState::SentFinal { server_signature };
        Ok(format!("{without_proof},p={}", crypto::b64(&proof)).into_bytes())
    }

    /// Checks the server-final: `v=` must carry the signature only a holder of this user's
    /// verifier can compute; `e=` is the server's refusal.
    pub fn finish(&self, server_final: &[u8]) -> Result<(), AuthError> {
        let ClientState::SentFinal { server_signature } = &self.state else {
            return Err(AuthError::OutOfOrder("server-final before client-final"));
        };
        let text = message_text(server_final)?;
        match ServerFinal::parse(text)? {
            // The text goes into errors and logs: no control characters (forged log lines,
            // terminal escapes) and no more than 64 characters.
            ServerFinal::Error(e) => Err(AuthError::ServerRefused(
                e.chars().filter(|c| !c.is_control()).take(64).collect(),
            )),
            ServerFinal::Verifier(v) => {
                if bool::from(v.ct_eq(server_signature)) {
                    Ok(())
                } else {
                    Err(AuthError::ServerSignatureMismatch)
                }
            }
        }
    }
}

// ---- The message grammar (RFC 5802 §7) ---------------------------------------------------------

fn message_text(bytes: &[u8]) -> Result<&str, AuthError> {
    if bytes.len() > SCRAM_MESSAGE_BYTES_MAX {
        return Err(AuthError::MessageTooLarge {
            len: bytes.len(),
            max: SCRAM_MESSAGE_BYTES_MAX,
        });
    }
    std::str::from_utf8(bytes).map_err(|_| AuthError::malformed("not UTF-8"))
}

/// The value of attribute `name` (`name=value`), or an error naming what was expected.
fn attribute<'a>(part: Option<&'a str>, name: char, what: &str) -> Result<&'a str, AuthError> {
    let part = part.ok_or_else(|| AuthError::malformed(format!("missing {what}")))?;
    let mut chars = part.chars();
    if chars.next() == Some(name) && chars.next() == Some('=') {
        Ok(&part[2..])
    } else {
        Err(AuthError::malformed(format!(
            "expected {what} ({name}=...)"
        )))
    }
}

/// Optional extensions after the fixed attributes: well-formed `x=value` pairs, ignored.
fn extensions<'a>(parts: impl Iterator<Item = &'a str>) -> Result<(), AuthError> {
    for part in parts {
        let b = part.as_bytes();
        if b.len() < 2 || !b[0].is_ascii_alphabetic() || b[1] != b'=' {
            return Err(AuthError::malformed("an extension is not attr=value"));
        }
    }
    Ok(())
}

/// Refuses `m=` (a mandatory extension this server does not know) in first position.
fn no_mandatory_extension(part: Option<&str>) -> Result<(), AuthError> {
    if part.is_some_and(|p| p.starts_with("m=")) {
        return Err(AuthError::malformed(
            "mandatory extension (m=) not supported",
        ));
    }
    Ok(())
}

/// RFC 5802 saslname: `=2C` for ',' and `=3D` for '='; no other '=' and no NUL.
fn decode_saslname(s: &str, what: &str) -> Result<String, AuthError> {
    if s.is_empty() {
        return Err(AuthError::malformed(format!("empty {what}")));
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['=', '\0']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("=2C") {
            out.push(',');
        } else if tail.starts_with("=3D") {
            out.push('=');
        } else {
            return Err(AuthError::malformed(format!(
                "{what} has '=' not followed by 2C or 3D, or a NUL"
            )));
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    if out.len() > USER_NAME_BYTES_MAX {
        return Err(AuthError::malformed(format!(
            "{what} over {USER_NAME_BYTES_MAX} bytes"
        )));
    }
    Ok(out)
}

fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

/// RFC 5802 `printable`: %x21-7E except ','.
fn check_nonce(nonce: &str) -> Result<(), AuthError> {
    if nonce.is_empty()
        || !nonce
            .bytes()
            .all(|b| (0x21..=0x7e).contains(&b) && b != b',')
    {
        return Err(AuthError::malformed("nonce empty or not printable"));
    }
    Ok(())
}

fn base64_attr(value: &str, what: &str) -> Result<Vec<u8>, AuthError> {
    crypto::b64_decode(value).ok_or_else(|| AuthError::malformed(format!("{what} is not base64")))
}

struct ClientFirst<'a> {
    gs2_header: &'a str,
    bare: &'a str,
    authzid: Option<String>,
    user: String,
    nonce: &'a str,
}

impl<'a> ClientFirst<'a> {
    fn parse(text: &'a str) -> Result<ClientFirst<'a>, AuthError> {
        let (cbind, rest) = text
            .split_once(',')
            .ok_or_else(|| AuthError::malformed("missing gs2 header"))?;
        match cbind {
            "n" | "y" => {}
            p if p.starts_with("p=") => return Err(AuthError::ChannelBindingUnsupported),
            _ => {
                return Err(AuthError::malformed(
                    "gs2 channel-binding flag is not n, y or p=",
                ))
            }
        }
        let (authz, bare) = rest
            .split_once(',')
            .ok_or_else(|| AuthError::malformed("gs2 header not closed by ','"))?;
        let authzid = match authz {
            "" => None,
            a => Some(decode_saslname(
                attribute(Some(a), 'a', "authzid")?,
                "authzid",
            )?),
        };
        let gs2_header = &text[..cbind.len() + authz.len() + 2];
        let mut parts = bare.split(',');
        let first = parts.next();
        no_mandatory_extension(first)?;
        let user = decode_saslname(attribute(first, 'n', "user name")?, "user name")?;
        let nonce = attribute(parts.next(), 'r', "nonce")?;
        check_nonce(nonce)?;
        extensions(parts)?;
        Ok(ClientFirst {
            gs2_header,
            bare,
            authzid,
            user,
            nonce,
        })
    }
}

struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

impl<'a> ServerFirst<'a> {
    fn parse(text: &'a str) -> Result<ServerFirst<'a>, AuthError> {
        let mut parts = text.split(',');
        let first = parts.next();
        no_mandatory_extension(first)?;
        let nonce = attribute(first, 'r', "nonce")?;
        check_nonce(nonce)?;
        let salt = base64_attr(attribute(parts.next(), 's', "salt")?, "salt")?;
        let count = attribute(parts.next(), 'i', "iteration count")?;
        let iterations = crate::principal::parse_id(count)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| AuthError::malformed("iteration count is not a positive number"))?;
        extensions(parts)?;
        Ok(ServerFirst {
            nonce,
            salt,
            iterations,
        })
    }
}

struct ClientFinal<'a> {
    channel_binding: Vec<u8>,
    nonce: &'a str,
    without_proof: &'a str,
    proof: Vec<u8>,
}

impl<'a> ClientFinal<'a> {
    fn parse(text: &'a str) -> Result<ClientFinal<'a>, AuthError> {
        let (without_proof, proof_part) = text
            .rsplit_once(',')
            .ok_or_else(|| AuthError::malformed("client-final has no proof"))?;
        let proof = base64_attr(attribute(Some(proof_part), 'p', "proof")?, "proof")?;
        let mut parts = without_proof.split(',');
        let c = attribute(parts.next(), 'c', "channel binding")?;
        let channel_binding = base64_attr(c, "channel binding")?;
        let nonce = attribute(parts.next(), 'r', "nonce")?;
        check_nonce(nonce)?;
        extensions(parts)?;
        Ok(ClientFinal {
            channel_binding,
            nonce,
            without_proof,
            proof,
        })
    }
}

enum ServerFinal<'a> {
    Error(&'a str),
    Verifier(Vec<u8>),
}

impl<'a> ServerFinal<'a> {
    fn parse(text: &'a str) -> Result<ServerFinal<'a>, AuthError> {
        let mut parts = text.split(',');
        let first = parts.next().unwrap_or_default();
        let result = if let Some(e) = first.strip_prefix("e=") {
            ServerFinal::Error(e)
        } else {
            let v = attribute(Some(first), 'v', "verifier")?;
            ServerFinal::Verifier(base64_attr(v, "verifier")?)
        };
        extensions(parts)?;
        Ok(result)
    }
}

#[cfg(test)]
mod tests;

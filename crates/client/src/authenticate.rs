//! The client side of authentication: after the handshake, a connection with a [`Login`]
//! runs the SCRAM exchange (two Authenticate round trips) and checks the server's signature,
//! so a server that does not know the password cannot pass for the real one.

use tinymq_auth::{ScramClient, ScramMechanism};
use tinymq_protocol::messages as m;

use crate::connection::{Connection, CONNECT_TIMEOUT};
use crate::error::ClientError;
use crate::security::Login;

/// Logs `connection` in with `login`; the principal the server says it now acts as.
pub(crate) async fn authenticate(
    connection: &Connection,
    login: &Login,
) -> Result<String, ClientError> {
    let fail = |reason: String| ClientError::Authentication {
        user: login.user.clone(),
        reason,
    };
    let mechanism = login.mechanism;
    let offered = &connection.handshake.auth_mechanisms;
    if !offered.iter().any(|m| m == mechanism.name()) {
        let why = if offered.is_empty() {
            "the server does not take logins (it runs without --auth and without a cluster secret)"
                .to_string()
        } else {
            format!("the server accepts only {}", offered.join(", "))
        };
        return Err(fail(format!("{} is not accepted: {why}", mechanism.name())));
    }
    let mut scram = ScramClient::new(
        mechanism,
        &login.user,
        &login.password,
        login.authzid.as_deref(),
    );
    let first = step(connection, mechanism, scram.first(), &fail).await?;
    let last = scram
        .second(&first.payload)
        .map_err(|e| fail(e.to_string()))?;
    let done = step(connection, mechanism, last, &fail).await?;
    if !done.complete {
        return Err(fail("the server did not complete the exchange".into()));
    }
    scram
        .finish(&done.payload)
        .map_err(|e| fail(format!("the server's signature does not verify: {e}")))?;
    Ok(done.principal)
}

/// One Authenticate round trip; a server error becomes the login's failure, naming its code.
async fn step(
    connection: &Connection,
    mechanism: ScramMechanism,
    payload: Vec<u8>,
    fail: &impl Fn(String) -> ClientError,
) -> Result<m::AuthenticateResponse, ClientError> {
    let request = m::AuthenticateRequest {
        mechanism: mechanism.name().to_string(),
        payload: payload.into(),
    };
    match connection.request(&request, CONNECT_TIMEOUT).await {
        Ok(response) => Ok(response),
        Err(ClientError::Server { code, message }) => {
            Err(fail(format!("{}: {message}", code.name())))
        }
        Err(e) => Err(fail(e.to_string())),
    }
}

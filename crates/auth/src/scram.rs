//! SCRAM exchanges (placeholder, replaced in the next commit).
pub const SCRAM_MESSAGE_BYTES_MAX: usize = 4096;
pub struct ScramServer;
pub struct ScramClient;
pub struct Authenticated {
    pub user: String,
    pub authzid: Option<String>,
}

//! Bearer tokens (placeholder, replaced in a later commit).
pub const TOKEN_BYTES_MAX: usize = 1024;
pub fn issue_token() {}
pub fn verify_token() {}

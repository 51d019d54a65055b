//! Node authentication (placeholder, replaced in the next commit).
pub struct ClusterSecret;
pub struct WithNodes;
pub fn node_user() {}
pub fn parse_node_user() {}

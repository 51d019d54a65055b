//! Half messages for operators (`tinymq half list`): the unresolved halves of the cluster,
//! each broker listing those it coordinates.

use tinymq_protocol::messages as m;

use super::Admin;
use crate::error::{check, ClientError};

impl Admin {
    /// The unresolved half messages of producer group `group` (None: of every group the
    /// principal may describe), from each broker's HalfList.
    pub async fn list_halves(
        &self,
        group: Option<&str>,
    ) -> Result<Vec<m::HalfSummary>, ClientError> {
        let request = m::HalfListRequest {
            group: group.unwrap_or_default().to_string(),
        };
        self.retry("list half messages", || async {
            let mut all = Vec::new();
            for addr in self.cluster.broker_addresses().await?.values() {
                let connection = self.cluster.connection(addr).await?;
                let response = connection
                    .request(&request, self.cluster.config.request_timeout)
                    .await?;
                check(response.error.as_ref())?;
                all.extend(response.halves);
            }
            all.sort_by(|a, b| (&a.group, a.half_id).cmp(&(&b.group, b.half_id)));
            Ok(all)
        })
        .await
    }
}

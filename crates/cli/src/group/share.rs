//! `tinymq group describe G` for a share group: every broker is asked for the partitions it
//! leads (DescribeShareGroup), and per partition the start and end offsets, the high
//! watermark, how many records are acquired, available (released or expired, waiting), and
//! accepted above the start, how many were dead-lettered, and the first in-flight records
//! with their delivery counts and holders. A broker that cannot be asked is named on stderr
//! (and in JSON), its partitions missing.

use tinymq_client::share::{ShareGroupDescription, SharePartitionState};

use crate::args::count;
use crate::outln;

/// In-flight records shown per partition in text (JSON has every one the broker sent, at
/// most 100).
const IN_FLIGHT_SHOWN_MAX: usize = 5;

/// A partition as JSON: the REST API's view of it (`GET /api/v1/groups/{id}`), so both
/// print the same fields.
fn partition_json(p: &SharePartitionState) -> serde_json::Value {
    serde_json::to_value(tinymq_http::SharePartitionView::from(p)).unwrap_or_default()
}

/// Prints a share group's description (text like the regular group's, or JSON).
pub fn print(d: &ShareGroupDescription, json: bool) -> anyhow::Result<()> {
    for (addr, error) in &d.unreachable {
        eprintln!("broker {addr}: not asked ({error}); its partitions are missing");
    }
    if json {
        let unreachable: Vec<_> = d
            .unreachable
            .iter()
            .map(|(addr, error)| serde_json::json!({"broker": addr, "error": error}))
            .collect();
        let out = serde_json::json!({
            "group": d.group_id, "type": "share", "members": d.member_ids,
            "partitions": d.partitions.iter().map(partition_json).collect::<Vec<_>>(),
            "unreachable_brokers": unreachable,
        });
        return outln!("{}", serde_json::to_string_pretty(&out)?);
    }
    outln!(
        "share group {}: {} holding records{}{}",
        d.group_id,
        count(d.member_ids.len() as u64, "member"),
        if d.member_ids.is_empty() { "" } else { ": " },
        d.member_ids.join(", ")
    )?;
    outln!(
        "{:<20} {:>9} {:>10} {:>10} {:>14} {:>8} {:>9} {:>8} {:>13}",
        "topic",
        "partition",
        "start",
        "end",
        "high watermark",
        "acquired",
        "available",
        "accepted",
        "dead-lettered"
    )?;
    for p in &d.partitions {
        outln!(
            "{:<20} {:>9} {:>10} {:>10} {:>14} {:>8} {:>9} {:>8} {:>13}",
            p.topic,
            p.partition,
            p.start_offset,
            p.end_offset,
            p.high_watermark,
            p.acquired,
            p.available,
            p.accepted,
            p.dead_lettered_total
        )?;
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut header_done = false;
    for p in &d.partitions {
        for r in p.in_flight.iter().take(IN_FLIGHT_SHOWN_MAX) {
            if !header_done {
                outln!("in flight (first {IN_FLIGHT_SHOWN_MAX} per partition):")?;
                outln!(
                    "  {:<24} {:>10} {:<9} {:>8}  member (lock left)",
                    "partition",
                    "offset",
                    "state",
                    "delivered"
                )?;
                header_done = true;
            }
            let holder = if r.member_id.is_empty() {
                "-".to_string()
            } else {
                let left_ms = (r.lock_deadline_ms - now_ms).max(0);
                format!("{} ({left_ms} ms)", r.member_id)
            };
            outln!(
                "  {:<24} {:>10} {:<9} {:>8}  {}",
                format!("{}/{}", p.topic, p.partition),
                r.offset,
                r.state,
                r.delivery_count,
                holder
            )?;
        }
    }
    Ok(())
}

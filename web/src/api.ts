// The REST API under /api/v1 (docs/rest.md): typed fetches, and problem documents turned into
// errors that say what the server said.

interface Problem {
  title?: string;
  detail?: string;
  code?: string;
  status?: number;
}

class ApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly code: string | undefined,
  ) {
    super(message);
  }
}

interface MetaNode {
  id: number;
  address: string;
  up: boolean;
  applied_index: number | null;
  leader: boolean;
}
interface Broker {
  id: number;
  address: string;
  alive: boolean;
}
interface Cluster {
  cluster_id: string;
  meta: { leader: number | null; nodes: MetaNode[] };
  brokers: Broker[];
}
interface TopicSummary {
  name: string;
  partitions: number;
  replication_factor: number;
  /** Null when the caller may not read the cluster metadata. */
  dead_letter_topic?: string | null;
  /** The topics whose dead-letter topic this one is. */
  dead_letter_of?: string[];
}
interface PartitionInfo {
  partition: number;
  leader: number | null;
  replicas: number[];
  isr: number[];
  log_start_offset: number | null;
  log_end_offset: number | null;
  high_watermark: number | null;
  size_bytes: number | null;
}
interface TopicDetail {
  name: string;
  config: Record<string, unknown>;
  partitions: PartitionInfo[];
}
interface Header {
  key: string;
  value: string | null;
  value_encoding: string;
}
interface Message {
  offset: number;
  timestamp_ms: number;
  key: string | null;
  key_encoding: string;
  value: string | null;
  value_encoding: string;
  headers: Header[];
}
interface MessagePage {
  messages: Message[];
  next_offset: number;
  high_watermark: number;
}
/** `consumer`, `share` or `kafka`; absent from nodes older than issue 27 (consumer). */
type GroupType = "consumer" | "share" | "kafka";
interface GroupSummary {
  group_id: string;
  type?: GroupType;
  state: string;
  members: number;
  lag?: number | null;
}
interface GroupMember {
  member_id: string;
  client_id: string;
  assignment: { topic: string; partitions: number[] }[];
}
interface GroupOffset {
  topic: string;
  partition: number;
  committed_offset: number | null;
  high_watermark: number | null;
  lag: number | null;
}
interface GroupDetail {
  group_id: string;
  type?: GroupType;
  state: string;
  generation: number;
  members: GroupMember[];
  offsets: GroupOffset[];
}
interface InFlightRecord {
  offset: number;
  state: string;
  delivery_count: number;
  member_id: string;
  lock_deadline_ms: number;
}
interface SharePartition {
  topic: string;
  partition: number;
  start_offset: number;
  end_offset: number;
  high_watermark: number | null;
  acquired: number;
  available: number;
  accepted: number;
  dead_lettered: number;
  not_yet_delivered: number;
  in_flight: InFlightRecord[];
}
interface ShareGroupDetail {
  group_id: string;
  type: "share";
  state: string;
  members: string[];
  partitions: SharePartition[];
}
interface RouteProgress {
  partition: number;
  next_offset: number;
  high_watermark: number;
  copied: number;
}
interface RouteInfo {
  name: string;
  from_topic: string;
  to_topic: string;
  filter: string;
  lag: number | null;
  partitions: RouteProgress[];
}
interface Produced {
  partition: number;
  offset: number;
}
interface ResetResult {
  group_id: string;
  topic: string;
  offsets: { partition: number; offset: number }[];
}

/** What a refusal of the node's authentication (401) or of the cluster's ACLs (403) means to
 * the person at the console; null for any other status. */
function authMessage(status: number, what: string): string | null {
  if (status === 401) {
    return `not logged in, or the login was refused: reload the page to log in with a tinymq user (${what})`;
  }
  if (status === 403) return `your user may not do this: ${what}`;
  return null;
}

async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  // Same-origin credentials: the Basic login the browser asked for when the node requires one.
  const init: RequestInit = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers = { Accept: "application/json", "Content-Type": "application/json" };
  }
  const response = await fetch(`/api/v1${path}`, init);
  const text = await response.text();
  let parsed: unknown = undefined;
  if (text.length > 0) {
    try {
      parsed = JSON.parse(text);
    } catch {
      parsed = undefined;
    }
  }
  if (!response.ok) {
    const p = (parsed ?? {}) as Problem;
    const what = p.detail ?? p.title ?? response.statusText;
    const code = p.code ? ` (${p.code})` : "";
    const refused = authMessage(response.status, `${what}${code}`);
    const message = refused ?? `${response.status} ${what}${code}`;
    throw new ApiError(`${method} ${path}: ${message}`, response.status, p.code);
  }
  return parsed as T;
}

const seg = encodeURIComponent;

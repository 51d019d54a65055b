// Live throughput from this node's /metrics: the node-wide counters (tinymq_bytes_in_total and
// the like) polled about once a second, turned into rates. A counter the node does not export
// is reported as absent, never as zero.

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The samples of a Prometheus / OpenMetrics text exposition (comments skipped). */
function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const sample = parseSample(line);
    if (sample) out.push(sample);
  }
  return out;
}

function parseSample(line: string): Sample | null {
  const brace = line.indexOf("{");
  const space = line.indexOf(" ");
  const labels: Record<string, string> = {};
  let rest: string;
  let name: string;
  if (brace >= 0 && (space < 0 || brace < space)) {
    name = line.slice(0, brace);
    let i = brace + 1;
    // key="value" pairs; values may hold \" \\ \n escapes.
    while (i < line.length && line[i] !== "}") {
      const eq = line.indexOf("=", i);
      if (eq < 0 || line[eq + 1] !== '"') return null;
      const key = line.slice(i, eq);
      let value = "";
      let j = eq + 2;
      while (j < line.length && line[j] !== '"') {
        if (line[j] === "\\" && j + 1 < line.length) {
          const c = line[j + 1];
          value += c === "n" ? "\n" : c;
          j += 2;
        } else {
          value += line[j++];
        }
      }
      labels[key] = value;
      i = j + 1;
      if (line[i] === ",") i++;
    }
    rest = line.slice(i + 1).trim();
  } else {
    if (space < 0) return null;
    name = line.slice(0, space);
    rest = line.slice(space + 1).trim();
  }
  const value = Number(rest.split(" ")[0]);
  return Number.isNaN(value) ? null : { name, labels, value };
}

/** The sum of every series of `name`, or null when the node exports none. */
function sumOf(samples: Sample[], name: string): number | null {
  let found = false;
  let sum = 0;
  for (const s of samples) {
    if (s.name === name) {
      found = true;
      sum += s.value;
    }
  }
  return found ? sum : null;
}

const COUNTERS = {
  bytesIn: ["tinymq_bytes_in_total", "tinymq_partition_bytes_in_total"],
  bytesOut: ["tinymq_bytes_out_total", "tinymq_partition_bytes_out_total"],
  recordsIn: ["tinymq_records_in_total", "tinymq_partition_records_in_total"],
  recordsOut: ["tinymq_records_out_total", "tinymq_partition_records_out_total"],
};
type CounterName = keyof typeof COUNTERS;
type Counters = Record<CounterName, number | null>;

/** Each counter from the node total, else the sum of the per-partition series. */
function readCounters(samples: Sample[]): Counters {
  const pick = (names: string[]) => {
    for (const n of names) {
      const v = sumOf(samples, n);
      if (v !== null) return v;
    }
    return null;
  };
  return {
    bytesIn: pick(COUNTERS.bytesIn),
    bytesOut: pick(COUNTERS.bytesOut),
    recordsIn: pick(COUNTERS.recordsIn),
    recordsOut: pick(COUNTERS.recordsOut),
  };
}

const POLL_MS = 1000;
const HISTORY_MS = 120_000;

/** Rates per second between successive scrapes, kept for the last two minutes. */
class Throughput {
  readonly history: Record<CounterName, [number, number][]> = {
    bytesIn: [],
    bytesOut: [],
    recordsIn: [],
    recordsOut: [],
  };
  latest: Counters = { bytesIn: null, bytesOut: null, recordsIn: null, recordsOut: null };
  error: string | null = null;
  private previous: { at: number; counters: Counters } | null = null;
  private listeners = new Set<() => void>();

  start(): void {
    void this.poll();
    setInterval(() => void this.poll(), POLL_MS);
  }

  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private async poll(): Promise<void> {
    try {
      const response = await fetch("/metrics", { credentials: "same-origin" });
      if (!response.ok) {
        const refused = authMessage(response.status, "reading /metrics needs DESCRIBE on the cluster");
        throw new Error(`/metrics: ${refused ?? `answered ${response.status}`}`);
      }
      this.record(Date.now(), readCounters(parseMetrics(await response.text())));
      this.error = null;
    } catch (e) {
      this.error = e instanceof Error ? e.message : String(e);
    }
    this.listeners.forEach((l) => l());
  }

  private record(at: number, counters: Counters): void {
    this.latest = counters;
    const prev = this.previous;
    this.previous = { at, counters };
    if (!prev || at <= prev.at) return;
    const seconds = (at - prev.at) / 1000;
    for (const name of Object.keys(this.history) as CounterName[]) {
      const now = counters[name];
      const before = prev.counters[name];
      // A counter that went down means the node restarted: no rate for that interval.
      if (now === null || before === null || now < before) continue;
      const points = this.history[name];
      points.push([at, (now - before) / seconds]);
      while (points.length > 0 && points[0][0] < at - HISTORY_MS) points.shift();
    }
  }

  /** The latest rate of a counter, or null when absent or not yet measured. */
  rate(name: CounterName): number | null {
    const points = this.history[name];
    return this.latest[name] === null || points.length === 0 ? null : points[points.length - 1][1];
  }
}

const throughput = new Throughput();

// Overview: the MetaServer quorum and its leader, the brokers and whether each is alive, this
// node's readiness, live throughput in and out, and how many partitions are short of replicas.

const CLUSTER_REFRESH_MS = 5000;
const CHART_WINDOW_MS = 60_000;
const PARTITION_HEALTH_TOPICS_MAX = 50;

function overviewPage(root: HTMLElement): () => void {
  const cluster = h("section", { id: "cluster" }, h("p", { class: "muted" }, "loading…"));
  const partitions = h("section", { id: "partitions" });
  const charts = h("section", { id: "throughput" });
  root.replaceChildren(h("h1", null, "Overview"), charts, cluster, partitions);

  const drawCharts = () => charts.replaceChildren(...throughputView());
  drawCharts();
  const unsubscribe = throughput.subscribe(drawCharts);
  const refresh = () => {
    void loadCluster(cluster);
    void loadPartitionHealth(partitions);
  };
  refresh();
  const timer = setInterval(refresh, CLUSTER_REFRESH_MS);
  return () => {
    clearInterval(timer);
    unsubscribe();
  };
}

function rateText(id: string, name: CounterName, fmt: (v: number) => string): HTMLElement {
  const rate = throughput.rate(name);
  const absent = throughput.latest[name] === null;
  return h(
    "span",
    { id, class: "rate", "data-rate": rate ?? "" },
    absent ? "not exported" : rate === null ? "measuring…" : `${fmt(rate)}/s`,
  );
}

function throughputView(): Node[] {
  const now = Date.now();
  const bytes = (v: number) => fmtBytes(v);
  const records = (v: number) => fmtNumber(v);
  return [
    h("h2", null, "Throughput of this node"),
    ...(throughput.error ? [errorBox(throughput.error)] : []),
    h(
      "p",
      { class: "rates" },
      "in ",
      rateText("rate-bytes-in", "bytesIn", bytes),
      " · ",
      rateText("rate-records-in", "recordsIn", records),
      " records — out ",
      rateText("rate-bytes-out", "bytesOut", bytes),
      " · ",
      rateText("rate-records-out", "recordsOut", records),
      " records",
    ),
    h(
      "div",
      { class: "charts" },
      h(
        "figure",
        null,
        h("figcaption", null, "bytes per second"),
        lineChart(
          "chart-bytes",
          [
            { name: "in", cls: "in", points: throughput.history.bytesIn },
            { name: "out", cls: "out", points: throughput.history.bytesOut },
          ],
          now,
          CHART_WINDOW_MS,
          bytes,
        ),
      ),
      h(
        "figure",
        null,
        h("figcaption", null, "records per second"),
        lineChart(
          "chart-records",
          [
            { name: "in", cls: "in", points: throughput.history.recordsIn },
            { name: "out", cls: "out", points: throughput.history.recordsOut },
          ],
          now,
          CHART_WINDOW_MS,
          records,
        ),
      ),
    ),
  ];
}

async function loadCluster(section: HTMLElement): Promise<void> {
  let ready: { status?: string; role?: string; missing?: string[] } = {};
  try {
    const response = await fetch("/health/ready", { credentials: "same-origin" });
    ready = await response.json();
  } catch {
    ready = { status: "unreachable" };
  }
  try {
    const c = await api<Cluster>("GET", "/cluster");
    const leader = c.meta.leader;
    section.replaceChildren(
      h("h2", null, "Cluster ", h("code", null, c.cluster_id)),
      h(
        "p",
        { id: "node-health" },
        "This node",
        ready.role ? ` (${ready.role})` : "",
        ": ",
        badge(ready.status === "ready", "ready", ready.status ?? "unknown"),
        ready.missing && ready.missing.length ? ` missing: ${ready.missing.join(", ")}` : "",
      ),
      h("h3", null, "MetaServer quorum — leader ", h("span", { id: "meta-leader" }, leader === null ? "unknown" : `node ${leader}`)),
      table(
        "meta-nodes",
        ["node", "address", "state", "role", "applied index"],
        c.meta.nodes.map((n) => [
          String(n.id),
          n.address,
          badge(n.up, "up", "down"),
          n.leader ? "leader" : "follower",
          n.applied_index === null ? "—" : fmtNumber(n.applied_index),
        ]),
      ),
      h("h3", null, "Brokers"),
      table(
        "brokers",
        ["broker", "address", "health"],
        c.brokers.map((b) => [String(b.id), b.address, badge(b.alive, "alive", "down")]),
      ),
    );
  } catch (e) {
    section.replaceChildren(h("h2", null, "Cluster"), errorBox(e));
  }
}

/** Counts partitions whose ISR is smaller than their replica set, and those with no leader. */
async function loadPartitionHealth(section: HTMLElement): Promise<void> {
  try {
    const list = await api<{ topics: TopicSummary[] }>("GET", "/topics");
    // One request per topic: bounded, so a cluster with many topics is not asked for all of
    // them every few seconds.
    const counted = list.topics.slice(0, PARTITION_HEALTH_TOPICS_MAX);
    const details = await Promise.all(counted.map((t) => api<TopicDetail>("GET", `/topics/${seg(t.name)}`)));
    const all = details.flatMap((d) => d.partitions);
    const under = all.filter((p) => p.isr.length < p.replicas.length).length;
    const offline = all.filter((p) => p.leader === null).length;
    section.replaceChildren(
      h("h2", null, "Partitions"),
      h(
        "p",
        null,
        counted.length < list.topics.length
          ? `${plural(list.topics.length, "topic")}; of the first ${counted.length}, ${plural(all.length, "partition")}; under-replicated: `
          : `${plural(list.topics.length, "topic")}, ${plural(all.length, "partition")}; under-replicated: `,
        h("strong", { id: "under-replicated", class: under ? "bad" : "ok" }, String(under)),
        "; offline: ",
        h("strong", { id: "offline", class: offline ? "bad" : "ok" }, String(offline)),
      ),
    );
  } catch (e) {
    section.replaceChildren(h("h2", null, "Partitions"), errorBox(e));
  }
}

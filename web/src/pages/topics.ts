// Topics: the list with a form to create one, and a topic's detail (settings, and per
// partition its leader, replicas, ISR, size and offsets).

const TOPICS_REFRESH_MS = 5000;

function topicsPage(root: HTMLElement): () => void {
  const list = h("section", { id: "topic-list" }, h("p", { class: "muted" }, "loading…"));
  const refresh = () => void loadTopicList(list);
  root.replaceChildren(h("h1", null, "Topics"), createTopicForm(refresh), list);
  refresh();
  const timer = setInterval(refresh, TOPICS_REFRESH_MS);
  return () => clearInterval(timer);
}

function createTopicForm(created: () => void): HTMLElement {
  const name = h("input", { name: "name", required: true, placeholder: "orders", pattern: "[A-Za-z0-9._\\-]+" });
  const partitions = h("input", { name: "partitions", type: "number", min: 1, value: 1 });
  const replication = h("input", { name: "replication_factor", type: "number", min: 1, placeholder: "default" });
  const status = h("p", { class: "status", role: "status" });
  const form = h(
    "form",
    { id: "create-topic", class: "inline" },
    h("label", null, "name ", name),
    h("label", null, "partitions ", partitions),
    h("label", null, "replication factor ", replication),
    h("button", { type: "submit" }, "Create topic"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body: Record<string, unknown> = { name: name.value.trim() };
    if (partitions.value) body.partitions = Number(partitions.value);
    if (replication.value) body.replication_factor = Number(replication.value);
    status.replaceChildren("creating…");
    try {
      await api<TopicDetail>("POST", "/topics", body);
      status.replaceChildren(`created ${body.name}`);
      name.value = "";
      created();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });
  return h("section", null, h("h2", null, "Create a topic"), form);
}

async function loadTopicList(section: HTMLElement): Promise<void> {
  try {
    const { topics } = await api<{ topics: TopicSummary[] }>("GET", "/topics");
    topics.sort((a, b) => a.name.localeCompare(b.name));
    section.replaceChildren(
      h("h2", null, `${topics.length} topics`),
      table(
        "topics",
        ["topic", "partitions", "replication factor"],
        topics.map((t) => [
          h("a", { href: `#/topics/${seg(t.name)}` }, t.name),
          String(t.partitions),
          String(t.replication_factor),
        ]),
      ),
    );
  } catch (e) {
    section.replaceChildren(errorBox(e));
  }
}

function topicDetailPage(root: HTMLElement, name: string): () => void {
  const body = h("div", { id: "topic-detail" }, h("p", { class: "muted" }, "loading…"));
  root.replaceChildren(
    h("p", null, h("a", { href: "#/topics" }, "← topics")),
    h("h1", null, "Topic ", h("code", null, name)),
    body,
  );
  const refresh = () => void loadTopicDetail(body, name);
  refresh();
  const timer = setInterval(refresh, TOPICS_REFRESH_MS);
  return () => clearInterval(timer);
}

function offsetText(v: number | null): string {
  return v === null || v < 0 ? "—" : fmtNumber(v);
}

async function loadTopicDetail(body: HTMLElement, name: string): Promise<void> {
  try {
    const t = await api<TopicDetail>("GET", `/topics/${seg(name)}`);
    const config = Object.entries(t.config ?? {}).sort(([a], [b]) => a.localeCompare(b));
    body.replaceChildren(
      h("h2", null, `${t.partitions.length} partitions`),
      table(
        "partitions",
        ["partition", "leader", "replicas", "ISR", "size", "log start", "log end", "high watermark", ""],
        t.partitions.map((p) => [
          String(p.partition),
          p.leader === null ? badge(false, "", "offline") : String(p.leader),
          p.replicas.join(", "),
          p.isr.length < p.replicas.length ? h("span", { class: "bad" }, p.isr.join(", ")) : p.isr.join(", "),
          p.size_bytes === null ? "—" : fmtBytes(p.size_bytes),
          offsetText(p.log_start_offset),
          offsetText(p.log_end_offset),
          offsetText(p.high_watermark),
          h(
            "a",
            { href: `#/messages?topic=${seg(name)}&partition=${p.partition}&offset=${p.log_start_offset ?? 0}` },
            "browse",
          ),
        ]),
      ),
      h("h2", null, "Settings"),
      table(
        "topic-config",
        ["setting", "value"],
        config.map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)]),
      ),
      deleteButton(name),
    );
  } catch (e) {
    body.replaceChildren(errorBox(e));
  }
}

function deleteButton(name: string): HTMLElement {
  const status = h("span", { class: "status" });
  const button = h("button", { type: "button", class: "danger" }, "Delete topic");
  button.addEventListener("click", async () => {
    if (!confirm(`Delete topic ${name} and all its messages?`)) return;
    try {
      await api<void>("DELETE", `/topics/${seg(name)}`);
      location.hash = "#/topics";
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });
  return h("p", null, button, " ", status);
}

// Topics: the list (dead-letter topics marked) with a form to create one, and a topic's detail:
// per partition its leader, replicas, ISR, size and offsets; its settings in human units,
// each edited in place; forms to add partitions and to produce a record.

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

/** "dead letters of a, b" with links, or nothing for a topic no other sends dead letters to. */
function deadLetterMark(t: TopicSummary): Child {
  const sources = t.dead_letter_of ?? [];
  if (sources.length === 0) return null;
  return h(
    "span",
    { class: "dlq-mark", "data-dead-letters-of": sources.join(",") },
    h("span", { class: "badge dlq" }, "dead-letter topic"),
    " of ",
    sources.flatMap((s, i) => [i ? ", " : "", h("a", { href: `#/topics/${seg(s)}` }, s)]),
  );
}

async function loadTopicList(section: HTMLElement): Promise<void> {
  try {
    const { topics } = await api<{ topics: TopicSummary[] }>("GET", "/topics");
    topics.sort((a, b) => a.name.localeCompare(b.name));
    section.replaceChildren(
      h("h2", null, plural(topics.length, "topic")),
      table(
        "topics",
        ["topic", "partitions", "replication factor", ""],
        topics.map((t) => [
          h("a", { href: `#/topics/${seg(t.name)}` }, t.name),
          String(t.partitions),
          String(t.replication_factor),
          deadLetterMark(t),
        ]),
      ),
    );
  } catch (e) {
    section.replaceChildren(errorBox(e));
  }
}

function topicDetailPage(root: HTMLElement, name: string): () => void {
  const partitions = h("section", { id: "topic-detail" }, h("p", { class: "muted" }, "loading…"));
  const settings = h("section", { id: "topic-settings" });
  // An open editor is not redrawn under the user's hands: the settings wait until it closes.
  const editing = { open: false };
  const refresh = () => void loadTopicDetail(partitions, settings, name, editing, refresh);
  root.replaceChildren(
    h("p", null, h("a", { href: "#/topics" }, "← topics")),
    h("h1", null, "Topic ", h("code", null, name)),
    partitions,
    settings,
    addPartitionsForm(name, refresh),
    produceForm(name, refresh),
    deleteButton(name),
  );
  refresh();
  const timer = setInterval(refresh, TOPICS_REFRESH_MS);
  return () => clearInterval(timer);
}

function offsetText(v: number | null): string {
  return v === null || v < 0 ? "—" : fmtNumber(v);
}

async function loadTopicDetail(
  partitions: HTMLElement,
  settings: HTMLElement,
  name: string,
  editing: { open: boolean },
  refresh: () => void,
): Promise<void> {
  try {
    const t = await api<TopicDetail>("GET", `/topics/${seg(name)}`);
    partitions.setAttribute("data-partitions", String(t.partitions.length));
    partitions.replaceChildren(
      h("h2", null, plural(t.partitions.length, "partition")),
      table(
        "partitions",
        ["partition", "leader", "replicas", "ISR", "size", "log start", "log end", "high watermark", ""],
        t.partitions.map((p) => [
          String(p.partition),
          p.leader === null ? badge(false, "", "offline") : String(p.leader),
          p.replicas.join(", "),
          p.isr.length < p.replicas.length ? h("span", { class: "bad" }, p.isr.join(", ")) : p.isr.join(", "),
          p.size_bytes === null || p.size_bytes < 0 ? "—" : fmtBytes(p.size_bytes),
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
    );
    if (!editing.open) settings.replaceChildren(...settingsView(name, t.config ?? {}, editing, refresh));
  } catch (e) {
    partitions.replaceChildren(errorBox(e));
  }
}

/** Settings not changed by `PATCH config` (placement has its own form). */
const FIXED_SETTINGS = ["partitions", "replication_factor", "flush"];

function settingsView(
  name: string,
  config: Record<string, unknown>,
  editing: { open: boolean },
  refresh: () => void,
): Node[] {
  const entries = Object.entries(config).sort(([a], [b]) => a.localeCompare(b));
  const dlq = config.dead_letter_topic;
  const out: Node[] = [h("h2", null, "Settings")];
  if (typeof dlq === "string") {
    out.push(
      h(
        "p",
        { id: "dead-letter-link" },
        "Share groups send rejected and exhausted records to ",
        h("a", { href: `#/topics/${seg(dlq)}` }, dlq),
        ` after ${plural(Number(config.max_delivery_attempts ?? 0), "delivery attempt")}.`,
      ),
    );
  }
  out.push(
    table(
      "topic-config",
      ["setting", "value", ""],
      entries.map(([key, value]) => settingRow(name, key, value, editing, refresh)),
    ),
  );
  return out;
}

/** A setting's value as a person reads it: durations and sizes in units, with the raw value. */
function humanSetting(key: string, value: unknown): (Node | string)[] {
  if (value === null || value === undefined) return [h("span", { class: "muted" }, "not readable")];
  if (typeof value !== "number") return [typeof value === "string" ? (value === "" ? "default" : value) : JSON.stringify(value)];
  let human: string | null = null;
  if (key.endsWith("_ms")) {
    if (value < 0) human = key === "retention_ms" ? "forever" : "no bound";
    else if (value === 0) human = key === "segment_ms" ? "never" : "default";
    else human = fmtDuration(value);
  } else if (key.endsWith("_bytes") || key.endsWith("_bytes_max")) {
    human = value < 0 ? "no limit" : fmtBytes(value);
  }
  if (human === null) return [fmtNumber(value)];
  return [h("span", { class: "human" }, human), " ", h("span", { class: "raw muted" }, `(${value})`)];
}

/** The PATCH value typed in: a number, a boolean or text as the setting takes; "" removes it. */
function settingInput(current: unknown, text: string): unknown {
  const t = text.trim();
  if (t === "") return null;
  if (typeof current === "number" && /^-?\d+$/.test(t)) return Number(t);
  if (typeof current === "boolean" && (t === "true" || t === "false")) return t === "true";
  return t;
}

function settingRow(
  name: string,
  key: string,
  value: unknown,
  editing: { open: boolean },
  refresh: () => void,
): Child[] {
  const cell = h("span", { class: "setting-value" }, ...humanSetting(key, value));
  if (FIXED_SETTINGS.includes(key)) return [key, cell, ""];
  const edit = h("button", { type: "button", class: "small", "data-edit": key }, "Edit");
  const actions = h("span", null, edit);
  edit.addEventListener("click", () => {
    editing.open = true;
    const input = h("input", { name: key, value: value === null || value === undefined ? "" : String(value), size: 16 });
    const status = h("span", { class: "status-inline" });
    const save = h("button", { type: "submit", class: "small" }, "Save");
    const cancel = h("button", { type: "button", class: "small secondary" }, "Cancel");
    const form = h(
      "form",
      { class: "setting-edit", "data-setting": key },
      input,
      " ",
      save,
      " ",
      cancel,
      " ",
      h("span", { class: "muted" }, "empty: the default"),
      status,
    );
    cancel.addEventListener("click", () => {
      editing.open = false;
      refresh();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      status.replaceChildren(" saving…");
      try {
        const answer = await api<TopicDetail>("PATCH", `/topics/${seg(name)}`, {
          config: { [key]: settingInput(value, input.value) },
        });
        editing.open = false;
        cell.replaceChildren(...humanSetting(key, answer.config[key]));
        actions.replaceChildren(edit);
        refresh();
      } catch (e) {
        status.replaceChildren(errorBox(e));
      }
    });
    cell.replaceChildren(form);
    actions.replaceChildren();
    input.focus();
  });
  return [key, cell, actions];
}

function addPartitionsForm(name: string, grown: () => void): HTMLElement {
  const count = h("input", { name: "partitions", type: "number", min: 1, required: true });
  const status = h("p", { class: "status", role: "status" });
  const form = h(
    "form",
    { id: "add-partitions", class: "inline" },
    h("label", null, "new partition count ", count),
    h("button", { type: "submit" }, "Add partitions"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    status.replaceChildren("adding…");
    try {
      const t = await api<TopicDetail>("PATCH", `/topics/${seg(name)}`, { partitions: Number(count.value) });
      status.replaceChildren(`the topic has ${plural(t.partitions.length, "partition")}`);
      grown();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });
  return h("section", null, h("h2", null, "Add partitions"), form);
}

/** Headers typed one per line as `key=value` (a line without `=`: a header without a value). */
function parseHeaders(text: string): { key: string; value: string | null }[] {
  return text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.length > 0)
    .map((l) => {
      const at = l.indexOf("=");
      return at < 0 ? { key: l, value: null } : { key: l.slice(0, at), value: l.slice(at + 1) };
    });
}

function produceForm(name: string, produced: () => void): HTMLElement {
  const key = h("input", { name: "key", placeholder: "none" });
  const partition = h("input", { name: "partition", type: "number", min: 0, placeholder: "by key" });
  const value = h("textarea", { name: "value", rows: 3, cols: 48, required: true });
  const headers = h("textarea", { name: "headers", rows: 3, cols: 32, placeholder: "key=value, one a line" });
  const status = h("p", { class: "status", role: "status", id: "produce-status" });
  const form = h(
    "form",
    { id: "produce-form", class: "inline" },
    h("label", null, "key ", key),
    h("label", null, "partition ", partition),
    h("label", null, "value ", value),
    h("label", null, "headers ", headers),
    h("button", { type: "submit" }, "Produce"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const body: Record<string, unknown> = { value: value.value, headers: parseHeaders(headers.value) };
    if (key.value !== "") body.key = key.value;
    if (partition.value !== "") body.partition = Number(partition.value);
    status.replaceChildren("producing…");
    try {
      const at = await api<Produced>("POST", `/topics/${seg(name)}/messages`, body);
      status.replaceChildren(
        `produced to partition ${at.partition} at offset ${at.offset} · `,
        h("a", { href: `#/messages?topic=${seg(name)}&partition=${at.partition}&offset=${at.offset}` }, "show it"),
      );
      status.setAttribute("data-offset", String(at.offset));
      status.setAttribute("data-partition", String(at.partition));
      produced();
    } catch (e) {
      status.replaceChildren(errorBox(e));
    }
  });
  return h("section", null, h("h2", null, "Produce a record"), form);
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

// The message browser: a page of records from one partition, from an offset or a time,
// optionally only those with a given key. Headers and payloads are shown as text; a payload
// that parses as a JSON object or array is pretty-printed.

const MESSAGES_LIMIT_DEFAULT = 50;

function messagesPage(root: HTMLElement): void {
  const q = hashParams();
  const results = h("section", { id: "messages" });
  root.replaceChildren(h("h1", null, "Messages"), messageForm(q), results);
  const topic = q.get("topic");
  if (topic) void loadMessages(results, topic, q);
  else results.replaceChildren(h("p", { class: "muted" }, "Choose a topic and a partition."));
}

function messageForm(q: URLSearchParams): HTMLElement {
  const topic = h("select", { name: "topic", required: true });
  const partition = h("input", { name: "partition", type: "number", min: 0, value: q.get("partition") ?? "0" });
  const from = h(
    "select",
    { name: "from" },
    h("option", { value: "offset", selected: !q.has("time") }, "offset"),
    h("option", { value: "time", selected: q.has("time") }, "time (UTC)"),
  );
  const offset = h("input", { name: "offset", type: "number", min: 0, value: q.get("offset") ?? "0" });
  const time = h("input", { name: "time", type: "datetime-local", step: 1, value: q.get("time") ?? "" });
  const key = h("input", { name: "key", placeholder: "any key", value: q.get("key") ?? "" });
  const limit = h("input", { name: "limit", type: "number", min: 1, max: 1000, value: q.get("limit") ?? MESSAGES_LIMIT_DEFAULT });
  const form = h(
    "form",
    { id: "message-form", class: "inline" },
    h("label", null, "topic ", topic),
    h("label", null, "partition ", partition),
    h("label", null, "from ", from),
    h("label", null, "offset ", offset),
    h("label", null, "time ", time),
    h("label", null, "key ", key),
    h("label", null, "limit ", limit),
    h("button", { type: "submit" }, "Read"),
  );
  const want = q.get("topic");
  void api<{ topics: TopicSummary[] }>("GET", "/topics").then(
    ({ topics }) => {
      const names = topics.map((t) => t.name).sort();
      if (want && !names.includes(want)) names.unshift(want);
      topic.replaceChildren(...names.map((n) => h("option", { value: n, selected: n === want }, n)));
    },
    () => {
      if (want) topic.replaceChildren(h("option", { value: want, selected: true }, want));
    },
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams({ topic: topic.value, partition: partition.value || "0", limit: limit.value });
    if (from.value === "time" && time.value) next.set("time", time.value);
    else next.set("offset", offset.value || "0");
    if (key.value) next.set("key", key.value);
    const target = `#/messages?${next}`;
    // The same hash fires no hashchange: read again all the same.
    if (location.hash === target) route();
    else location.hash = target;
  });
  return form;
}

async function loadMessages(section: HTMLElement, topic: string, q: URLSearchParams): Promise<void> {
  const partition = q.get("partition") ?? "0";
  const limit = q.get("limit") ?? String(MESSAGES_LIMIT_DEFAULT);
  const key = q.get("key");
  const at = new URLSearchParams({ limit });
  const time = q.get("time");
  // datetime-local has no zone: the form says UTC, so read it as UTC.
  if (time) at.set("timestamp_ms", String(Date.parse(`${time}Z`)));
  else at.set("offset", q.get("offset") ?? "0");
  section.replaceChildren(h("p", { class: "muted" }, "reading…"));
  try {
    const page = await api<MessagePage>("GET", `/topics/${seg(topic)}/partitions/${seg(partition)}/messages?${at}`);
    const shown = key === null ? page.messages : page.messages.filter((m) => m.key === key);
    // Says which read the page shows (tests wait on it).
    section.setAttribute("data-query", at.toString());
    const nextParams = new URLSearchParams(q);
    nextParams.delete("time");
    nextParams.set("offset", String(page.next_offset));
    section.replaceChildren(
      h(
        "p",
        { id: "messages-summary" },
        `${page.messages.length} messages read from partition ${partition}`,
        key === null ? "" : `, ${shown.length} with key “${key}”`,
        `; high watermark ${page.high_watermark}. `,
        page.next_offset < page.high_watermark ? h("a", { href: `#/messages?${nextParams}` }, "next page →") : "",
      ),
      h("ol", { class: "messages" }, shown.map(messageView)),
    );
  } catch (e) {
    section.replaceChildren(errorBox(e));
  }
}

function messageView(m: Message): HTMLElement {
  return h(
    "li",
    { class: "message", "data-offset": m.offset },
    h(
      "div",
      { class: "meta" },
      h("strong", null, `offset ${m.offset}`),
      ` · ${fmtTime(m.timestamp_ms)} · key `,
      m.key === null ? h("em", null, "none") : h("code", { class: "key" }, m.key),
      m.key !== null && m.key_encoding !== "utf8" ? ` (${m.key_encoding})` : "",
    ),
    m.headers.length
      ? h(
          "dl",
          { class: "headers" },
          m.headers.flatMap((hd) => [
            h("dt", null, hd.key),
            h("dd", null, hd.value, hd.value_encoding !== "utf8" ? ` (${hd.value_encoding})` : ""),
          ]),
        )
      : null,
    payloadView(m),
  );
}

function payloadView(m: Message): HTMLElement {
  if (m.value_encoding !== "utf8") {
    return h("pre", { class: "payload binary", title: `${m.value_encoding} of bytes that are not UTF-8` }, m.value);
  }
  const trimmed = m.value.trim();
  if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
    try {
      return h("pre", { class: "payload json" }, JSON.stringify(JSON.parse(trimmed), null, 2));
    } catch {
      // Not JSON after all: shown as it is.
    }
  }
  return h("pre", { class: "payload" }, m.value);
}

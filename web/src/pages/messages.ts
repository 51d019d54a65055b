// The message browser: a page of records from one partition, from an offset or a time,
// optionally only those with a given key, as cards or as a compact table (a row a record, each
// expandable). Headers and payloads are shown as text; a payload that parses as a JSON object
// or array is pretty-printed; one that is not UTF-8 is marked binary.

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
  const view = h(
    "select",
    { name: "view" },
    h("option", { value: "cards", selected: q.get("view") !== "table" }, "cards"),
    h("option", { value: "table", selected: q.get("view") === "table" }, "compact table"),
  );
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
    h("label", null, "view ", view),
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
    if (view.value === "table") next.set("view", "table");
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
        `${plural(page.messages.length, "message")} read from partition ${partition}`,
        key === null ? "" : `, ${fmtNumber(shown.length)} with key “${key}”`,
        `; high watermark ${page.high_watermark}. `,
        page.next_offset < page.high_watermark ? h("a", { href: `#/messages?${nextParams}` }, "next page →") : "",
      ),
      q.get("view") === "table" ? compactTable(shown) : h("ol", { class: "messages" }, shown.map(messageView)),
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
      m.key !== null && m.key_encoding !== "utf8" ? [" ", binaryMark(m.key_encoding)] : "",
    ),
    m.headers.length
      ? h(
          "dl",
          { class: "headers" },
          m.headers.flatMap((hd) => [
            h("dt", null, hd.key),
            h("dd", null, hd.value, hd.value !== null && hd.value_encoding !== "utf8" ? [" ", binaryMark(hd.value_encoding)] : ""),
          ]),
        )
      : null,
    payloadView(m),
  );
}

/** A visible mark for bytes that are not UTF-8, shown in their encoding. */
function binaryMark(encoding: string): HTMLElement {
  return h("span", { class: "badge binary", title: `shown as ${encoding}: the bytes are not UTF-8` }, `binary · ${encoding}`);
}

function payloadView(m: Message): HTMLElement {
  if (m.value === null) return h("p", { class: "payload none muted" }, "no value (a tombstone)");
  if (m.value_encoding !== "utf8") {
    return h(
      "div",
      { class: "payload-binary" },
      binaryMark(m.value_encoding),
      h("pre", { class: "payload binary", title: `${m.value_encoding} of bytes that are not UTF-8` }, m.value),
    );
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

/** Longest value preview a compact row shows; the whole value is in the expanded row. */
const PREVIEW_CHARS_MAX = 120;

/** One row per record (offset, time, key, headers, value preview); a click expands a row into
 * the record's full card below it. */
function compactTable(messages: Message[]): HTMLElement {
  const body = h("tbody");
  for (const m of messages) {
    const value = m.value ?? "";
    const preview = value.length > PREVIEW_CHARS_MAX ? `${value.slice(0, PREVIEW_CHARS_MAX)}…` : value;
    const toggle = h("button", { type: "button", class: "small secondary expand", "aria-expanded": "false" }, "▸");
    const row = h(
      "tr",
      { class: "message-row", "data-offset": m.offset },
      h("td", null, toggle),
      h("td", null, String(m.offset)),
      h("td", { class: "time" }, fmtTime(m.timestamp_ms)),
      h("td", null, m.key === null ? h("em", null, "none") : h("code", { class: "key" }, m.key)),
      h("td", null, m.headers.length ? String(m.headers.length) : ""),
      h(
        "td",
        { class: "preview" },
        m.value === null ? h("em", null, "none") : m.value_encoding !== "utf8" ? [binaryMark(m.value_encoding), " "] : "",
        preview,
      ),
    );
    const detail = h("tr", { class: "message-detail", hidden: true }, h("td", { colspan: 6 }, messageView(m)));
    const flip = () => {
      const open = detail.hidden;
      detail.hidden = !open;
      toggle.textContent = open ? "▾" : "▸";
      toggle.setAttribute("aria-expanded", String(open));
    };
    row.addEventListener("click", flip);
    body.append(row, detail);
  }
  return h(
    "table",
    { id: "messages-table", class: "compact" },
    h("thead", null, h("tr", null, ["", "offset", "time", "key", "headers", "value"].map((t) => h("th", null, t)))),
    body,
  );
}

"use strict";
function applyAttrs(el, attrs) {
    if (!attrs)
        return;
    for (const [name, value] of Object.entries(attrs)) {
        if (typeof value === "function") {
            el.addEventListener(name.replace(/^on/, ""), value);
        }
        else if (value === true) {
            el.setAttribute(name, "");
        }
        else if (value !== false && value !== null && value !== undefined) {
            el.setAttribute(name, String(value));
        }
    }
}
function appendChildren(el, children) {
    for (const child of children.flat()) {
        if (child === null || child === undefined || child === false)
            continue;
        el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
}
function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    applyAttrs(el, attrs);
    appendChildren(el, children);
    return el;
}
function svg(tag, attrs, ...children) {
    const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
    applyAttrs(el, attrs);
    appendChildren(el, children);
    return el;
}
function table(id, headers, rows) {
    return h("table", { id }, h("thead", null, h("tr", null, headers.map((t) => h("th", null, t)))), h("tbody", null, rows.length === 0
        ? h("tr", null, h("td", { colspan: headers.length, class: "empty" }, "none"))
        : rows.map((cells) => h("tr", null, cells.map((c) => h("td", null, c))))));
}
function badge(ok, yes, no) {
    return h("span", { class: ok ? "badge ok" : "badge bad" }, ok ? yes : no);
}
function fmtBytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) {
        n /= 1024;
        i++;
    }
    return `${i === 0 ? n.toFixed(0) : n.toFixed(1)} ${units[i]}`;
}
function fmtNumber(n) {
    if (Math.abs(n) >= 100 || Number.isInteger(n))
        return Math.round(n).toLocaleString("en-US");
    return n.toFixed(1);
}
function fmtTime(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
}
function hashParams() {
    const hash = location.hash;
    const q = hash.indexOf("?");
    return new URLSearchParams(q < 0 ? "" : hash.slice(q + 1));
}
function errorBox(e) {
    return h("p", { class: "error", role: "alert" }, e instanceof Error ? e.message : String(e));
}
class ApiError extends Error {
    constructor(message, status, code) {
        super(message);
        this.status = status;
        this.code = code;
    }
}
function authMessage(status, what) {
    if (status === 401) {
        return `not logged in, or the login was refused: reload the page to log in with a tinymq user (${what})`;
    }
    if (status === 403)
        return `your user may not do this: ${what}`;
    return null;
}
async function api(method, path, body) {
    const init = { method, headers: { Accept: "application/json" }, credentials: "same-origin" };
    if (body !== undefined) {
        init.body = JSON.stringify(body);
        init.headers = { Accept: "application/json", "Content-Type": "application/json" };
    }
    const response = await fetch(`/api/v1${path}`, init);
    const text = await response.text();
    let parsed = undefined;
    if (text.length > 0) {
        try {
            parsed = JSON.parse(text);
        }
        catch {
            parsed = undefined;
        }
    }
    if (!response.ok) {
        const p = (parsed ?? {});
        const what = p.detail ?? p.title ?? response.statusText;
        const code = p.code ? ` (${p.code})` : "";
        const refused = authMessage(response.status, `${what}${code}`);
        const message = refused ?? `${response.status} ${what}${code}`;
        throw new ApiError(`${method} ${path}: ${message}`, response.status, p.code);
    }
    return parsed;
}
const seg = encodeURIComponent;
const CHART_W = 640;
const CHART_H = 180;
const PAD_L = 72;
const PAD_R = 12;
const PAD_T = 10;
const PAD_B = 24;
function niceMax(max) {
    if (!(max > 4))
        return 4;
    const step = Math.pow(10, Math.floor(Math.log10(max)));
    for (const m of [1, 2, 2.5, 5, 10]) {
        if (m * step >= max)
            return m * step;
    }
    return 10 * step;
}
function gridLines(top, fmt) {
    const out = [];
    const plotH = CHART_H - PAD_T - PAD_B;
    for (let i = 0; i <= 4; i++) {
        const v = (top * i) / 4;
        const y = PAD_T + plotH - (plotH * i) / 4;
        out.push(svg("line", { class: "grid", x1: PAD_L, x2: CHART_W - PAD_R, y1: y, y2: y }));
        out.push(svg("text", { class: "axis", x: PAD_L - 6, y: y + 4, "text-anchor": "end" }, fmt(v)));
    }
    return out;
}
function lineChart(id, series, now, windowMs, fmt) {
    const values = series.flatMap((s) => s.points.map((p) => p[1]));
    const top = niceMax(Math.max(0, ...values));
    const plotW = CHART_W - PAD_L - PAD_R;
    const plotH = CHART_H - PAD_T - PAD_B;
    const x = (t) => PAD_L + plotW * (1 - Math.min(1, Math.max(0, (now - t) / windowMs)));
    const y = (v) => PAD_T + plotH - (plotH * Math.max(0, v)) / top;
    const lines = series.map((s) => svg("polyline", {
        class: `line ${s.cls}`,
        "data-series": s.name,
        "data-last": s.points.length ? s.points[s.points.length - 1][1] : "",
        points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
    }));
    const legend = series.map((s, i) => svg("text", { class: `legend ${s.cls}`, x: PAD_L + 8 + i * 110, y: PAD_T + 14 }, `— ${s.name}`));
    return svg("svg", {
        id,
        class: "chart",
        viewBox: `0 0 ${CHART_W} ${CHART_H}`,
        role: "img",
        "data-max": Math.max(0, ...values),
        "data-points": values.length,
    }, gridLines(top, fmt), svg("text", { class: "axis", x: PAD_L, y: CHART_H - 6 }, `−${Math.round(windowMs / 1000)} s`), svg("text", { class: "axis", x: CHART_W - PAD_R, y: CHART_H - 6, "text-anchor": "end" }, "now"), lines, legend);
}
function barChart(id, bars, fmt) {
    const top = niceMax(Math.max(0, ...bars.map((b) => b.value)));
    const plotW = CHART_W - PAD_L - PAD_R;
    const plotH = CHART_H - PAD_T - PAD_B;
    const slot = plotW / Math.max(1, bars.length);
    const width = Math.max(2, Math.min(48, slot * 0.7));
    const drawn = bars.map((b, i) => {
        const hgt = (plotH * Math.max(0, b.value)) / top;
        const cx = PAD_L + slot * i + slot / 2;
        return svg("g", { "data-label": b.label, "data-value": b.value }, svg("rect", { class: "bar", x: cx - width / 2, y: PAD_T + plotH - hgt, width, height: hgt }), svg("text", { class: "axis", x: cx, y: CHART_H - 6, "text-anchor": "middle" }, b.label), svg("title", null, `${b.label}: ${fmt(b.value)}`));
    });
    return svg("svg", { id, class: "chart", viewBox: `0 0 ${CHART_W} ${CHART_H}`, role: "img" }, gridLines(top, fmt), drawn);
}
function parseMetrics(text) {
    const out = [];
    for (const line of text.split("\n")) {
        if (line === "" || line.startsWith("#"))
            continue;
        const sample = parseSample(line);
        if (sample)
            out.push(sample);
    }
    return out;
}
function parseSample(line) {
    const brace = line.indexOf("{");
    const space = line.indexOf(" ");
    const labels = {};
    let rest;
    let name;
    if (brace >= 0 && (space < 0 || brace < space)) {
        name = line.slice(0, brace);
        let i = brace + 1;
        while (i < line.length && line[i] !== "}") {
            const eq = line.indexOf("=", i);
            if (eq < 0 || line[eq + 1] !== '"')
                return null;
            const key = line.slice(i, eq);
            let value = "";
            let j = eq + 2;
            while (j < line.length && line[j] !== '"') {
                if (line[j] === "\\" && j + 1 < line.length) {
                    const c = line[j + 1];
                    value += c === "n" ? "\n" : c;
                    j += 2;
                }
                else {
                    value += line[j++];
                }
            }
            labels[key] = value;
            i = j + 1;
            if (line[i] === ",")
                i++;
        }
        rest = line.slice(i + 1).trim();
    }
    else {
        if (space < 0)
            return null;
        name = line.slice(0, space);
        rest = line.slice(space + 1).trim();
    }
    const value = Number(rest.split(" ")[0]);
    return Number.isNaN(value) ? null : { name, labels, value };
}
function sumOf(samples, name) {
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
function readCounters(samples) {
    const pick = (names) => {
        for (const n of names) {
            const v = sumOf(samples, n);
            if (v !== null)
                return v;
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
const HISTORY_MS = 120000;
class Throughput {
    constructor() {
        this.history = {
            bytesIn: [],
            bytesOut: [],
            recordsIn: [],
            recordsOut: [],
        };
        this.latest = { bytesIn: null, bytesOut: null, recordsIn: null, recordsOut: null };
        this.error = null;
        this.previous = null;
        this.listeners = new Set();
    }
    start() {
        void this.poll();
        setInterval(() => void this.poll(), POLL_MS);
    }
    subscribe(listener) {
        this.listeners.add(listener);
        return () => this.listeners.delete(listener);
    }
    async poll() {
        try {
            const response = await fetch("/metrics", { credentials: "same-origin" });
            if (!response.ok) {
                const refused = authMessage(response.status, "reading /metrics needs DESCRIBE on the cluster");
                throw new Error(`/metrics: ${refused ?? `answered ${response.status}`}`);
            }
            this.record(Date.now(), readCounters(parseMetrics(await response.text())));
            this.error = null;
        }
        catch (e) {
            this.error = e instanceof Error ? e.message : String(e);
        }
        this.listeners.forEach((l) => l());
    }
    record(at, counters) {
        this.latest = counters;
        const prev = this.previous;
        this.previous = { at, counters };
        if (!prev || at <= prev.at)
            return;
        const seconds = (at - prev.at) / 1000;
        for (const name of Object.keys(this.history)) {
            const now = counters[name];
            const before = prev.counters[name];
            if (now === null || before === null || now < before)
                continue;
            const points = this.history[name];
            points.push([at, (now - before) / seconds]);
            while (points.length > 0 && points[0][0] < at - HISTORY_MS)
                points.shift();
        }
    }
    rate(name) {
        const points = this.history[name];
        return this.latest[name] === null || points.length === 0 ? null : points[points.length - 1][1];
    }
}
const throughput = new Throughput();
const CLUSTER_REFRESH_MS = 5000;
const CHART_WINDOW_MS = 60000;
const PARTITION_HEALTH_TOPICS_MAX = 50;
function overviewPage(root) {
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
function rateText(id, name, fmt) {
    const rate = throughput.rate(name);
    const absent = throughput.latest[name] === null;
    return h("span", { id, class: "rate", "data-rate": rate ?? "" }, absent ? "not exported" : rate === null ? "measuring…" : `${fmt(rate)}/s`);
}
function throughputView() {
    const now = Date.now();
    const bytes = (v) => fmtBytes(v);
    const records = (v) => fmtNumber(v);
    return [
        h("h2", null, "Throughput of this node"),
        ...(throughput.error ? [errorBox(throughput.error)] : []),
        h("p", { class: "rates" }, "in ", rateText("rate-bytes-in", "bytesIn", bytes), " · ", rateText("rate-records-in", "recordsIn", records), " records — out ", rateText("rate-bytes-out", "bytesOut", bytes), " · ", rateText("rate-records-out", "recordsOut", records), " records"),
        h("div", { class: "charts" }, h("figure", null, h("figcaption", null, "bytes per second"), lineChart("chart-bytes", [
            { name: "in", cls: "in", points: throughput.history.bytesIn },
            { name: "out", cls: "out", points: throughput.history.bytesOut },
        ], now, CHART_WINDOW_MS, bytes)), h("figure", null, h("figcaption", null, "records per second"), lineChart("chart-records", [
            { name: "in", cls: "in", points: throughput.history.recordsIn },
            { name: "out", cls: "out", points: throughput.history.recordsOut },
        ], now, CHART_WINDOW_MS, records))),
    ];
}
async function loadCluster(section) {
    let ready = {};
    try {
        const response = await fetch("/health/ready", { credentials: "same-origin" });
        ready = await response.json();
    }
    catch {
        ready = { status: "unreachable" };
    }
    try {
        const c = await api("GET", "/cluster");
        const leader = c.meta.leader;
        section.replaceChildren(h("h2", null, "Cluster ", h("code", null, c.cluster_id)), h("p", { id: "node-health" }, "This node", ready.role ? ` (${ready.role})` : "", ": ", badge(ready.status === "ready", "ready", ready.status ?? "unknown"), ready.missing && ready.missing.length ? ` missing: ${ready.missing.join(", ")}` : ""), h("h3", null, "MetaServer quorum — leader ", h("span", { id: "meta-leader" }, leader === null ? "unknown" : `node ${leader}`)), table("meta-nodes", ["node", "address", "state", "role", "applied index"], c.meta.nodes.map((n) => [
            String(n.id),
            n.address,
            badge(n.up, "up", "down"),
            n.leader ? "leader" : "follower",
            n.applied_index === null ? "—" : fmtNumber(n.applied_index),
        ])), h("h3", null, "Brokers"), table("brokers", ["broker", "address", "health"], c.brokers.map((b) => [String(b.id), b.address, badge(b.alive, "alive", "down")])));
    }
    catch (e) {
        section.replaceChildren(h("h2", null, "Cluster"), errorBox(e));
    }
}
async function loadPartitionHealth(section) {
    try {
        const list = await api("GET", "/topics");
        const counted = list.topics.slice(0, PARTITION_HEALTH_TOPICS_MAX);
        const details = await Promise.all(counted.map((t) => api("GET", `/topics/${seg(t.name)}`)));
        const all = details.flatMap((d) => d.partitions);
        const under = all.filter((p) => p.isr.length < p.replicas.length).length;
        const offline = all.filter((p) => p.leader === null).length;
        section.replaceChildren(h("h2", null, "Partitions"), h("p", null, counted.length < list.topics.length
            ? `${list.topics.length} topics; of the first ${counted.length}, ${all.length} partitions; under-replicated: `
            : `${list.topics.length} topics, ${all.length} partitions; under-replicated: `, h("strong", { id: "under-replicated", class: under ? "bad" : "ok" }, String(under)), "; offline: ", h("strong", { id: "offline", class: offline ? "bad" : "ok" }, String(offline))));
    }
    catch (e) {
        section.replaceChildren(h("h2", null, "Partitions"), errorBox(e));
    }
}
const TOPICS_REFRESH_MS = 5000;
function topicsPage(root) {
    const list = h("section", { id: "topic-list" }, h("p", { class: "muted" }, "loading…"));
    const refresh = () => void loadTopicList(list);
    root.replaceChildren(h("h1", null, "Topics"), createTopicForm(refresh), list);
    refresh();
    const timer = setInterval(refresh, TOPICS_REFRESH_MS);
    return () => clearInterval(timer);
}
function createTopicForm(created) {
    const name = h("input", { name: "name", required: true, placeholder: "orders", pattern: "[A-Za-z0-9._\\-]+" });
    const partitions = h("input", { name: "partitions", type: "number", min: 1, value: 1 });
    const replication = h("input", { name: "replication_factor", type: "number", min: 1, placeholder: "default" });
    const status = h("p", { class: "status", role: "status" });
    const form = h("form", { id: "create-topic", class: "inline" }, h("label", null, "name ", name), h("label", null, "partitions ", partitions), h("label", null, "replication factor ", replication), h("button", { type: "submit" }, "Create topic"), status);
    form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const body = { name: name.value.trim() };
        if (partitions.value)
            body.partitions = Number(partitions.value);
        if (replication.value)
            body.replication_factor = Number(replication.value);
        status.replaceChildren("creating…");
        try {
            await api("POST", "/topics", body);
            status.replaceChildren(`created ${body.name}`);
            name.value = "";
            created();
        }
        catch (e) {
            status.replaceChildren(errorBox(e));
        }
    });
    return h("section", null, h("h2", null, "Create a topic"), form);
}
async function loadTopicList(section) {
    try {
        const { topics } = await api("GET", "/topics");
        topics.sort((a, b) => a.name.localeCompare(b.name));
        section.replaceChildren(h("h2", null, `${topics.length} topics`), table("topics", ["topic", "partitions", "replication factor"], topics.map((t) => [
            h("a", { href: `#/topics/${seg(t.name)}` }, t.name),
            String(t.partitions),
            String(t.replication_factor),
        ])));
    }
    catch (e) {
        section.replaceChildren(errorBox(e));
    }
}
function topicDetailPage(root, name) {
    const body = h("div", { id: "topic-detail" }, h("p", { class: "muted" }, "loading…"));
    root.replaceChildren(h("p", null, h("a", { href: "#/topics" }, "← topics")), h("h1", null, "Topic ", h("code", null, name)), body);
    const refresh = () => void loadTopicDetail(body, name);
    refresh();
    const timer = setInterval(refresh, TOPICS_REFRESH_MS);
    return () => clearInterval(timer);
}
function offsetText(v) {
    return v === null || v < 0 ? "—" : fmtNumber(v);
}
async function loadTopicDetail(body, name) {
    try {
        const t = await api("GET", `/topics/${seg(name)}`);
        const config = Object.entries(t.config ?? {}).sort(([a], [b]) => a.localeCompare(b));
        body.replaceChildren(h("h2", null, `${t.partitions.length} partitions`), table("partitions", ["partition", "leader", "replicas", "ISR", "size", "log start", "log end", "high watermark", ""], t.partitions.map((p) => [
            String(p.partition),
            p.leader === null ? badge(false, "", "offline") : String(p.leader),
            p.replicas.join(", "),
            p.isr.length < p.replicas.length ? h("span", { class: "bad" }, p.isr.join(", ")) : p.isr.join(", "),
            p.size_bytes === null ? "—" : fmtBytes(p.size_bytes),
            offsetText(p.log_start_offset),
            offsetText(p.log_end_offset),
            offsetText(p.high_watermark),
            h("a", { href: `#/messages?topic=${seg(name)}&partition=${p.partition}&offset=${p.log_start_offset ?? 0}` }, "browse"),
        ])), h("h2", null, "Settings"), table("topic-config", ["setting", "value"], config.map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)])), deleteButton(name));
    }
    catch (e) {
        body.replaceChildren(errorBox(e));
    }
}
function deleteButton(name) {
    const status = h("span", { class: "status" });
    const button = h("button", { type: "button", class: "danger" }, "Delete topic");
    button.addEventListener("click", async () => {
        if (!confirm(`Delete topic ${name} and all its messages?`))
            return;
        try {
            await api("DELETE", `/topics/${seg(name)}`);
            location.hash = "#/topics";
        }
        catch (e) {
            status.replaceChildren(errorBox(e));
        }
    });
    return h("p", null, button, " ", status);
}
const MESSAGES_LIMIT_DEFAULT = 50;
function messagesPage(root) {
    const q = hashParams();
    const results = h("section", { id: "messages" });
    root.replaceChildren(h("h1", null, "Messages"), messageForm(q), results);
    const topic = q.get("topic");
    if (topic)
        void loadMessages(results, topic, q);
    else
        results.replaceChildren(h("p", { class: "muted" }, "Choose a topic and a partition."));
}
function messageForm(q) {
    const topic = h("select", { name: "topic", required: true });
    const partition = h("input", { name: "partition", type: "number", min: 0, value: q.get("partition") ?? "0" });
    const from = h("select", { name: "from" }, h("option", { value: "offset", selected: !q.has("time") }, "offset"), h("option", { value: "time", selected: q.has("time") }, "time (UTC)"));
    const offset = h("input", { name: "offset", type: "number", min: 0, value: q.get("offset") ?? "0" });
    const time = h("input", { name: "time", type: "datetime-local", step: 1, value: q.get("time") ?? "" });
    const key = h("input", { name: "key", placeholder: "any key", value: q.get("key") ?? "" });
    const limit = h("input", { name: "limit", type: "number", min: 1, max: 1000, value: q.get("limit") ?? MESSAGES_LIMIT_DEFAULT });
    const form = h("form", { id: "message-form", class: "inline" }, h("label", null, "topic ", topic), h("label", null, "partition ", partition), h("label", null, "from ", from), h("label", null, "offset ", offset), h("label", null, "time ", time), h("label", null, "key ", key), h("label", null, "limit ", limit), h("button", { type: "submit" }, "Read"));
    const want = q.get("topic");
    void api("GET", "/topics").then(({ topics }) => {
        const names = topics.map((t) => t.name).sort();
        if (want && !names.includes(want))
            names.unshift(want);
        topic.replaceChildren(...names.map((n) => h("option", { value: n, selected: n === want }, n)));
    }, () => {
        if (want)
            topic.replaceChildren(h("option", { value: want, selected: true }, want));
    });
    form.addEventListener("submit", (event) => {
        event.preventDefault();
        const next = new URLSearchParams({ topic: topic.value, partition: partition.value || "0", limit: limit.value });
        if (from.value === "time" && time.value)
            next.set("time", time.value);
        else
            next.set("offset", offset.value || "0");
        if (key.value)
            next.set("key", key.value);
        const target = `#/messages?${next}`;
        if (location.hash === target)
            route();
        else
            location.hash = target;
    });
    return form;
}
async function loadMessages(section, topic, q) {
    const partition = q.get("partition") ?? "0";
    const limit = q.get("limit") ?? String(MESSAGES_LIMIT_DEFAULT);
    const key = q.get("key");
    const at = new URLSearchParams({ limit });
    const time = q.get("time");
    if (time)
        at.set("timestamp_ms", String(Date.parse(`${time}Z`)));
    else
        at.set("offset", q.get("offset") ?? "0");
    section.replaceChildren(h("p", { class: "muted" }, "reading…"));
    try {
        const page = await api("GET", `/topics/${seg(topic)}/partitions/${seg(partition)}/messages?${at}`);
        const shown = key === null ? page.messages : page.messages.filter((m) => m.key === key);
        section.setAttribute("data-query", at.toString());
        const nextParams = new URLSearchParams(q);
        nextParams.delete("time");
        nextParams.set("offset", String(page.next_offset));
        section.replaceChildren(h("p", { id: "messages-summary" }, `${page.messages.length} messages read from partition ${partition}`, key === null ? "" : `, ${shown.length} with key “${key}”`, `; high watermark ${page.high_watermark}. `, page.next_offset < page.high_watermark ? h("a", { href: `#/messages?${nextParams}` }, "next page →") : ""), h("ol", { class: "messages" }, shown.map(messageView)));
    }
    catch (e) {
        section.replaceChildren(errorBox(e));
    }
}
function messageView(m) {
    return h("li", { class: "message", "data-offset": m.offset }, h("div", { class: "meta" }, h("strong", null, `offset ${m.offset}`), ` · ${fmtTime(m.timestamp_ms)} · key `, m.key === null ? h("em", null, "none") : h("code", { class: "key" }, m.key), m.key !== null && m.key_encoding !== "utf8" ? ` (${m.key_encoding})` : ""), m.headers.length
        ? h("dl", { class: "headers" }, m.headers.flatMap((hd) => [
            h("dt", null, hd.key),
            h("dd", null, hd.value, hd.value_encoding !== "utf8" ? ` (${hd.value_encoding})` : ""),
        ]))
        : null, payloadView(m));
}
function payloadView(m) {
    if (m.value_encoding !== "utf8") {
        return h("pre", { class: "payload binary", title: `${m.value_encoding} of bytes that are not UTF-8` }, m.value);
    }
    const trimmed = m.value.trim();
    if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
        try {
            return h("pre", { class: "payload json" }, JSON.stringify(JSON.parse(trimmed), null, 2));
        }
        catch {
        }
    }
    return h("pre", { class: "payload" }, m.value);
}
const GROUPS_REFRESH_MS = 2000;
function groupsPage(root) {
    const list = h("section", { id: "group-list" }, h("p", { class: "muted" }, "loading…"));
    root.replaceChildren(h("h1", null, "Consumer groups"), list);
    const refresh = async () => {
        try {
            const { groups } = await api("GET", "/groups");
            groups.sort((a, b) => a.group_id.localeCompare(b.group_id));
            list.replaceChildren(table("groups", ["group", "state", "members"], groups.map((g) => [h("a", { href: `#/groups/${seg(g.group_id)}` }, g.group_id), g.state, String(g.members)])));
        }
        catch (e) {
            list.replaceChildren(errorBox(e));
        }
    };
    void refresh();
    const timer = setInterval(() => void refresh(), GROUPS_REFRESH_MS);
    return () => clearInterval(timer);
}
function groupDetailPage(root, id) {
    const body = h("div", { id: "group-detail" }, h("p", { class: "muted" }, "loading…"));
    root.replaceChildren(h("p", null, h("a", { href: "#/groups" }, "← groups")), h("h1", null, "Group ", h("code", null, id)), body);
    const refresh = () => void loadGroup(body, id);
    refresh();
    const timer = setInterval(refresh, GROUPS_REFRESH_MS);
    return () => clearInterval(timer);
}
async function loadGroup(body, id) {
    try {
        const g = await api("GET", `/groups/${seg(id)}`);
        const offsets = [...g.offsets].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
        const total = offsets.reduce((sum, o) => sum + (o.lag ?? 0), 0);
        body.replaceChildren(h("p", null, `state ${g.state} · generation ${g.generation} · ${g.members.length} members · total lag `, h("strong", { id: "total-lag" }, fmtNumber(total))), h("h2", null, "Members"), table("members", ["member", "client", "assignment"], g.members.map((m) => [
            m.member_id,
            m.client_id,
            m.assignment.map((a) => `${a.topic}: ${a.partitions.join(", ")}`).join("; "),
        ])), h("h2", null, "Lag per partition"), h("figure", { class: "narrow" }, h("figcaption", null, "records behind the high watermark, by topic/partition"), barChart("lag-chart", offsets.map((o) => ({ label: `${o.topic}/${o.partition}`, value: o.lag ?? 0 })), fmtNumber)), table("group-offsets", ["topic", "partition", "committed offset", "high watermark", "lag"], offsets.map((o) => [
            o.topic,
            String(o.partition),
            o.committed_offset === null ? "—" : fmtNumber(o.committed_offset),
            o.high_watermark === null ? "—" : fmtNumber(o.high_watermark),
            h("span", { class: "lag", "data-lag": o.lag ?? "" }, o.lag === null ? "—" : fmtNumber(o.lag)),
        ])));
    }
    catch (e) {
        body.replaceChildren(errorBox(e));
    }
}
let leavePage = undefined;
function route() {
    if (leavePage)
        leavePage();
    leavePage = undefined;
    const root = document.getElementById("page");
    if (!root)
        return;
    const path = location.hash.replace(/^#\/?/, "").split("?")[0];
    const [section, ...rest] = path.split("/").map((p) => decodeURIComponent(p));
    const name = rest.join("/");
    for (const link of document.querySelectorAll("nav a")) {
        link.classList.toggle("active", link.getAttribute("data-section") === (section || "overview"));
    }
    try {
        switch (section) {
            case "":
            case "overview":
                leavePage = overviewPage(root);
                break;
            case "topics":
                leavePage = name ? topicDetailPage(root, name) : topicsPage(root);
                break;
            case "messages":
                messagesPage(root);
                break;
            case "groups":
                leavePage = name ? groupDetailPage(root, name) : groupsPage(root);
                break;
            default:
                root.replaceChildren(h("h1", null, "Not found"), h("p", null, "No page at ", h("code", null, location.hash)));
        }
    }
    catch (e) {
        root.replaceChildren(errorBox(e));
    }
}
window.addEventListener("hashchange", route);
throughput.start();
route();

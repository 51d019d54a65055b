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
function trimmed(n) {
    const text = n.toFixed(1);
    return text.endsWith(".0") ? text.slice(0, -2) : text;
}
function fmtBytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(n) >= 1024 && i < units.length - 1) {
        n /= 1024;
        i++;
    }
    return `${i === 0 ? n.toFixed(0) : trimmed(n)} ${units[i]}`;
}
function fmtDuration(ms) {
    const units = [
        [86400000, "d"],
        [3600000, "h"],
        [60000, "min"],
        [1000, "s"],
    ];
    for (const [size, unit] of units) {
        if (Math.abs(ms) >= size)
            return `${trimmed(ms / size)} ${unit}`;
    }
    return `${ms} ms`;
}
function plural(count, one, many = `${one}s`) {
    return `${fmtNumber(count)} ${count === 1 ? one : many}`;
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
    const legend = series.map((s, i) => svg("text", { class: `legend ${s.cls}`, x: PAD_L + 8 + i * 110, y: PAD_T + 14 }, `${i === 0 ? "━━" : "╍╍"} ${s.name}`));
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
            ? `${plural(list.topics.length, "topic")}; of the first ${counted.length}, ${plural(all.length, "partition")}; under-replicated: `
            : `${plural(list.topics.length, "topic")}, ${plural(all.length, "partition")}; under-replicated: `, h("strong", { id: "under-replicated", class: under ? "bad" : "ok" }, String(under)), "; offline: ", h("strong", { id: "offline", class: offline ? "bad" : "ok" }, String(offline))));
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
function deadLetterMark(t) {
    const sources = t.dead_letter_of ?? [];
    if (sources.length === 0)
        return null;
    return h("span", { class: "dlq-mark", "data-dead-letters-of": sources.join(",") }, h("span", { class: "badge dlq" }, "dead-letter topic"), " of ", sources.flatMap((s, i) => [i ? ", " : "", h("a", { href: `#/topics/${seg(s)}` }, s)]));
}
async function loadTopicList(section) {
    try {
        const { topics } = await api("GET", "/topics");
        topics.sort((a, b) => a.name.localeCompare(b.name));
        section.replaceChildren(h("h2", null, plural(topics.length, "topic")), table("topics", ["topic", "partitions", "replication factor", ""], topics.map((t) => [
            h("a", { href: `#/topics/${seg(t.name)}` }, t.name),
            String(t.partitions),
            String(t.replication_factor),
            deadLetterMark(t),
        ])));
    }
    catch (e) {
        section.replaceChildren(errorBox(e));
    }
}
function topicDetailPage(root, name) {
    const partitions = h("section", { id: "topic-detail" }, h("p", { class: "muted" }, "loading…"));
    const settings = h("section", { id: "topic-settings" });
    const editing = { open: false };
    const refresh = () => void loadTopicDetail(partitions, settings, name, editing, refresh);
    root.replaceChildren(h("p", null, h("a", { href: "#/topics" }, "← topics")), h("h1", null, "Topic ", h("code", null, name)), partitions, settings, addPartitionsForm(name, refresh), produceForm(name, refresh), deleteButton(name));
    refresh();
    const timer = setInterval(refresh, TOPICS_REFRESH_MS);
    return () => clearInterval(timer);
}
function offsetText(v) {
    return v === null || v < 0 ? "—" : fmtNumber(v);
}
async function loadTopicDetail(partitions, settings, name, editing, refresh) {
    try {
        const t = await api("GET", `/topics/${seg(name)}`);
        partitions.setAttribute("data-partitions", String(t.partitions.length));
        partitions.replaceChildren(h("h2", null, plural(t.partitions.length, "partition")), table("partitions", ["partition", "leader", "replicas", "ISR", "size", "log start", "log end", "high watermark", ""], t.partitions.map((p) => [
            String(p.partition),
            p.leader === null ? badge(false, "", "offline") : String(p.leader),
            p.replicas.join(", "),
            p.isr.length < p.replicas.length ? h("span", { class: "bad" }, p.isr.join(", ")) : p.isr.join(", "),
            p.size_bytes === null || p.size_bytes < 0 ? "—" : fmtBytes(p.size_bytes),
            offsetText(p.log_start_offset),
            offsetText(p.log_end_offset),
            offsetText(p.high_watermark),
            h("a", { href: `#/messages?topic=${seg(name)}&partition=${p.partition}&offset=${p.log_start_offset ?? 0}` }, "browse"),
        ])));
        if (!editing.open)
            settings.replaceChildren(...settingsView(name, t.config ?? {}, editing, refresh));
    }
    catch (e) {
        partitions.replaceChildren(errorBox(e));
    }
}
const FIXED_SETTINGS = ["partitions", "replication_factor", "flush"];
function settingsView(name, config, editing, refresh) {
    const entries = Object.entries(config).sort(([a], [b]) => a.localeCompare(b));
    const dlq = config.dead_letter_topic;
    const out = [h("h2", null, "Settings")];
    if (typeof dlq === "string") {
        out.push(h("p", { id: "dead-letter-link" }, "Share groups send rejected and exhausted records to ", h("a", { href: `#/topics/${seg(dlq)}` }, dlq), ` after ${plural(Number(config.max_delivery_attempts ?? 0), "delivery attempt")}.`));
    }
    out.push(table("topic-config", ["setting", "value", ""], entries.map(([key, value]) => settingRow(name, key, value, editing, refresh))));
    return out;
}
function humanSetting(key, value) {
    if (value === null || value === undefined)
        return [h("span", { class: "muted" }, "not readable")];
    if (typeof value !== "number")
        return [typeof value === "string" ? (value === "" ? "default" : value) : JSON.stringify(value)];
    let human = null;
    if (key.endsWith("_ms")) {
        if (value < 0)
            human = key === "retention_ms" ? "forever" : "no bound";
        else if (value === 0)
            human = key === "segment_ms" ? "never" : "default";
        else
            human = fmtDuration(value);
    }
    else if (key.endsWith("_bytes") || key.endsWith("_bytes_max")) {
        human = value < 0 ? "no limit" : fmtBytes(value);
    }
    if (human === null)
        return [fmtNumber(value)];
    return [h("span", { class: "human" }, human), " ", h("span", { class: "raw muted" }, `(${value})`)];
}
function settingInput(current, text) {
    const t = text.trim();
    if (t === "")
        return null;
    if (typeof current === "number" && /^-?\d+$/.test(t))
        return Number(t);
    if (typeof current === "boolean" && (t === "true" || t === "false"))
        return t === "true";
    return t;
}
function settingRow(name, key, value, editing, refresh) {
    const cell = h("span", { class: "setting-value" }, ...humanSetting(key, value));
    if (FIXED_SETTINGS.includes(key))
        return [key, cell, ""];
    const edit = h("button", { type: "button", class: "small", "data-edit": key }, "Edit");
    const actions = h("span", null, edit);
    edit.addEventListener("click", () => {
        editing.open = true;
        const input = h("input", { name: key, value: value === null || value === undefined ? "" : String(value), size: 16 });
        const status = h("span", { class: "status-inline" });
        const save = h("button", { type: "submit", class: "small" }, "Save");
        const cancel = h("button", { type: "button", class: "small secondary" }, "Cancel");
        const form = h("form", { class: "setting-edit", "data-setting": key }, input, " ", save, " ", cancel, " ", h("span", { class: "muted" }, "empty: the default"), status);
        cancel.addEventListener("click", () => {
            editing.open = false;
            refresh();
        });
        form.addEventListener("submit", async (event) => {
            event.preventDefault();
            status.replaceChildren(" saving…");
            try {
                const answer = await api("PATCH", `/topics/${seg(name)}`, {
                    config: { [key]: settingInput(value, input.value) },
                });
                editing.open = false;
                cell.replaceChildren(...humanSetting(key, answer.config[key]));
                actions.replaceChildren(edit);
                refresh();
            }
            catch (e) {
                status.replaceChildren(errorBox(e));
            }
        });
        cell.replaceChildren(form);
        actions.replaceChildren();
        input.focus();
    });
    return [key, cell, actions];
}
function addPartitionsForm(name, grown) {
    const count = h("input", { name: "partitions", type: "number", min: 1, required: true });
    const status = h("p", { class: "status", role: "status" });
    const form = h("form", { id: "add-partitions", class: "inline" }, h("label", null, "new partition count ", count), h("button", { type: "submit" }, "Add partitions"), status);
    form.addEventListener("submit", async (event) => {
        event.preventDefault();
        status.replaceChildren("adding…");
        try {
            const t = await api("PATCH", `/topics/${seg(name)}`, { partitions: Number(count.value) });
            status.replaceChildren(`the topic has ${plural(t.partitions.length, "partition")}`);
            grown();
        }
        catch (e) {
            status.replaceChildren(errorBox(e));
        }
    });
    return h("section", null, h("h2", null, "Add partitions"), form);
}
function parseHeaders(text) {
    return text
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => l.length > 0)
        .map((l) => {
        const at = l.indexOf("=");
        return at < 0 ? { key: l, value: null } : { key: l.slice(0, at), value: l.slice(at + 1) };
    });
}
function produceForm(name, produced) {
    const key = h("input", { name: "key", placeholder: "none" });
    const partition = h("input", { name: "partition", type: "number", min: 0, placeholder: "by key" });
    const value = h("textarea", { name: "value", rows: 3, cols: 48, required: true });
    const headers = h("textarea", { name: "headers", rows: 3, cols: 32, placeholder: "key=value, one a line" });
    const status = h("p", { class: "status", role: "status", id: "produce-status" });
    const form = h("form", { id: "produce-form", class: "inline" }, h("label", null, "key ", key), h("label", null, "partition ", partition), h("label", null, "value ", value), h("label", null, "headers ", headers), h("button", { type: "submit" }, "Produce"), status);
    form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const body = { value: value.value, headers: parseHeaders(headers.value) };
        if (key.value !== "")
            body.key = key.value;
        if (partition.value !== "")
            body.partition = Number(partition.value);
        status.replaceChildren("producing…");
        try {
            const at = await api("POST", `/topics/${seg(name)}/messages`, body);
            status.replaceChildren(`produced to partition ${at.partition} at offset ${at.offset} · `, h("a", { href: `#/messages?topic=${seg(name)}&partition=${at.partition}&offset=${at.offset}` }, "show it"));
            status.setAttribute("data-offset", String(at.offset));
            status.setAttribute("data-partition", String(at.partition));
            produced();
        }
        catch (e) {
            status.replaceChildren(errorBox(e));
        }
    });
    return h("section", null, h("h2", null, "Produce a record"), form);
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
    const view = h("select", { name: "view" }, h("option", { value: "cards", selected: q.get("view") !== "table" }, "cards"), h("option", { value: "table", selected: q.get("view") === "table" }, "compact table"));
    const form = h("form", { id: "message-form", class: "inline" }, h("label", null, "topic ", topic), h("label", null, "partition ", partition), h("label", null, "from ", from), h("label", null, "offset ", offset), h("label", null, "time ", time), h("label", null, "key ", key), h("label", null, "limit ", limit), h("label", null, "view ", view), h("button", { type: "submit" }, "Read"));
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
        if (view.value === "table")
            next.set("view", "table");
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
        section.replaceChildren(h("p", { id: "messages-summary" }, `${plural(page.messages.length, "message")} read from partition ${partition}`, key === null ? "" : `, ${fmtNumber(shown.length)} with key “${key}”`, `; high watermark ${page.high_watermark}. `, page.next_offset < page.high_watermark ? h("a", { href: `#/messages?${nextParams}` }, "next page →") : ""), q.get("view") === "table" ? compactTable(shown) : h("ol", { class: "messages" }, shown.map(messageView)));
    }
    catch (e) {
        section.replaceChildren(errorBox(e));
    }
}
function messageView(m) {
    return h("li", { class: "message", "data-offset": m.offset }, h("div", { class: "meta" }, h("strong", null, `offset ${m.offset}`), ` · ${fmtTime(m.timestamp_ms)} · key `, m.key === null ? h("em", null, "none") : h("code", { class: "key" }, m.key), m.key !== null && m.key_encoding !== "utf8" ? [" ", binaryMark(m.key_encoding)] : ""), m.headers.length
        ? h("dl", { class: "headers" }, m.headers.flatMap((hd) => [
            h("dt", null, hd.key),
            h("dd", null, hd.value, hd.value !== null && hd.value_encoding !== "utf8" ? [" ", binaryMark(hd.value_encoding)] : ""),
        ]))
        : null, payloadView(m));
}
function binaryMark(encoding) {
    return h("span", { class: "badge binary", title: `shown as ${encoding}: the bytes are not UTF-8` }, `binary · ${encoding}`);
}
function payloadView(m) {
    if (m.value === null)
        return h("p", { class: "payload none muted" }, "no value (a tombstone)");
    if (m.value_encoding !== "utf8") {
        return h("div", { class: "payload-binary" }, binaryMark(m.value_encoding), h("pre", { class: "payload binary", title: `${m.value_encoding} of bytes that are not UTF-8` }, m.value));
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
const PREVIEW_CHARS_MAX = 120;
function compactTable(messages) {
    const body = h("tbody");
    for (const m of messages) {
        const value = m.value ?? "";
        const preview = value.length > PREVIEW_CHARS_MAX ? `${value.slice(0, PREVIEW_CHARS_MAX)}…` : value;
        const toggle = h("button", { type: "button", class: "small secondary expand", "aria-expanded": "false" }, "▸");
        const row = h("tr", { class: "message-row", "data-offset": m.offset }, h("td", null, toggle), h("td", null, String(m.offset)), h("td", { class: "time" }, fmtTime(m.timestamp_ms)), h("td", null, m.key === null ? h("em", null, "none") : h("code", { class: "key" }, m.key)), h("td", null, m.headers.length ? String(m.headers.length) : ""), h("td", { class: "preview" }, m.value === null ? h("em", null, "none") : m.value_encoding !== "utf8" ? [binaryMark(m.value_encoding), " "] : "", preview));
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
    return h("table", { id: "messages-table", class: "compact" }, h("thead", null, h("tr", null, ["", "offset", "time", "key", "headers", "value"].map((t) => h("th", null, t)))), body);
}
const GROUPS_REFRESH_MS = 2000;
function groupsPage(root) {
    const list = h("section", { id: "group-list" }, h("p", { class: "muted" }, "loading…"));
    root.replaceChildren(h("h1", null, "Groups"), list);
    const refresh = async () => {
        try {
            const { groups, truncated } = await api("GET", "/groups");
            groups.sort((a, b) => a.group_id.localeCompare(b.group_id));
            list.replaceChildren(h("h2", null, plural(groups.length, "group"), truncated ? " (the first ones only)" : ""), table("groups", ["group", "type", "state", "members", "lag"], groups.map((g) => [
                h("a", { href: `#/groups/${seg(g.group_id)}` }, g.group_id),
                h("span", { class: `group-type ${g.type ?? "consumer"}` }, g.type ?? "consumer"),
                g.state,
                String(g.members),
                h("span", { class: "lag", "data-lag": g.lag ?? "" }, g.lag === undefined || g.lag === null ? "—" : fmtNumber(g.lag)),
            ])));
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
    const reset = h("section", { id: "offset-reset" });
    root.replaceChildren(h("p", null, h("a", { href: "#/groups" }, "← groups")), h("h1", null, "Group ", h("code", null, id)), body, reset);
    const refresh = () => void loadGroup(body, reset, id);
    refresh();
    const timer = setInterval(refresh, GROUPS_REFRESH_MS);
    return () => clearInterval(timer);
}
async function loadGroup(body, reset, id) {
    try {
        const g = await api("GET", `/groups/${seg(id)}`);
        const share = g.type === "share" || (!("offsets" in g) && "partitions" in g);
        body.setAttribute("data-type", share ? "share" : g.type ?? "consumer");
        if (share) {
            body.replaceChildren(...shareGroupView(g));
            reset.replaceChildren();
            return;
        }
        const consumer = g;
        body.replaceChildren(...consumerGroupView(consumer));
        const topics = [...new Set(consumer.offsets.map((o) => o.topic))].sort().join(",");
        const planOpen = reset.querySelector("#reset-plan > *") !== null;
        if (!reset.hasChildNodes() || (reset.getAttribute("data-topics") !== topics && !planOpen)) {
            reset.setAttribute("data-topics", topics);
            reset.replaceChildren(...resetForm(id, consumer));
        }
    }
    catch (e) {
        body.replaceChildren(errorBox(e));
    }
}
function consumerGroupView(g) {
    const offsets = [...g.offsets].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
    const total = offsets.reduce((sum, o) => sum + (o.lag ?? 0), 0);
    const unknown = offsets.some((o) => o.lag === null);
    return [
        h("p", null, `${g.type ?? "consumer"} group · state ${g.state} · generation ${g.generation} · ${plural(g.members.length, "member")} · total lag `, h("strong", { id: "total-lag" }, fmtNumber(total)), unknown ? " (some partitions' lag is unknown)" : ""),
        h("h2", null, "Members"),
        table("members", ["member", "client", "assignment"], g.members.map((m) => [
            m.member_id,
            m.client_id,
            m.assignment.map((a) => `${a.topic}: ${a.partitions.join(", ")}`).join("; "),
        ])),
        h("h2", null, "Lag per partition"),
        h("figure", { class: "narrow" }, h("figcaption", null, "records behind the high watermark, by topic/partition"), barChart("lag-chart", offsets.map((o) => ({ label: `${o.topic}/${o.partition}`, value: o.lag ?? 0 })), fmtNumber)),
        table("group-offsets", ["topic", "partition", "committed offset", "high watermark", "lag"], offsets.map((o) => [
            o.topic,
            String(o.partition),
            o.committed_offset === null ? "—" : fmtNumber(o.committed_offset),
            o.high_watermark === null ? "—" : fmtNumber(o.high_watermark),
            h("span", { class: "lag", "data-lag": o.lag ?? "" }, o.lag === null ? "—" : fmtNumber(o.lag)),
        ])),
    ];
}
function shareGroupView(g) {
    const parts = [...(g.partitions ?? [])].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
    const inFlight = parts.flatMap((p) => (p.in_flight ?? []).map((r) => ({ ...r, topic: p.topic, partition: p.partition })));
    return [
        h("p", null, `share group · state ${g.state} · ${plural((g.members ?? []).length, "member")}`),
        h("h2", null, "Members"),
        table("share-members", ["member"], (g.members ?? []).map((m) => [m])),
        h("h2", null, "Partitions"),
        table("share-partitions", ["topic", "partition", "start", "end", "high watermark", "not yet delivered", "available", "acquired", "accepted", "dead-lettered"], parts.map((p) => [
            p.topic,
            String(p.partition),
            fmtNumber(p.start_offset),
            fmtNumber(p.end_offset),
            p.high_watermark === null ? "—" : fmtNumber(p.high_watermark),
            fmtNumber(p.not_yet_delivered),
            fmtNumber(p.available),
            fmtNumber(p.acquired),
            fmtNumber(p.accepted),
            fmtNumber(p.dead_lettered),
        ])),
        h("h2", null, `In flight: ${plural(inFlight.length, "record")}`),
        table("share-in-flight", ["topic", "partition", "offset", "state", "deliveries", "member", "lock ends"], inFlight.map((r) => [
            r.topic,
            String(r.partition),
            fmtNumber(r.offset),
            r.state,
            String(r.delivery_count),
            r.member_id || "—",
            r.lock_deadline_ms > 0 ? fmtTime(r.lock_deadline_ms) : "—",
        ])),
    ];
}
function resetTarget(kind, value) {
    if (kind === "earliest" || kind === "latest")
        return kind;
    if (kind === "offset")
        return { offset: Number(value) };
    return { timestamp_ms: Date.parse(`${value}Z`) };
}
function plannedOffset(kind, value, p) {
    const start = p.log_start_offset ?? 0;
    const end = p.high_watermark ?? 0;
    if (kind === "earliest")
        return fmtNumber(start);
    if (kind === "latest")
        return fmtNumber(end);
    if (kind === "offset")
        return fmtNumber(Math.min(end, Math.max(start, Number(value))));
    return `first at or after ${value} UTC`;
}
function resetForm(id, g) {
    const topics = [...new Set(g.offsets.map((o) => o.topic))].sort();
    const topic = h("select", { name: "topic" }, topics.map((t) => h("option", { value: t }, t)));
    const kind = h("select", { name: "to" }, ["earliest", "latest", "offset", "time"].map((k) => h("option", { value: k }, k)));
    const value = h("input", { name: "value", placeholder: "offset, or time (UTC)" });
    const plan = h("div", { id: "reset-plan" });
    const form = h("form", { id: "reset-form", class: "inline" }, h("label", null, "topic ", topic), h("label", null, "to ", kind), h("label", null, "offset / time ", value), h("button", { type: "submit" }, "Show the plan"));
    form.addEventListener("submit", async (event) => {
        event.preventDefault();
        plan.replaceChildren(h("p", { class: "muted" }, "planning…"));
        try {
            if ((kind.value === "offset" && !/^\d+$/.test(value.value.trim())) || (kind.value === "time" && Number.isNaN(Date.parse(`${value.value}Z`)))) {
                throw new Error(kind.value === "offset" ? "an offset is a whole number, 0 or more" : "a time is YYYY-MM-DDTHH:MM:SS (UTC)");
            }
            const t = await api("GET", `/topics/${seg(topic.value)}`);
            const committed = new Map(g.offsets.filter((o) => o.topic === topic.value).map((o) => [o.partition, o.committed_offset]));
            const confirm = h("button", { type: "button", class: "danger", id: "reset-confirm" }, "Confirm reset");
            const cancel = h("button", { type: "button", class: "secondary", id: "reset-cancel" }, "Cancel");
            const status = h("p", { class: "status", role: "status", id: "reset-status" });
            cancel.addEventListener("click", () => plan.replaceChildren());
            confirm.addEventListener("click", async () => {
                confirm.disabled = true;
                status.replaceChildren("resetting…");
                try {
                    const done = await api("POST", `/groups/${seg(id)}/offsets`, {
                        topic: topic.value,
                        to: resetTarget(kind.value, value.value.trim()),
                    });
                    status.setAttribute("data-done", "true");
                    status.replaceChildren(`moved ${plural(done.offsets.length, "partition")}: `, done.offsets.map((o) => `${o.partition} → ${o.offset}`).join(", "));
                    confirm.remove();
                    cancel.textContent = "Close";
                }
                catch (e) {
                    confirm.disabled = false;
                    status.replaceChildren(errorBox(e));
                }
            });
            plan.replaceChildren(h("p", null, `Reset group ${id} on ${topic.value}; nothing changes until you confirm. The group must have no members.`), table("reset-plan-table", ["partition", "committed now", "after the reset"], t.partitions.map((p) => {
                const now = committed.get(p.partition);
                return [String(p.partition), now === undefined || now === null ? "—" : fmtNumber(now), plannedOffset(kind.value, value.value.trim(), p)];
            })), h("p", null, confirm, " ", cancel), status);
        }
        catch (e) {
            plan.replaceChildren(errorBox(e));
        }
    });
    return [h("h2", null, "Reset offsets"), form, plan];
}
const ROUTES_REFRESH_MS = 5000;
function routesPage(root) {
    const list = h("section", { id: "route-list" }, h("p", { class: "muted" }, "loading…"));
    root.replaceChildren(h("h1", null, "Routes"), h("p", { class: "muted" }, "Records of a topic that match a filter, copied exactly once to another topic (", h("code", null, "tinymq route add"), ")."), list);
    const refresh = () => void loadRoutes(list);
    refresh();
    const timer = setInterval(refresh, ROUTES_REFRESH_MS);
    return () => clearInterval(timer);
}
async function loadRoutes(section) {
    try {
        const { routes } = await api("GET", "/routes");
        section.replaceChildren(h("h2", null, plural(routes.length, "route")), table("routes", ["route", "from", "to", "filter", "lag", "progress per partition"], routes.map((r) => [
            h("strong", null, r.name),
            h("a", { href: `#/topics/${seg(r.from_topic)}` }, r.from_topic),
            h("a", { href: `#/topics/${seg(r.to_topic)}` }, r.to_topic),
            r.filter ? h("code", null, r.filter) : h("em", { class: "muted" }, "every record"),
            h("span", { class: "lag", "data-lag": r.lag ?? "" }, r.lag === null ? "—" : fmtNumber(r.lag)),
            r.partitions
                .map((p) => `${p.partition}: ${fmtNumber(p.next_offset)}/${fmtNumber(p.high_watermark)} (${plural(p.copied, "copy", "copies")})`)
                .join("; "),
        ])));
    }
    catch (e) {
        section.replaceChildren(errorBox(e));
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
            case "routes":
                leavePage = routesPage(root);
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

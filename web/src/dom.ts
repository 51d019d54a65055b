// Building the page without ever parsing data as HTML: every string from the server becomes a
// text node or an attribute value, never markup.

type Child = Node | string | number | null | undefined | false;
type AttrValue = string | number | boolean | null | undefined | ((event: Event) => void);
type Attrs = Record<string, AttrValue>;

function applyAttrs(el: Element, attrs: Attrs | null | undefined): void {
  if (!attrs) return;
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === "function") {
      el.addEventListener(name.replace(/^on/, ""), value);
    } else if (value === true) {
      el.setAttribute(name, "");
    } else if (value !== false && value !== null && value !== undefined) {
      el.setAttribute(name, String(value));
    }
  }
}

function appendChildren(el: Node, children: (Child | Child[])[]): void {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** An HTML element with attributes (`on*` functions become listeners) and children. */
function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs?: Attrs | null,
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  applyAttrs(el, attrs);
  appendChildren(el, children);
  return el;
}

/** An SVG element, as `h` does for HTML. */
function svg(tag: string, attrs?: Attrs | null, ...children: (Child | Child[])[]): SVGElement {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  applyAttrs(el, attrs);
  appendChildren(el, children);
  return el;
}

/** A table with a header row; `id` names it for tests and styles. */
function table(id: string, headers: string[], rows: Child[][]): HTMLTableElement {
  return h(
    "table",
    { id },
    h("thead", null, h("tr", null, headers.map((t) => h("th", null, t)))),
    h(
      "tbody",
      null,
      rows.length === 0
        ? h("tr", null, h("td", { colspan: headers.length, class: "empty" }, "none"))
        : rows.map((cells) => h("tr", null, cells.map((c) => h("td", null, c)))),
    ),
  );
}

function badge(ok: boolean, yes: string, no: string): HTMLElement {
  return h("span", { class: ok ? "badge ok" : "badge bad" }, ok ? yes : no);
}

/** `n` with one decimal at most, and none when it is whole ("1", "1.5"). */
function trimmed(n: number): string {
  const text = n.toFixed(1);
  return text.endsWith(".0") ? text.slice(0, -2) : text;
}

function fmtBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${i === 0 ? n.toFixed(0) : trimmed(n)} ${units[i]}`;
}

/** A duration in the largest unit it reaches: 604800000 → "7 d", 90000 → "1.5 min". */
function fmtDuration(ms: number): string {
  const units: [number, string][] = [
    [86_400_000, "d"],
    [3_600_000, "h"],
    [60_000, "min"],
    [1000, "s"],
  ];
  for (const [size, unit] of units) {
    if (Math.abs(ms) >= size) return `${trimmed(ms / size)} ${unit}`;
  }
  return `${ms} ms`;
}

/** "1 message", "2 messages": `count` with the word in the number it takes. */
function plural(count: number, one: string, many = `${one}s`): string {
  return `${fmtNumber(count)} ${count === 1 ? one : many}`;
}

function fmtNumber(n: number): string {
  if (Math.abs(n) >= 100 || Number.isInteger(n)) return Math.round(n).toLocaleString("en-US");
  return n.toFixed(1);
}

function fmtTime(ms: number): string {
  return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
}

/** The query of the page's hash route (`#/messages?topic=t`). */
function hashParams(): URLSearchParams {
  const hash = location.hash;
  const q = hash.indexOf("?");
  return new URLSearchParams(q < 0 ? "" : hash.slice(q + 1));
}

function errorBox(e: unknown): HTMLElement {
  return h("p", { class: "error", role: "alert" }, e instanceof Error ? e.message : String(e));
}

// Routes: every content-based route (docs/queues.md, "Routes") with its filter, its lag and
// its progress per source partition, from `GET /api/v1/routes`.

const ROUTES_REFRESH_MS = 5000;

function routesPage(root: HTMLElement): () => void {
  const list = h("section", { id: "route-list" }, h("p", { class: "muted" }, "loading…"));
  root.replaceChildren(
    h("h1", null, "Routes"),
    h("p", { class: "muted" }, "Records of a topic that match a filter, copied exactly once to another topic (", h("code", null, "tinymq route add"), ")."),
    list,
  );
  const refresh = () => void loadRoutes(list);
  refresh();
  const timer = setInterval(refresh, ROUTES_REFRESH_MS);
  return () => clearInterval(timer);
}

async function loadRoutes(section: HTMLElement): Promise<void> {
  try {
    const { routes } = await api<{ routes: RouteInfo[] }>("GET", "/routes");
    section.replaceChildren(
      h("h2", null, plural(routes.length, "route")),
      table(
        "routes",
        ["route", "from", "to", "filter", "lag", "progress per partition"],
        routes.map((r) => [
          h("strong", null, r.name),
          h("a", { href: `#/topics/${seg(r.from_topic)}` }, r.from_topic),
          h("a", { href: `#/topics/${seg(r.to_topic)}` }, r.to_topic),
          r.filter ? h("code", null, r.filter) : h("em", { class: "muted" }, "every record"),
          h("span", { class: "lag", "data-lag": r.lag ?? "" }, r.lag === null ? "—" : fmtNumber(r.lag)),
          r.partitions
            .map((p) => `${p.partition}: ${fmtNumber(p.next_offset)}/${fmtNumber(p.high_watermark)} (${plural(p.copied, "copy", "copies")})`)
            .join("; "),
        ]),
      ),
    );
  } catch (e) {
    section.replaceChildren(errorBox(e));
  }
}

// Consumer groups: the list, and a group's members, their assignments, and committed offsets
// with the lag of each partition, charted.

const GROUPS_REFRESH_MS = 2000;

function groupsPage(root: HTMLElement): () => void {
  const list = h("section", { id: "group-list" }, h("p", { class: "muted" }, "loading…"));
  root.replaceChildren(h("h1", null, "Consumer groups"), list);
  const refresh = async () => {
    try {
      const { groups } = await api<{ groups: GroupSummary[] }>("GET", "/groups");
      groups.sort((a, b) => a.group_id.localeCompare(b.group_id));
      list.replaceChildren(
        table(
          "groups",
          ["group", "state", "members"],
          groups.map((g) => [h("a", { href: `#/groups/${seg(g.group_id)}` }, g.group_id), g.state, String(g.members)]),
        ),
      );
    } catch (e) {
      list.replaceChildren(errorBox(e));
    }
  };
  void refresh();
  const timer = setInterval(() => void refresh(), GROUPS_REFRESH_MS);
  return () => clearInterval(timer);
}

function groupDetailPage(root: HTMLElement, id: string): () => void {
  const body = h("div", { id: "group-detail" }, h("p", { class: "muted" }, "loading…"));
  root.replaceChildren(
    h("p", null, h("a", { href: "#/groups" }, "← groups")),
    h("h1", null, "Group ", h("code", null, id)),
    body,
  );
  const refresh = () => void loadGroup(body, id);
  refresh();
  const timer = setInterval(refresh, GROUPS_REFRESH_MS);
  return () => clearInterval(timer);
}

async function loadGroup(body: HTMLElement, id: string): Promise<void> {
  try {
    const g = await api<GroupDetail>("GET", `/groups/${seg(id)}`);
    const offsets = [...g.offsets].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
    const total = offsets.reduce((sum, o) => sum + (o.lag ?? 0), 0);
    body.replaceChildren(
      h(
        "p",
        null,
        `state ${g.state} · generation ${g.generation} · ${g.members.length} members · total lag `,
        h("strong", { id: "total-lag" }, fmtNumber(total)),
      ),
      h("h2", null, "Members"),
      table(
        "members",
        ["member", "client", "assignment"],
        g.members.map((m) => [
          m.member_id,
          m.client_id,
          m.assignment.map((a) => `${a.topic}: ${a.partitions.join(", ")}`).join("; "),
        ]),
      ),
      h("h2", null, "Lag per partition"),
      h(
        "figure",
        { class: "narrow" },
        h("figcaption", null, "records behind the high watermark, by topic/partition"),
        barChart(
          "lag-chart",
          offsets.map((o) => ({ label: `${o.topic}/${o.partition}`, value: o.lag ?? 0 })),
          fmtNumber,
        ),
      ),
      table(
        "group-offsets",
        ["topic", "partition", "committed offset", "high watermark", "lag"],
        offsets.map((o) => [
          o.topic,
          String(o.partition),
          o.committed_offset === null ? "—" : fmtNumber(o.committed_offset),
          o.high_watermark === null ? "—" : fmtNumber(o.high_watermark),
          h("span", { class: "lag", "data-lag": o.lag ?? "" }, o.lag === null ? "—" : fmtNumber(o.lag)),
        ]),
      ),
    );
  } catch (e) {
    body.replaceChildren(errorBox(e));
  }
}

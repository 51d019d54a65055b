// Groups: the list (type, state, members, lag); a consumer group's members, their assignments,
// and committed offsets with the lag of each partition, charted, with an offset reset that
// shows its plan and changes nothing until confirmed; a share group's members and, per
// partition, its records by state and those in flight.

const GROUPS_REFRESH_MS = 2000;

function groupsPage(root: HTMLElement): () => void {
  const list = h("section", { id: "group-list" }, h("p", { class: "muted" }, "loading…"));
  root.replaceChildren(h("h1", null, "Groups"), list);
  const refresh = async () => {
    try {
      const { groups, truncated } = await api<{ groups: GroupSummary[]; truncated?: boolean }>("GET", "/groups");
      groups.sort((a, b) => a.group_id.localeCompare(b.group_id));
      list.replaceChildren(
        h("h2", null, plural(groups.length, "group"), truncated ? " (the first ones only)" : ""),
        table(
          "groups",
          ["group", "type", "state", "members", "lag"],
          groups.map((g) => [
            h("a", { href: `#/groups/${seg(g.group_id)}` }, g.group_id),
            h("span", { class: `group-type ${g.type ?? "consumer"}` }, g.type ?? "consumer"),
            g.state,
            String(g.members),
            h(
              "span",
              { class: "lag", "data-lag": g.lag ?? "" },
              g.lag === undefined || g.lag === null ? "—" : fmtNumber(g.lag),
            ),
          ]),
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
  // Built once, outside the part that refreshes: a plan waiting for its confirmation stays.
  const reset = h("section", { id: "offset-reset" });
  root.replaceChildren(
    h("p", null, h("a", { href: "#/groups" }, "← groups")),
    h("h1", null, "Group ", h("code", null, id)),
    body,
    reset,
  );
  const refresh = () => void loadGroup(body, reset, id);
  refresh();
  const timer = setInterval(refresh, GROUPS_REFRESH_MS);
  return () => clearInterval(timer);
}

async function loadGroup(body: HTMLElement, reset: HTMLElement, id: string): Promise<void> {
  try {
    const g = await api<GroupDetail | ShareGroupDetail>("GET", `/groups/${seg(id)}`);
    // A share group says so; one without `type` but with share partitions is taken as one too.
    const share = g.type === "share" || (!("offsets" in g) && "partitions" in g);
    body.setAttribute("data-type", share ? "share" : g.type ?? "consumer");
    if (share) {
      body.replaceChildren(...shareGroupView(g as ShareGroupDetail));
      reset.replaceChildren();
      return;
    }
    const consumer = g as GroupDetail;
    body.replaceChildren(...consumerGroupView(consumer));
    // Rebuilt when the group's topics change, unless a plan waits for its confirmation.
    const topics = [...new Set(consumer.offsets.map((o) => o.topic))].sort().join(",");
    const planOpen = reset.querySelector("#reset-plan > *") !== null;
    if (!reset.hasChildNodes() || (reset.getAttribute("data-topics") !== topics && !planOpen)) {
      reset.setAttribute("data-topics", topics);
      reset.replaceChildren(...resetForm(id, consumer));
    }
  } catch (e) {
    body.replaceChildren(errorBox(e));
  }
}

function consumerGroupView(g: GroupDetail): Node[] {
  const offsets = [...g.offsets].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  const total = offsets.reduce((sum, o) => sum + (o.lag ?? 0), 0);
  const unknown = offsets.some((o) => o.lag === null);
  return [
    h(
      "p",
      null,
      `${g.type ?? "consumer"} group · state ${g.state} · generation ${g.generation} · ${plural(g.members.length, "member")} · total lag `,
      h("strong", { id: "total-lag" }, fmtNumber(total)),
      unknown ? " (some partitions' lag is unknown)" : "",
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
  ];
}

function shareGroupView(g: ShareGroupDetail): Node[] {
  const parts = [...(g.partitions ?? [])].sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  const inFlight = parts.flatMap((p) => (p.in_flight ?? []).map((r) => ({ ...r, topic: p.topic, partition: p.partition })));
  return [
    h("p", null, `share group · state ${g.state} · ${plural((g.members ?? []).length, "member")}`),
    h("h2", null, "Members"),
    table(
      "share-members",
      ["member"],
      (g.members ?? []).map((m) => [m]),
    ),
    h("h2", null, "Partitions"),
    table(
      "share-partitions",
      ["topic", "partition", "start", "end", "high watermark", "not yet delivered", "available", "acquired", "accepted", "dead-lettered"],
      parts.map((p) => [
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
      ]),
    ),
    h("h2", null, `In flight: ${plural(inFlight.length, "record")}`),
    table(
      "share-in-flight",
      ["topic", "partition", "offset", "state", "deliveries", "member", "lock ends"],
      inFlight.map((r) => [
        r.topic,
        String(r.partition),
        fmtNumber(r.offset),
        r.state,
        String(r.delivery_count),
        r.member_id || "—",
        r.lock_deadline_ms > 0 ? fmtTime(r.lock_deadline_ms) : "—",
      ]),
    ),
  ];
}

/** The reset request's `to`: earliest, latest, an offset or a time. */
function resetTarget(kind: string, value: string): unknown {
  if (kind === "earliest" || kind === "latest") return kind;
  if (kind === "offset") return { offset: Number(value) };
  return { timestamp_ms: Date.parse(`${value}Z`) };
}

/** Where each partition would go, as the server moves it: an offset outside the log goes to its
 * nearest end; a time is found by the server, so the plan says which time. */
function plannedOffset(kind: string, value: string, p: PartitionInfo): string {
  const start = p.log_start_offset ?? 0;
  const end = p.high_watermark ?? 0;
  if (kind === "earliest") return fmtNumber(start);
  if (kind === "latest") return fmtNumber(end);
  if (kind === "offset") return fmtNumber(Math.min(end, Math.max(start, Number(value))));
  return `first at or after ${value} UTC`;
}

function resetForm(id: string, g: GroupDetail): Node[] {
  const topics = [...new Set(g.offsets.map((o) => o.topic))].sort();
  const topic = h("select", { name: "topic" }, topics.map((t) => h("option", { value: t }, t)));
  const kind = h(
    "select",
    { name: "to" },
    ["earliest", "latest", "offset", "time"].map((k) => h("option", { value: k }, k)),
  );
  const value = h("input", { name: "value", placeholder: "offset, or time (UTC)" });
  const plan = h("div", { id: "reset-plan" });
  const form = h(
    "form",
    { id: "reset-form", class: "inline" },
    h("label", null, "topic ", topic),
    h("label", null, "to ", kind),
    h("label", null, "offset / time ", value),
    h("button", { type: "submit" }, "Show the plan"),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    plan.replaceChildren(h("p", { class: "muted" }, "planning…"));
    try {
      if ((kind.value === "offset" && !/^\d+$/.test(value.value.trim())) || (kind.value === "time" && Number.isNaN(Date.parse(`${value.value}Z`)))) {
        throw new Error(kind.value === "offset" ? "an offset is a whole number, 0 or more" : "a time is YYYY-MM-DDTHH:MM:SS (UTC)");
      }
      const t = await api<TopicDetail>("GET", `/topics/${seg(topic.value)}`);
      const committed = new Map(g.offsets.filter((o) => o.topic === topic.value).map((o) => [o.partition, o.committed_offset]));
      const confirm = h("button", { type: "button", class: "danger", id: "reset-confirm" }, "Confirm reset");
      const cancel = h("button", { type: "button", class: "secondary", id: "reset-cancel" }, "Cancel");
      const status = h("p", { class: "status", role: "status", id: "reset-status" });
      cancel.addEventListener("click", () => plan.replaceChildren());
      confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        status.replaceChildren("resetting…");
        try {
          const done = await api<ResetResult>("POST", `/groups/${seg(id)}/offsets`, {
            topic: topic.value,
            to: resetTarget(kind.value, value.value.trim()),
          });
          status.setAttribute("data-done", "true");
          status.replaceChildren(
            `moved ${plural(done.offsets.length, "partition")}: `,
            done.offsets.map((o) => `${o.partition} → ${o.offset}`).join(", "),
          );
          confirm.remove();
          cancel.textContent = "Close";
        } catch (e) {
          confirm.disabled = false;
          status.replaceChildren(errorBox(e));
        }
      });
      plan.replaceChildren(
        h("p", null, `Reset group ${id} on ${topic.value}; nothing changes until you confirm. The group must have no members.`),
        table(
          "reset-plan-table",
          ["partition", "committed now", "after the reset"],
          t.partitions.map((p) => {
            const now = committed.get(p.partition);
            return [String(p.partition), now === undefined || now === null ? "—" : fmtNumber(now), plannedOffset(kind.value, value.value.trim(), p)];
          }),
        ),
        h("p", null, confirm, " ", cancel),
        status,
      );
    } catch (e) {
      plan.replaceChildren(errorBox(e));
    }
  });
  return [h("h2", null, "Reset offsets"), form, plan];
}

// Two small SVG charts of our own: a line chart of values over time and a bar chart of values
// by label. Each writes what it drew into data-* attributes so tests can read the numbers.

interface Series {
  name: string;
  cls: string;
  points: [number, number][]; // [time ms, value]
}

const CHART_W = 640;
const CHART_H = 180;
const PAD_L = 72;
const PAD_R = 12;
const PAD_T = 10;
const PAD_B = 24;

/** A y-axis top that is a round number at or above `max`; at least 4, so that the four grid
 * steps of a chart of small counts are whole numbers. */
function niceMax(max: number): number {
  if (!(max > 4)) return 4;
  const step = Math.pow(10, Math.floor(Math.log10(max)));
  for (const m of [1, 2, 2.5, 5, 10]) {
    if (m * step >= max) return m * step;
  }
  return 10 * step;
}

function gridLines(top: number, fmt: (v: number) => string): SVGElement[] {
  const out: SVGElement[] = [];
  const plotH = CHART_H - PAD_T - PAD_B;
  for (let i = 0; i <= 4; i++) {
    const v = (top * i) / 4;
    const y = PAD_T + plotH - (plotH * i) / 4;
    out.push(svg("line", { class: "grid", x1: PAD_L, x2: CHART_W - PAD_R, y1: y, y2: y }));
    out.push(svg("text", { class: "axis", x: PAD_L - 6, y: y + 4, "text-anchor": "end" }, fmt(v)));
  }
  return out;
}

/** Values over the last `windowMs` up to `now`; one polyline per series, in order (the style
 * sheet draws the first wide and pale, the later ones dashed over it). */
function lineChart(
  id: string,
  series: Series[],
  now: number,
  windowMs: number,
  fmt: (v: number) => string,
): SVGElement {
  const values = series.flatMap((s) => s.points.map((p) => p[1]));
  const top = niceMax(Math.max(0, ...values));
  const plotW = CHART_W - PAD_L - PAD_R;
  const plotH = CHART_H - PAD_T - PAD_B;
  const x = (t: number) => PAD_L + plotW * (1 - Math.min(1, Math.max(0, (now - t) / windowMs)));
  const y = (v: number) => PAD_T + plotH - (plotH * Math.max(0, v)) / top;
  const lines = series.map((s) =>
    svg("polyline", {
      class: `line ${s.cls}`,
      "data-series": s.name,
      "data-last": s.points.length ? s.points[s.points.length - 1][1] : "",
      points: s.points.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "),
    }),
  );
  const legend = series.map((s, i) =>
    // The legend draws each line as the style sheet does: a series after the first is dashed
    // (so that equal series both show), the first wide underneath.
    svg("text", { class: `legend ${s.cls}`, x: PAD_L + 8 + i * 110, y: PAD_T + 14 }, `${i === 0 ? "━━" : "╍╍"} ${s.name}`),
  );
  return svg(
    "svg",
    {
      id,
      class: "chart",
      viewBox: `0 0 ${CHART_W} ${CHART_H}`,
      role: "img",
      "data-max": Math.max(0, ...values),
      "data-points": values.length,
    },
    gridLines(top, fmt),
    svg("text", { class: "axis", x: PAD_L, y: CHART_H - 6 }, `−${Math.round(windowMs / 1000)} s`),
    svg("text", { class: "axis", x: CHART_W - PAD_R, y: CHART_H - 6, "text-anchor": "end" }, "now"),
    lines,
    legend,
  );
}

/** One bar per label. */
function barChart(id: string, bars: { label: string; value: number }[], fmt: (v: number) => string): SVGElement {
  const top = niceMax(Math.max(0, ...bars.map((b) => b.value)));
  const plotW = CHART_W - PAD_L - PAD_R;
  const plotH = CHART_H - PAD_T - PAD_B;
  const slot = plotW / Math.max(1, bars.length);
  const width = Math.max(2, Math.min(48, slot * 0.7));
  const drawn = bars.map((b, i) => {
    const hgt = (plotH * Math.max(0, b.value)) / top;
    const cx = PAD_L + slot * i + slot / 2;
    return svg(
      "g",
      { "data-label": b.label, "data-value": b.value },
      svg("rect", { class: "bar", x: cx - width / 2, y: PAD_T + plotH - hgt, width, height: hgt }),
      svg("text", { class: "axis", x: cx, y: CHART_H - 6, "text-anchor": "middle" }, b.label),
      svg("title", null, `${b.label}: ${fmt(b.value)}`),
    );
  });
  return svg(
    "svg",
    { id, class: "chart", viewBox: `0 0 ${CHART_W} ${CHART_H}`, role: "img" },
    gridLines(top, fmt),
    drawn,
  );
}

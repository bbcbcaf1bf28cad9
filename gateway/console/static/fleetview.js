// fleetview.js: draws the fleet model (fleet.js): the summary line, the
// agents table, the rate charts (hand-written inline SVG) and the timeline
// of the selected session. Text from events is only ever put into the page
// with textContent; SVG geometry is set as attributes.

// the same query as this module (the access_token, when there is one)
const { ACTIVE_MS, LIMITS, summary } = await import("./fleet.js" + new URL(import.meta.url).search);

const SVG = "http://www.w3.org/2000/svg";
const CHARTS = 6;          // type charts shown beside the tenant's total
const REDRAW_MS = 1000;    // waiting times and chart windows move with the clock
const W = 180, H = 36, BAR_W = 120, BAR_H = 10;

const clock = (t) => (Number.isFinite(t) ? new Date(t).toISOString().slice(11, 23) : "-");

export function duration(ms) {
  if (!Number.isFinite(ms)) return "-";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  return `${Math.round(ms / 60000)} min`;
}

function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

function td(text, cls) {
  const el = document.createElement("td");
  el.textContent = text;
  if (cls) el.className = cls;
  return el;
}

export class FleetView {
  constructor({ summaryEl, agents, rates, title, timeline }) {
    Object.assign(this, { summaryEl, agents, rates, title, timeline });
    this.drawn = -1;
    this.selected = "";
    this.at = 0;
  }

  // tick redraws when the fleet changed, the selection changed or a
  // second went by.
  tick(fleet, selected) {
    const now = fleet.now();
    if (fleet.version === this.drawn && selected === this.selected && now - this.at < REDRAW_MS) return;
    this.drawn = fleet.version;
    this.selected = selected;
    this.at = now;
    this.drawSummary(fleet, now);
    this.drawAgents(fleet, now);
    this.drawRates(fleet);
    this.drawTimeline(fleet, now);
  }

  drawSummary(fleet, now) {
    let active = 0, waiting = 0, errors = 0, tasks = 0;
    for (const s of fleet.byKey.values()) {
      if (now - s.seen < ACTIVE_MS) active++;
      const n = summary(fleet.timeline(s));
      waiting += n.waiting;
      errors += n.errors;
      tasks += n.tasks;
    }
    const agents = fleet.agents().length;
    this.summaryEl.textContent = `${agents} agents, ${fleet.byKey.size} sessions (${active} active in the last minute); ` +
      `${waiting} attention requests waiting, ${errors} errors, ${tasks} tasks`;
  }

  drawAgents(fleet, now) {
    const rows = fleet.agents().map((a) => {
      const tr = document.createElement("tr");
      tr.append(td(a.who), td(a.dialect.toUpperCase()), td(String(a.sessions), "num"), td(String(a.active), "num"),
        td(String(a.events), "num"), td(clock(a.last)));
      if (now - a.last < ACTIVE_MS) tr.className = "active";
      return tr;
    });
    this.agents.tBodies[0].replaceChildren(...rows);
  }

  drawRates(fleet) {
    const max = (pts) => Math.max(1, ...pts);
    const figs = fleet.rates.series(CHARTS).map((s) => {
      const fig = document.createElement("figure");
      fig.className = "chart";
      fig.dataset.type = s.name;
      fig.dataset.sum = String(s.sum);
      const chart = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img" });
      const title = svg("title", {});
      title.textContent = `${s.name}: events per ${LIMITS.bucketMs / 1000} s over the last ${LIMITS.buckets * LIMITS.bucketMs / 60000} minutes`;
      const m = max(s.points);
      const step = W / (s.points.length - 1);
      const pts = s.points.map((v, i) => `${(i * step).toFixed(1)},${(H - 2 - (v / m) * (H - 4)).toFixed(1)}`).join(" ");
      chart.append(title, svg("polyline", { points: pts, fill: "none", class: "line" }));
      const cap = document.createElement("figcaption");
      cap.textContent = `${s.name}: ${s.sum} in ${LIMITS.buckets * LIMITS.bucketMs / 60000} min, peak ${m}/${LIMITS.bucketMs / 1000} s`;
      fig.append(chart, cap);
      return fig;
    });
    this.rates.replaceChildren(...figs);
  }

  drawTimeline(fleet, now) {
    const s = fleet.get(this.selected);
    const body = this.timeline.tBodies[0];
    if (!s) {
      this.title.textContent = "Click a session to see its timeline.";
      body.replaceChildren();
      return;
    }
    const items = fleet.timeline(s);
    const n = summary(items);
    this.title.textContent = `${s.session} (${s.dialect.toUpperCase()}, ${s.who}): ${n.runs} runs, ${n.tools} tool calls ` +
      `(${n.toolsFailed} failed), ${n.waiting} attention waiting, ${n.errors} errors, ${n.tasks} tasks; ` +
      `from its latest ${s.events.length} events (at most ${LIMITS.eventsPerSession})`;
    const t0 = Math.min(...items.map((it) => it.start).filter(Number.isFinite), now);
    const span = Math.max(1, now - t0);
    body.replaceChildren(...items.map((it) => this.timelineRow(it, now, t0, span)));
  }

  timelineRow(it, now, t0, span) {
    const tr = document.createElement("tr");
    tr.className = `kind-${it.kind} status-${it.status.replace(/[^a-z]/g, "-")}`;
    tr.dataset.kind = it.kind;
    tr.dataset.status = it.status;
    const waiting = it.status === "waiting" || it.status === "running";
    const dur = waiting ? `${it.status} ${duration(now - it.start)}` : duration(it.duration);
    const detail = it.kind === "task" ? it.states.join(" → ") + (it.detail ? ` (${it.detail})` : "") : it.detail;
    const bar = document.createElement("td");
    const chart = svg("svg", { width: BAR_W, height: BAR_H, class: "bar" });
    const end = waiting ? now : (it.end ?? it.start);
    const x = ((it.start - t0) / span) * BAR_W;
    chart.append(svg("rect", { x: x.toFixed(1), y: 1, height: BAR_H - 2, width: Math.max(2, ((end - it.start) / span) * BAR_W).toFixed(1) }));
    bar.append(chart);
    tr.append(td(clock(it.start)), td(it.kind), td(it.name), td(it.status, "status"), td(dur, "num duration"), bar, td(detail || "", "payload"));
    return tr;
  }
}

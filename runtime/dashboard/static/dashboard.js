// danlu dashboard: renders the JSON of runtime/dashboard/app.py. Every piece of text a run or
// a job supplies goes in through textContent or an attribute, never as HTML, and the charts
// are SVG drawn here: the page loads nothing but this server's own files.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const PURCHASE_COLOURS = { spot: "#4c9be8", on_demand: "#f28e2b", reserved_1y: "#59a14f", reserved_3y: "#2f7d32" };

// -- building elements -----------------------------------------------------------------------
function el(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  for (const kid of kids) append(node, kid);
  return node;
}
function sv(tag, attrs, ...kids) {
  const node = document.createElementNS(SVG, tag);
  setAttrs(node, attrs);
  for (const kid of kids) append(node, kid);
  return node;
}
function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") node.textContent = String(v);
    else if (k === "cls") node.setAttribute("class", v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, String(v));
  }
}
function append(node, kid) {
  if (kid === null || kid === undefined || kid === false) return;
  node.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
}
function title(text) { return sv("title", { text }); }
function $(id) { return document.getElementById(id); }
function fill(tbody, rows) { tbody.replaceChildren(...rows); }

// -- numbers, as runtime/reports/run_report.py writes them -------------------------------------
function usd(v) {
  if (v === null || v === undefined) return "?";
  const sign = v < 0 ? "-" : "";
  const a = Math.abs(v);
  const digits = a >= 1 ? 2 : 4;
  return sign + "$" + a.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}
function usd2(v) {  // a quote's figures: planner quote --json rounds them to cents
  return v === null || v === undefined ? "?" : "$" + v.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
}
function num(v, digits) {
  return v === null || v === undefined ? "?" : v.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}
function pct(v) { return v === null || v === undefined ? "?" : (100 * v).toFixed(v < 0.1 ? 1 : 0) + "%"; }
function utc(t) { return t === null || t === undefined ? "-" : new Date(t * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC"; }
function hoursIn(t0, t) { return (t - t0) / 3600; }

// -- live updates (server-sent events; the browser reconnects by itself) -------------------------
function live(url, event, render) {
  const badge = $("live");
  const source = new EventSource(url);
  source.addEventListener(event, (e) => {
    badge.textContent = "live";
    badge.className = "live on";
    render(JSON.parse(e.data));
  });
  source.onerror = () => { badge.textContent = "reconnecting…"; badge.className = "live off"; };
  return source;
}

function progressBar(fraction, text) {
  const bar = el("div", { cls: "bar" });
  bar.style.width = fraction === null || fraction === undefined ? "0" : (100 * Math.min(fraction, 1)).toFixed(1) + "%";
  return el("div", { cls: "progress" }, bar, el("span", { cls: "label", text }));
}

// -- the runs list ---------------------------------------------------------------------------------
function renderRuns(data) {
  $("root").textContent = "Runs directory " + data.root + (data.error ? " — " + data.error : "");
  $("empty").hidden = data.runs.length > 0 || data.broken.length > 0;
  fill($("runs").tBodies[0], data.runs.map((r) => {
    const done = r.progress === null ? "?" : pct(r.progress) + " · " + num(r.work_done, 0) + "/" + num(r.work_total, 0) + " " + r.unit;
    const spent = usd(r.spent_usd) + (r.budget_usd ? " of " + usd(r.budget_usd) : "");
    const forecast = r.forecast_usd === null ? "?" : usd(r.forecast_usd) + (r.forecast_budget_fraction !== null ? " (" + pct(r.forecast_budget_fraction) + ")" : "");
    let eta = r.status === "running" ? (r.eta_t ? "in " + num((r.eta_t - r.as_of_t) / 3600, 2) + " h" : "?") : "ended " + utc(r.as_of_t);
    const slack = r.slack_hours === null ? null : el("span", { cls: r.slack_hours < 0 ? "late" : "", text: (r.slack_hours >= 0 ? "+" : "") + num(r.slack_hours, 2) + " h to the deadline" });
    return el("tr", { "data-run": r.name, cls: r.status },
      el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(r.name), text: r.name })),
      el("td", {}, el("span", { cls: "badge " + r.status, text: r.status + (r.cause ? ": " + r.cause : "") })),
      el("td", { cls: "done" }, progressBar(r.progress, done)),
      el("td", { cls: "num spent" }, spent),
      el("td", { cls: "num forecast" }, forecast),
      el("td", { cls: "eta" }, eta, slack ? el("br") : null, slack),
      el("td", { cls: "pool" }, r.pool || "-"),
      el("td", { cls: "num" }, r.preemptions),
      el("td", { cls: "num" }, r.replans));
  }));
  fill($("broken"), data.broken.map((b) => el("p", { cls: "error", text: "unreadable " + b.name + ": " + b.error })));
}

// -- a run's page ------------------------------------------------------------------------------------
function renderRun(d) {
  const err = $("error");
  if (d.error) { err.hidden = false; err.textContent = d.error; return; }
  err.hidden = true;
  document.title = "danlu: " + d.name;
  $("run-name").textContent = d.name;
  const badge = $("run-status");
  badge.textContent = d.status;
  badge.className = "badge " + d.status;
  $("progress").replaceWith(Object.assign(progressBar(d.progress, d.progress === null ? "progress unknown" : pct(d.progress) + " of " + num(d.work_total, 0) + " " + d.unit), { id: "progress" }));
  fill($("figures"), d.figures.map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { text: v }))));
  spendChart($("spend-chart"), d);
  poolChart($("pool-chart"), d);
  const poolRows = d.pools.map((p) => el("tr", {}, el("td", { text: p.pool }), el("td", { text: p.purchase }),
    el("td", { cls: "num", text: num(p.node_hours, 3) }), el("td", { cls: "num", text: usd(p.cost_usd) })));
  poolRows.push(el("tr", {}, el("th", { text: "total" }), el("th"), el("th", { cls: "num", text: num(d.pools.reduce((a, p) => a + p.node_hours, 0), 3) }), el("th", { cls: "num", text: usd(d.spent_usd) })));
  fill($("pools").tBodies[0], poolRows);
  fill($("timeline").tBodies[0], d.timeline.map((e) => el("tr", { cls: e.kind, "data-kind": e.kind },
    el("td", { cls: "num", text: utc(e.t) }), el("td", { cls: "num", text: num(hoursIn(d.started_t, e.t), 3) }),
    el("td", { text: e.text }), el("td", { cls: "num", text: e.cost_usd === null ? "" : usd(e.cost_usd) }),
    el("td", { cls: "num", text: usd(e.spent_usd) }))));
  const summary = d.summary;
  $("summary-none").hidden = !!summary;
  fill($("summary"), summary ? Object.entries(summary).filter(([, v]) => typeof v !== "object" || v === null).map(([k, v]) =>
    el("tr", {}, el("th", { text: k }), el("td", { text: v === null ? "-" : typeof v === "number" && k.endsWith("usd") ? usd(v) : String(v) }))) : []);
  $("event-count").textContent = d.events.length;
  fill($("events").tBodies[0], d.events.slice().reverse().map((e) => {
    const rest = Object.fromEntries(Object.entries(e).filter(([k]) => !["seq", "event", "t", "wall"].includes(k)));
    return el("tr", { cls: e.event }, el("td", { cls: "num", text: e.seq }), el("td", { cls: "num", text: utc(e.t) }),
      el("td", { text: e.event }), el("td", { text: JSON.stringify(rest) }));
  }));
}

// -- charts ---------------------------------------------------------------------------------------------
function niceTicks(lo, hi, count) {
  if (!(hi > lo)) hi = lo + 1;
  const step0 = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(step0)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= step0) || 10 * mag;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  out.digits = Math.max(0, -Math.floor(Math.log10(step) + 1e-9)) + (String(step / mag).includes(".") ? 1 : 0);
  return out;
}

function frame(width, height, m, xr, yr, xlabel, ylabel, yfmt) {
  const svg = sv("svg", { viewBox: `0 0 ${width} ${height}`, role: "img" });
  const x = (v) => m.l + (v - xr[0]) / (xr[1] - xr[0]) * (width - m.l - m.r);
  const y = (v) => height - m.b - (v - yr[0]) / (yr[1] - yr[0]) * (height - m.t - m.b);
  const axis = sv("g", { cls: "axis" });
  const xt = niceTicks(xr[0], xr[1], 8);
  for (const t of xt) {
    axis.append(sv("line", { cls: "gridline", x1: x(t), x2: x(t), y1: m.t, y2: height - m.b }));
    axis.append(sv("text", { x: x(t), y: height - m.b + 14, "text-anchor": "middle", text: num(t, xt.digits) }));
  }
  if (yr) {
    for (const t of niceTicks(yr[0], yr[1], 5)) {
      axis.append(sv("line", { cls: "gridline", x1: m.l, x2: width - m.r, y1: y(t), y2: y(t) }));
      axis.append(sv("text", { x: m.l - 6, y: y(t) + 4, "text-anchor": "end", text: yfmt(t) }));
    }
  }
  axis.append(sv("line", { x1: m.l, x2: width - m.r, y1: height - m.b, y2: height - m.b }));
  axis.append(sv("line", { x1: m.l, x2: m.l, y1: m.t, y2: height - m.b }));
  axis.append(sv("text", { x: (m.l + width - m.r) / 2, y: height - 6, "text-anchor": "middle", text: xlabel }));
  if (ylabel) axis.append(sv("text", { x: 12, y: m.t + (height - m.t - m.b) / 2, "text-anchor": "middle", transform: `rotate(-90 12 ${m.t + (height - m.t - m.b) / 2})`, text: ylabel }));
  svg.append(axis);
  return { svg, x, y };
}

function timeRange(d) {
  const t0 = d.started_t;
  let end = d.as_of_t;
  if (d.status === "running" && d.eta_t) end = Math.max(end, d.eta_t);
  const span = Math.max(end - t0, 1);
  const showDeadline = d.deadline_t !== null && d.deadline_t - t0 <= 3 * span;
  if (showDeadline) end = Math.max(end, d.deadline_t);
  return { t0, hi: Math.max((end - t0) / 3600 * 1.05, 1e-3), showDeadline };
}

function spendChart(box, d) {
  const { t0, hi, showDeadline } = timeRange(d);
  const forecast = d.status === "running" && d.forecast_usd !== null && d.eta_t ? d.forecast_usd : null;
  let top = Math.max(d.spent_usd, forecast || 0, 1e-6);
  const budgetShown = d.budget_usd && top >= 0.2 * d.budget_usd;
  const lines = budgetShown ? d.thresholds.map((f) => ({ f, usd: f * d.budget_usd })) : [];
  if (budgetShown) top = Math.max(top, ...lines.map((l) => l.usd), d.budget_usd);
  const { svg, x, y } = frame(960, 280, { l: 70, r: 20, t: 16, b: 36 }, [0, hi], [0, top * 1.08],
    "hours since the start (the run's clock)", "spent (USD)", usd);
  for (const l of lines) {
    svg.append(sv("line", { x1: x(0), x2: x(hi), y1: y(l.usd), y2: y(l.usd), stroke: l.f >= 1 ? "#b00020" : "#d08a00", "stroke-dasharray": "4 3", "data-threshold": l.f }, title(`alert threshold ${pct(l.f)} of the budget: ${usd(l.usd)}`)));
    svg.append(sv("text", { x: x(hi) - 4, y: y(l.usd) - 4, "text-anchor": "end", text: (l.f === 1 ? "budget " : pct(l.f) + " ") + usd(l.usd) }));
  }
  if (d.budget_usd && !budgetShown) svg.append(sv("text", { x: x(hi) - 4, y: 28, "text-anchor": "end", text: `budget ${usd(d.budget_usd)} (far above the spend: off the chart)` }));
  if (showDeadline) svg.append(sv("line", { x1: x(hoursIn(t0, d.deadline_t)), x2: x(hoursIn(t0, d.deadline_t)), y1: y(0), y2: y(top * 1.08), stroke: "#555", "stroke-dasharray": "6 3 1 3" }, title("deadline " + utc(d.deadline_t))));
  const pts = d.curve.map(([t, v]) => `${x(hoursIn(t0, t))},${y(v)}`);
  if (pts.length) svg.append(sv("polyline", { points: pts.join(" "), fill: "none", stroke: "#1f5fa8", "stroke-width": 2, cls: "spend-line" }, title("spent " + usd(d.spent_usd))));
  if (forecast !== null) {
    svg.append(sv("line", { x1: x(hoursIn(t0, d.as_of_t)), y1: y(d.spent_usd), x2: x(hoursIn(t0, d.eta_t)), y2: y(forecast), stroke: "#1f5fa8", "stroke-dasharray": "5 4", cls: "forecast-line" }, title(`forecast ${usd(forecast)} at the ETA ${utc(d.eta_t)}`)));
  }
  for (const e of d.timeline.filter((e) => e.kind === "replan" || e.kind === "preemption")) {
    svg.append(sv("circle", { cx: x(hoursIn(t0, e.t)), cy: y(e.spent_usd), r: 3.5, fill: e.kind === "replan" ? "#8a6d00" : "#b00020" }, title(e.text)));
  }
  box.replaceChildren(svg);
}

function poolChart(box, d) {
  const { t0, hi, showDeadline } = timeRange(d);
  const lanes = [];
  for (const s of d.segments) if (!lanes.some((l) => l.pool === s.pool_id && l.purchase === s.purchase)) lanes.push({ pool: s.pool_id, purchase: s.purchase });
  const laneH = 40, height = 60 + laneH * Math.max(lanes.length, 1);
  const { svg, x } = frame(960, height, { l: 70, r: 20, t: 10, b: 36 }, [0, hi], null, "hours since the start (the run's clock)", null);
  const laneY = (i) => 14 + i * laneH;
  const laneOf = (t) => {
    const seg = d.segments.find((s) => s.start <= t && (s.end === null || t <= s.end + 1e-6));
    return seg ? lanes.findIndex((l) => l.pool === seg.pool_id && l.purchase === seg.purchase) : 0;
  };
  lanes.forEach((l, i) => svg.append(sv("text", { x: 74, y: laneY(i) + 8, text: `${l.pool} ${l.purchase}` })));
  for (const s of d.segments) {
    const i = lanes.findIndex((l) => l.pool === s.pool_id && l.purchase === s.purchase);
    const a = x(hoursIn(t0, s.start)), b = x(hoursIn(t0, s.end === null ? d.as_of_t : s.end));
    const tip = `${s.launch_id}: ${s.label}, steps ${s.start_step}-${s.end_step === null ? "…" : s.end_step}, ${s.outcome || "running"}, ${usd(s.cost_usd)}`;
    svg.append(sv("rect", { x: a, y: laneY(i) + 12, width: Math.max(b - a, 2), height: 16, fill: PURCHASE_COLOURS[s.purchase] || "#888", cls: "segment", "data-launch": s.launch_id, "data-outcome": s.outcome || "running" }, title(tip)));
    svg.append(sv("text", { x: Math.min(b + 5, 900), y: laneY(i) + 24, text: `${s.launch_id} ${usd(s.cost_usd)}` }));
  }
  for (const e of d.timeline) {
    const t = x(hoursIn(t0, e.t));
    if (e.kind === "preemption" || e.kind === "failure") {
      const yy = laneY(laneOf(e.t - 1e-3)) + 20;
      svg.append(sv("text", { x: t, y: yy + 5, "text-anchor": "middle", fill: e.kind === "preemption" ? "#b00020" : "#000", "font-size": "15", "font-weight": "bold", cls: "marker-" + e.kind, text: "✕" }, title(e.text)));
    } else if (e.kind === "notice") {
      const yy = laneY(laneOf(e.t)) + 8;
      svg.append(sv("path", { d: `M${t - 5},${yy} L${t + 5},${yy} L${t},${yy - 8} Z`, fill: "#e67e22", cls: "marker-notice" }, title(e.text)));
    } else if (e.kind === "replan") {
      svg.append(sv("line", { x1: t, x2: t, y1: 8, y2: height - 36, stroke: "#777", "stroke-dasharray": "2 3", cls: "marker-replan" }, title(e.text)));
      svg.append(sv("text", { x: t + 3, y: height - 40, fill: "#8a6d00", text: "re-plan" }));
    }
  }
  if (showDeadline) svg.append(sv("line", { x1: x(hoursIn(t0, d.deadline_t)), x2: x(hoursIn(t0, d.deadline_t)), y1: 8, y2: height - 36, stroke: "#555", "stroke-dasharray": "6 3 1 3" }, title("deadline " + utc(d.deadline_t))));
  if (!d.segments.length) svg.append(sv("text", { x: 480, y: 40, "text-anchor": "middle", text: "no launch yet" }));
  box.replaceChildren(svg);
}

// -- the quote page ---------------------------------------------------------------------------------------
function phaseLabel(p) { return `${p.nodes}x ${p.instance_type} ${p.purchase} ${p.cloud}:${p.region}${p.zone ? "/" + p.zone : ""}`; }

function renderQuote(q) {
  $("result").hidden = false;
  $("q-job").textContent = q.job;
  $("q-status").textContent = q.status;
  $("q-status").className = "badge " + q.status;
  $("infeasible").hidden = q.status !== "infeasible";
  if (q.status === "infeasible" && q.infeasible) {
    fill($("relaxations"), [...q.infeasible.reasons.map((r) => el("li", { text: r })), ...q.infeasible.relaxations.map((r) => el("li", { text: r.message }))]);
  }
  const plan = q.plan;
  fill($("plan-figures"), plan ? [
    ["Expected cost", usd2(plan.expected_cost_usd), "expected_cost_usd"], ["Expected hours", num(plan.expected_hours, 2) + " h", "expected_hours"],
    ["P90 cost", usd2(plan.p90_cost_usd), "p90_cost_usd"], ["P90 hours", num(plan.p90_hours, 2) + " h", "p90_hours"],
    ["Carbon", num(plan.kg_co2e, 2) + " kg CO2e", "kg_co2e"], ["Objective", q.objective, "objective"],
  ].map(([k, v, key]) => el("tr", { "data-key": key }, el("th", { text: k }), el("td", { text: v }))) : []);
  fill($("phases").tBodies[0], plan ? plan.phases.map((p) => el("tr", {},
    el("td", { text: p.cloud }), el("td", { text: p.region + (p.zone ? "/" + p.zone : "") }), el("td", { text: p.instance_type }),
    el("td", { text: `${p.gpus_per_node}x ${p.gpu}` }), el("td", { cls: "num", text: p.nodes }), el("td", { text: p.purchase }),
    el("td", { cls: "num", text: usd2(p.hourly_usd) }), el("td", { cls: "num", text: num(p.hours, 2) }), el("td", { cls: "num", text: usd2(p.cost_usd) }))) : []);
  fill($("cost-lines").tBodies[0], plan ? plan.cost_lines.map((c) => el("tr", {}, el("td", { text: c.label }), el("td", { cls: "num", text: usd2(c.usd) }))) : []);
  fill($("alternatives").tBodies[0], q.alternatives.map((a, i) => el("tr", {},
    el("td", { text: i + 1 }), el("td", { text: a.phases.map(phaseLabel).join(" → ") }), el("td", { cls: "num", text: usd2(a.expected_cost_usd) }),
    el("td", { cls: "num", text: num(a.expected_hours, 2) }), el("td", { cls: "num", text: usd2(a.p90_cost_usd) }), el("td", { cls: "num", text: num(a.p90_hours, 2) }))));
  fill($("frontier").tBodies[0], q.frontier.map((f) => el("tr", {}, el("td", { cls: "num", text: num(f.p90_hours, 2) }), el("td", { cls: "num", text: usd2(f.expected_cost_usd) }))));
  frontierChart($("frontier-chart"), q);
  fill($("warnings"), q.warnings.map((w) => el("li", { text: w })));
  $("q-meta").textContent = `${q.candidates.in_model} configurations in the model (${q.candidates.considered} considered, ${q.candidates.pruned} pruned); prices from ${q.prices.origin}` + (q.prices.as_of ? ` as of ${q.prices.as_of}` : "") + `; solved in ${num(q.solve_seconds, 2)} s.`;
}

function frontierChart(box, q) {
  const points = q.frontier.map((f) => ({ h: f.p90_hours, c: f.expected_cost_usd, kind: "frontier", text: `frontier: ${usd2(f.expected_cost_usd)} expected within ${num(f.p90_hours, 2)} h (P90)` }));
  const plans = [...(q.plan ? [{ p: q.plan, kind: "plan", name: "the plan" }] : []), ...q.alternatives.map((a, i) => ({ p: a, kind: "alternative", name: `alternative ${i + 1}` }))]
    .map((o) => ({ h: o.p.p90_hours, c: o.p.expected_cost_usd, kind: o.kind, text: `${o.name}: ${o.p.phases.map(phaseLabel).join(" → ")}; ${usd2(o.p.expected_cost_usd)} expected, ${num(o.p.p90_hours, 2)} h P90` }));
  const all = [...points, ...plans];
  if (!all.length) { box.replaceChildren(el("p", { cls: "meta", text: "no frontier: nothing fits" })); return; }
  const hs = all.map((p) => p.h), cs = all.map((p) => p.c);
  const hlo = Math.min(...hs), hhi = Math.max(...hs), clo = Math.min(...cs), chi = Math.max(...cs);
  const padH = (hhi - hlo) * 0.08 || hhi * 0.1 || 1, padC = (chi - clo) * 0.12 || chi * 0.1 || 1;
  const { svg, x, y } = frame(960, 320, { l: 80, r: 20, t: 16, b: 36 }, [Math.max(0, hlo - padH), hhi + padH], [Math.max(0, clo - padC), chi + padC],
    "P90 hours", "expected cost (USD)", usd2);
  svg.append(sv("polyline", { points: points.map((p) => `${x(p.h)},${y(p.c)}`).join(" "), fill: "none", stroke: "#888", "stroke-width": 1.5 }));
  const detail = $("frontier-detail");
  const select = (node, p) => {
    svg.querySelectorAll(".pt.selected").forEach((n) => n.classList.remove("selected"));
    node.classList.add("selected");
    detail.textContent = p.text;
  };
  for (const p of all) {
    const style = p.kind === "plan" ? { r: 8, fill: "#c0392b" } : p.kind === "alternative" ? { r: 6, fill: "#f28e2b" } : { r: 5, fill: "#4c9be8" };
    const node = sv("circle", { cx: x(p.h), cy: y(p.c), ...style, cls: "pt " + p.kind, tabindex: 0, "data-kind": p.kind }, title(p.text));
    node.addEventListener("mouseenter", () => select(node, p));
    node.addEventListener("click", () => select(node, p));
    node.addEventListener("focus", () => select(node, p));
    svg.append(node);
  }
  box.replaceChildren(svg);
}

async function initQuote() {
  const jobs = await (await fetch("/api/jobs")).json();
  const select = $("job");
  for (const j of jobs.jobs) select.append(el("option", { value: j.id, text: j.label }));
  const wanted = new URLSearchParams(location.search).get("job");
  if (wanted && jobs.jobs.some((j) => j.id === wanted)) select.value = wanted;
  $("quote-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    const toml = $("toml").value.trim();
    const body = toml ? { toml } : { job: select.value };
    if (!toml && !select.value) { showError("Pick a job or paste a job.toml."); return; }
    if ($("objective").value) body.objective = $("objective").value;
    $("quote-busy").hidden = false;
    $("quote-button").disabled = true;
    try {
      const answer = await fetch("/api/quote", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      const data = await answer.json();
      if (!answer.ok) { showError(data.error || answer.statusText); $("result").hidden = true; return; }
      $("error").hidden = true;
      renderQuote(data);
    } catch (err) {
      showError(String(err));
    } finally {
      $("quote-busy").hidden = true;
      $("quote-button").disabled = false;
    }
  });
  if (wanted) $("quote-form").requestSubmit();
}

function showError(text) { const err = $("error"); err.hidden = false; err.textContent = text; }

// -- start -------------------------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "runs") live("/api/stream", "runs", renderRuns);
  else if (page === "run") {
    const name = decodeURIComponent(location.pathname.replace(/^\/runs\//, ""));
    live("/api/runs/" + encodeURIComponent(name) + "/stream", "run", renderRun);
  } else if (page === "quote") initQuote().catch((err) => showError(String(err)));
});

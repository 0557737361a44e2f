/**
 * Self-contained SVG charts: a line chart and a grouped bar chart, each with axes, ticks, axis
 * labels, a legend and a title, stacked into one document under a heading and a line naming the
 * machine. No fonts, scripts or stylesheets are referenced (text uses the generic sans-serif
 * family), so the file renders the same in a browser, an image viewer and a README.
 */
import { fmt } from "./bench-report.ts";

export interface Point {
  x: number;
  y: number;
}

export interface LineSeries {
  name: string;
  points: Point[];
  /** Index into the palette; series that belong together (a figure and its limit) share one. */
  color: number;
  /** Limits and references are dashed, measurements solid. */
  dashed?: boolean;
}

export interface LineChart {
  kind: "line";
  title: string;
  xLabel: string;
  yLabel: string;
  /** log2 spaces batch sizes 1, 4, 16, 64 evenly. */
  xScale: "linear" | "log2";
  /** Tick positions on x (default: the distinct x of the points). */
  xTicks?: number[];
  /** How an x tick reads (default: the number). */
  xTickLabel?: (x: number) => string;
  series: LineSeries[];
}

export interface BarChart {
  kind: "bar";
  title: string;
  yLabel: string;
  /** The groups along x, e.g. tensor types. */
  categories: string[];
  /** One bar per category and series; null where a series has no value for a category. */
  series: { name: string; values: (number | null)[] }[];
}

export type Chart = LineChart | BarChart;

/** Tableau 10: distinguishable, and readable on white. */
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const PANEL = { width: 760, height: 360 };
const MARGIN = { left: 78, right: 230, top: 44, bottom: 56 };
const FONT = 'font-family="sans-serif"';

export function paletteColor(i: number): string {
  return PALETTE[((i % PALETTE.length) + PALETTE.length) % PALETTE.length]!;
}

/** Text made safe inside SVG (XML) markup. */
export function escapeXml(s: string): string {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

/** A round step (1, 2 or 5 times a power of ten) giving about `target` intervals (4 to 10) over [0, max]. */
export function niceStep(max: number, target = 5): number {
  if (!(max > 0)) return 1;
  const raw = max / target;
  const power = 10 ** Math.floor(Math.log10(raw));
  const m = raw / power;
  return (m < 1.5 ? 1 : m < 3 ? 2 : m < 7 ? 5 : 10) * power;
}

/** Ticks 0, step, ... up to the first at or above `max`. */
export function niceTicks(max: number, target = 5): number[] {
  const step = niceStep(max, target);
  const top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
  const ticks: number[] = [];
  for (let i = 0; i * step <= top + step * 1e-9; i++) ticks.push(Number((i * step).toPrecision(12)));
  return ticks;
}

/** A tick value with as many decimals as the step between ticks needs (0, 0.25, 0.5; 0, 20, 40). */
export function tickLabel(v: number, step: number): string {
  const decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
  return Math.abs(v) >= 1e6 ? v.toExponential(1) : v.toFixed(Number.isInteger(v) ? 0 : decimals);
}

/** Where a plot's area is inside its panel. */
interface Frame {
  left: number;
  top: number;
  width: number;
  height: number;
}

function frameOf(): Frame {
  return { left: MARGIN.left, top: MARGIN.top, width: PANEL.width - MARGIN.left - MARGIN.right, height: PANEL.height - MARGIN.top - MARGIN.bottom };
}

function text(x: number, y: number, s: string, attrs = ""): string {
  return `<text x="${r(x)}" y="${r(y)}" ${FONT} ${attrs}>${escapeXml(s)}</text>`;
}

/** Coordinates rounded to 0.1 px: small files, no visible difference. */
function r(v: number): string {
  return String(Math.round(v * 10) / 10);
}

/** The y axis: gridlines, tick labels and the rotated axis label. */
function yAxis(f: Frame, ticks: number[], top: number, label: string): string[] {
  const y = (v: number) => f.top + f.height - (v / top) * f.height;
  const out = ticks.map((t) =>
    `<line x1="${r(f.left)}" y1="${r(y(t))}" x2="${r(f.left + f.width)}" y2="${r(y(t))}" stroke="#e0e0e0"/>` +
    text(f.left - 6, y(t) + 4, tickLabel(t, ticks[1]! - ticks[0]!), 'font-size="11" text-anchor="end" fill="#333"'),
  );
  const cy = f.top + f.height / 2;
  out.push(text(18, cy, label, `font-size="12" text-anchor="middle" fill="#222" transform="rotate(-90 18 ${r(cy)})"`));
  out.push(`<line x1="${r(f.left)}" y1="${r(f.top)}" x2="${r(f.left)}" y2="${r(f.top + f.height)}" stroke="#333"/>`);
  out.push(`<line x1="${r(f.left)}" y1="${r(f.top + f.height)}" x2="${r(f.left + f.width)}" y2="${r(f.top + f.height)}" stroke="#333"/>`);
  return out;
}

/** The legend, right of the plot: a swatch (a line, dashed for a dashed series; a square for bars) and the name. */
function legend(f: Frame, items: { name: string; color: string; dashed: boolean; bar: boolean }[]): string[] {
  const x = f.left + f.width + 16;
  return items.flatMap((item, i) => {
    const y = f.top + 6 + i * 18;
    const swatch = item.bar
      ? `<rect x="${r(x)}" y="${r(y - 5)}" width="18" height="10" fill="${item.color}"/>`
      : `<line x1="${r(x)}" y1="${r(y)}" x2="${r(x + 18)}" y2="${r(y)}" stroke="${item.color}" stroke-width="2.5"${item.dashed ? ' stroke-dasharray="6 4"' : ""}/>`;
    return [swatch, text(x + 24, y + 4, truncate(item.name, 30), 'font-size="11" fill="#222"')];
  });
}

/** Lines of at most about `width` characters, broken after commas. */
function wrap(s: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const part of s.split(/(?<=, )/)) {
    if (line !== "" && line.length + part.length > width) {
      lines.push(line.trimEnd());
      line = "";
    }
    line += part;
  }
  if (line !== "") lines.push(line.trimEnd());
  return lines.map((l) => truncate(l, width + 20));
}

function truncate(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n - 1)}…`;
}

/** A line chart's SVG elements, in panel coordinates (0,0 at the panel's top left). */
export function renderLineChart(c: LineChart): string[] {
  const f = frameOf();
  const series = c.series.map((s) => ({ ...s, points: s.points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y)) }));
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b);
  const ticksX = c.xTicks ?? xs;
  const tx = (x: number) => (c.xScale === "log2" ? Math.log2(x) : x);
  const allX = [...xs, ...ticksX].map(tx);
  let lo = Math.min(...allX);
  let hi = Math.max(...allX);
  if (!Number.isFinite(lo)) [lo, hi] = [0, 1];
  if (hi === lo) [lo, hi] = [lo - 1, hi + 1];
  const pad = (hi - lo) * 0.06;
  const px = (x: number) => f.left + ((tx(x) - lo + pad) / (hi - lo + 2 * pad)) * f.width;
  const ticksY = niceTicks(Math.max(0, ...series.flatMap((s) => s.points.map((p) => p.y))));
  const top = ticksY[ticksY.length - 1]!;
  const py = (y: number) => f.top + f.height - (y / top) * f.height;
  const label = c.xTickLabel ?? ((x: number) => (Number.isInteger(x) ? String(x) : fmt(x, 3)));
  const out = [...yAxis(f, ticksY, top, c.yLabel)];
  for (const t of ticksX) {
    out.push(`<line x1="${r(px(t))}" y1="${r(f.top + f.height)}" x2="${r(px(t))}" y2="${r(f.top + f.height + 5)}" stroke="#333"/>`);
    out.push(text(px(t), f.top + f.height + 18, label(t), 'font-size="11" text-anchor="middle" fill="#333"'));
  }
  out.push(text(f.left + f.width / 2, f.top + f.height + 40, c.xLabel, 'font-size="12" text-anchor="middle" fill="#222"'));
  for (const s of series) {
    if (s.points.length === 0) continue;
    const color = paletteColor(s.color);
    const d = s.points.map((p, i) => `${i === 0 ? "M" : "L"}${r(px(p.x))} ${r(py(p.y))}`).join(" ");
    out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2.5"${s.dashed ? ' stroke-dasharray="6 4"' : ""}/>`);
    if (!s.dashed) for (const p of s.points) out.push(`<circle cx="${r(px(p.x))}" cy="${r(py(p.y))}" r="3.5" fill="${color}"/>`);
  }
  out.push(...legend(f, series.map((s) => ({ name: s.name, color: paletteColor(s.color), dashed: s.dashed === true, bar: false }))));
  return out;
}

/** A grouped bar chart's SVG elements, each bar labelled with its value. */
export function renderBarChart(c: BarChart): string[] {
  const f = frameOf();
  const values = c.series.flatMap((s) => s.values.filter((v): v is number => v !== null && Number.isFinite(v)));
  const ticksY = niceTicks(Math.max(0, ...values));
  const top = ticksY[ticksY.length - 1]!;
  const py = (y: number) => f.top + f.height - (y / top) * f.height;
  const out = [...yAxis(f, ticksY, top, c.yLabel)];
  const groupWidth = f.width / Math.max(1, c.categories.length);
  const barWidth = (groupWidth * 0.8) / Math.max(1, c.series.length);
  c.categories.forEach((category, ci) => {
    const gx = f.left + ci * groupWidth + groupWidth * 0.1;
    c.series.forEach((s, si) => {
      const v = s.values[ci];
      if (v === null || v === undefined || !Number.isFinite(v)) return;
      const x = gx + si * barWidth;
      out.push(`<rect x="${r(x + 1)}" y="${r(py(v))}" width="${r(barWidth - 2)}" height="${r(f.top + f.height - py(v))}" fill="${paletteColor(si)}"/>`);
      out.push(text(x + barWidth / 2, py(v) - 4, fmt(v, 3), 'font-size="10" text-anchor="middle" fill="#333"'));
    });
    out.push(text(f.left + ci * groupWidth + groupWidth / 2, f.top + f.height + 18, category, 'font-size="11" text-anchor="middle" fill="#333"'));
  });
  out.push(...legend(f, c.series.map((s, i) => ({ name: s.name, color: paletteColor(i), dashed: false, bar: true }))));
  return out;
}

/** One panel: its title over the chart. */
function renderPanel(c: Chart): string[] {
  const body = c.kind === "line" ? renderLineChart(c) : renderBarChart(c);
  return [text(MARGIN.left, 24, c.title, 'font-size="14" font-weight="bold" fill="#111"'), ...body];
}

/**
 * The whole document: `heading` and `machine` on top, then the charts one under another. Its
 * size is fixed by the number of charts, so it scales as an image.
 */
export function chartDocument(charts: readonly Chart[], heading: string, machine: string): string {
  const machineLines = wrap(machine, 118);
  const head = 40 + 15 * machineLines.length;
  const height = head + charts.length * PANEL.height + 8;
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${PANEL.width}" height="${height}" viewBox="0 0 ${PANEL.width} ${height}">`,
    `<title>${escapeXml(heading)}</title>`,
    `<rect width="100%" height="100%" fill="#ffffff"/>`,
    text(16, 26, heading, 'font-size="17" font-weight="bold" fill="#111"'),
    ...machineLines.map((line, i) => text(16, 46 + 15 * i, line, 'font-size="11" fill="#555"')),
  ];
  charts.forEach((c, i) => {
    parts.push(`<g transform="translate(0 ${head + i * PANEL.height})">`, ...renderPanel(c), "</g>");
  });
  parts.push("</svg>");
  return `${parts.join("\n")}\n`;
}

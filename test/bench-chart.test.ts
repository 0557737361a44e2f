/**
 * The bench charts: the SVG module's pieces (ticks, escaping, the document's parts, nothing
 * external), and a chart rendered by headless Chromium whose picture must hold lines, bars and
 * text in the series' colours, next to a blank control that must not (helpers/chromium.ts: skipped
 * outside CI without a Chromium).
 */
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chartDocument, escapeXml, niceTicks, paletteColor, tickLabel, type Chart } from "../src/bench/chart-svg.ts";
import { inkedPixels, pixelsNear, readPng } from "./helpers/png.ts";
import { LONG_PROCESS_TEST_MS } from "./helpers/limits.ts";
import { browserTestsRun, requireBrowser } from "./helpers/chromium.ts";

const dir = mkdtempSync(join(tmpdir(), "pagellm-chart-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const CHARTS: Chart[] = [
  {
    kind: "line", title: "Decode tokens/s <F32 & Q8_0>", xLabel: "threads", yLabel: "tokens/s", xScale: "linear", xTicks: [1, 2],
    series: [
      { name: "F32 decode", color: 0, points: [{ x: 1, y: 61 }, { x: 2, y: 72 }] },
      { name: "F32 bandwidth limit", color: 0, dashed: true, points: [{ x: 1, y: 70 }, { x: 2, y: 80 }] },
      { name: "Q8_0 decode", color: 1, points: [{ x: 1, y: 90 }, { x: 2, y: Number.NaN }] },
    ],
  },
  {
    kind: "line", title: "Batch", xLabel: "sequences", yLabel: "tokens/s", xScale: "log2", xTicks: [1, 4, 16],
    series: [{ name: "decode", color: 2, points: [{ x: 1, y: 60 }, { x: 4, y: 118 }, { x: 16, y: 138 }] }],
  },
  {
    kind: "bar", title: "Tokens/s per tensor type", yLabel: "tokens/s", categories: ["F32", "Q8_0", "Q4_K_M"],
    series: [{ name: "decode, 1 thread", values: [61, 90, null] }, { name: "prefill, 1 thread", values: [256, 164, 160] }],
  },
];
const MACHINE = "AMD EPYC, 2 cores, 24 GiB, Linux 6.1 linux-x64, Bun 1.4.5, pagellm commit 0123456789ab, 2026-11-24 10:31 UTC";

describe("chart-svg", () => {
  test("ticks are round steps from 0 past the maximum", () => {
    expect(niceTicks(138)).toEqual([0, 20, 40, 60, 80, 100, 120, 140]);
    expect(niceTicks(0.9)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(0)).toEqual([0, 1]);
    expect(niceTicks(5)).toEqual([0, 1, 2, 3, 4, 5]);
    expect([tickLabel(0.4, 0.2), tickLabel(40, 20), tickLabel(0, 0.25), tickLabel(0.25, 0.25)]).toEqual(["0.4", "40", "0", "0.3"]);
  });

  test("text is escaped", () => {
    expect(escapeXml(`a<b & "c">`)).toBe("a&lt;b &amp; &quot;c&quot;&gt;");
  });

  test("the document has the heading, machine line, titles, axis labels, legends and one panel per chart, and references nothing", () => {
    const svg = chartDocument(CHARTS, "pagellm bench all (smollm2-135m)", MACHINE);
    for (const s of ["pagellm bench all (smollm2-135m)", "AMD EPYC, 2 cores", "Decode tokens/s &lt;F32 &amp; Q8_0&gt;", "threads", "sequences", "F32 bandwidth limit", "Q4_K_M", "prefill, 1 thread"]) {
      expect(svg).toContain(s);
    }
    expect(svg.match(/<g transform=/g)?.length).toBe(3);
    expect(svg).toContain('stroke-dasharray="6 4"');
    expect(svg).toContain(paletteColor(1));
    // Self-contained: no links, scripts, stylesheets or web fonts; the only URL is the SVG namespace.
    expect(svg.replace('xmlns="http://www.w3.org/2000/svg"', "")).not.toMatch(/href|<script|@import|url\(|@font-face|http/i);
    expect(svg).not.toContain("NaN");
    // A bar chart with a missing value draws the others.
    expect(svg.match(/<rect x=/g)?.length).toBe(2 + 5);
  });
});

const renders = browserTestsRun("SVG render test");

/** Screenshot `svgFile` in headless Chromium at width x height and read the PNG. */
function render(svgFile: string, width: number, height: number) {
  const png = join(dir, `${svgFile.split("/").pop()}.png`);
  const p = Bun.spawnSync([
    requireBrowser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", `--user-data-dir=${join(dir, "profile")}`,
    `--window-size=${width},${height}`, `--screenshot=${png}`, `file://${svgFile}`,
  ], { stdout: "pipe", stderr: "pipe", timeout: 90_000 });
  if (p.exitCode !== 0) throw new Error(`chromium exited ${p.exitCode}: ${p.stderr.toString().slice(-400)}`);
  return readPng(new Uint8Array(readFileSync(png)));
}

describe.skipIf(!renders)("chart rendered by headless Chromium", () => {
  test("the picture holds the charts in the series' colours; a blank control does not", () => {
    const svg = chartDocument(CHARTS, "pagellm bench test", MACHINE);
    const [, width, height] = /width="(\d+)" height="(\d+)"/.exec(svg)!.map(Number) as [number, number, number];
    const file = join(dir, "chart.svg");
    writeFileSync(file, svg);
    const picture = render(file, width, height);
    expect([picture.width, picture.height]).toEqual([width, height]);
    const inked = inkedPixels(picture);
    // Axes, gridlines, lines, bars and text: a few percent of the picture, far from all of it.
    expect(inked).toBeGreaterThan(0.02 * width * height);
    expect(inked).toBeLessThan(0.5 * width * height);
    for (const i of [0, 1, 2]) expect(pixelsNear(picture, paletteColor(i)), paletteColor(i)).toBeGreaterThan(200);

    const blank = join(dir, "blank.svg");
    writeFileSync(blank, `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}"><rect width="100%" height="100%" fill="#fff"/></svg>`);
    const control = render(blank, width, height);
    expect(inkedPixels(control)).toBeLessThan(0.001 * width * height);
  }, LONG_PROCESS_TEST_MS);
});

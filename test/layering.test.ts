/**
 * The folders of src/ are layers: a file imports (type-only imports included) only from its own
 * folder or a lower one, and no files import each other in a circle. LAYERS lists them lowest
 * first; `kv-disk` (the disk tier: block files under kv/ and model/) and `hub` (downloads,
 * summaries of what the backend stores) sit where their imports put them. `constraint` is the
 * sampling side of a constraint, below everything that makes or applies one; `llm` is the front
 * door, which composes chat/, tools/ and grammar/ with the engine core, so the core (engine/)
 * imports none of them although they sit below it. `vision` (image encoders, image decoding and
 * preprocessing) sits on the backend's kernels; it hands the front door rows of embeddings, so the
 * engine never imports it.
 */
import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const SRC = resolve(import.meta.dir, "../src");
const LAYERS = [
  "util", "errors", "kv", "model", "kv-disk", "tokenizer", "backend", "vision", "hub", "synth",
  "constraint", "chat", "tools", "grammar", "engine", "embed", "llm", "server", "bench", "cli", "index",
] as const;

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) sourceFiles(path, out);
    else if (path.endsWith(".ts")) out.push(path);
  }
  return out;
}

// Static imports and re-exports (type-only ones included) and dynamic import() of a literal path.
const IMPORT = /(?:import|export)\s+(?:type\s+)?(?:[^'"`;]*?\s+from\s+)?["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g;

/** Each file's relative imports, as paths under src/. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const targets: string[] = [];
    for (const match of readFileSync(file, "utf8").matchAll(IMPORT)) {
      const spec = match[1] ?? match[2]!;
      if (spec.startsWith(".")) targets.push(relative(SRC, resolve(dirname(file), spec)));
    }
    graph.set(relative(SRC, file), targets);
  }
  return graph;
}

function layerOf(path: string): number {
  const top = path.includes("/") ? path.slice(0, path.indexOf("/")) : path.replace(/\.ts$/, "");
  const layer = LAYERS.indexOf(top as (typeof LAYERS)[number]);
  if (layer < 0) throw new Error(`src/${path}: folder ${top} has no place in LAYERS`);
  return layer;
}

/** Strongly connected components of more than one file (Tarjan). */
function circles(graph: Map<string, string[]>): string[] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) !== index.get(v)) return;
    const component: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      component.push(w);
    } while (w !== v);
    if (component.length > 1) found.push(component.sort().join(" "));
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found.sort();
}

const graph = importGraph();
const upward = [...graph].flatMap(([from, targets]) =>
  targets.filter((to) => layerOf(to) > layerOf(from)).map((to) => `${from} -> ${to}`));
const foundCircles = circles(graph);

test("every import points to the same folder or a lower one", () => {
  expect(upward).toEqual([]);
});

test("no files import each other in a circle", () => {
  expect(foundCircles).toEqual([]);
});

test("the circle finder finds a circle of three and a file importing itself is none", () => {
  const graph = new Map([["a.ts", ["b.ts"]], ["b.ts", ["c.ts"]], ["c.ts", ["a.ts", "d.ts"]], ["d.ts", ["d.ts"]]]);
  expect(circles(graph)).toEqual(["a.ts b.ts c.ts"]);
});

test("the engine core (engine/) imports nothing from chat/, tools/ or grammar/: the front door composes them", () => {
  const composed = new Set(["chat", "tools", "grammar"]);
  const arrows = [...graph].flatMap(([from, targets]) =>
    from.startsWith("engine/") ? targets.filter((to) => composed.has(to.split("/")[0]!)).map((to) => `${from} -> ${to}`) : []);
  expect(arrows).toEqual([]);
});


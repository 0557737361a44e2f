/**
 * `pagellm bench compare NEW.json OLD.json` and `pagellm bench chart RESULTS.json OUT.svg`: the
 * comparison and the charts of runs already saved with --json, without measuring anything.
 */
import { defineCommand, type ArgsDef } from "citty";
import { chartSvg } from "../bench/charts.ts";
import { compareRuns, comparisonNotes, comparisonTables } from "../bench/compare.ts";
import { tablesText } from "../bench/bench-report.ts";
import { readBenchDocument, reportsOf } from "../bench/schema.ts";
import { checkWritable, writeFile } from "./bench-output.ts";
import { checkKnownOptions } from "./options.ts";

const compareArgs = {
  new: { type: "positional", description: "The later run's --json document", valueHint: "new.json", required: true },
  old: { type: "positional", description: "The earlier run's --json document", valueHint: "old.json", required: true },
} as const satisfies ArgsDef;

export const compareCommand = defineCommand({
  meta: { name: "compare", description: "Each figure of a saved run as a ratio to the same figure of an earlier one, and the figures either lacks" },
  args: compareArgs,
  run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, compareArgs);
    const now = readBenchDocument(args.new);
    const old = readBenchDocument(args.old);
    const c = compareRuns(reportsOf(now), now.machine, old, args.old);
    process.stdout.write(tablesText(comparisonTables(c), comparisonNotes(c)));
  },
});

const chartArgs = {
  results: { type: "positional", description: "A --json document", valueHint: "results.json", required: true },
  out: { type: "positional", description: "The SVG file to write", valueHint: "out.svg", required: true },
} as const satisfies ArgsDef;

export const chartCommand = defineCommand({
  meta: { name: "chart", description: "Draw the charts of a saved --json document as one self-contained SVG file" },
  args: chartArgs,
  run({ args, rawArgs }) {
    checkKnownOptions(rawArgs, chartArgs);
    const doc = readBenchDocument(args.results);
    const out = checkWritable(args.out, "bench chart");
    writeFile(out, chartSvg(doc), "bench chart");
  },
});

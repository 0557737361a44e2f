/**
 * Bounded rendering of an untrusted Jinja chat template. A template comes from the model file, and
 * @huggingface/jinja evaluates it without limits: `{% for i in range(2000000000) %}` hangs and
 * grows to gigabytes, a value doubled in a loop fills the memory, a macro that calls itself
 * overflows the stack. Rendering here runs the library's own interpreter with a check hooked into
 * its one entry point for every node (`evaluate`), which every loop, call and output goes through:
 *
 * - steps: at most `maxSteps` node evaluations, and `maxMs` of wall time (checked every 1024
 *   steps), so no loop runs away, however it is written;
 * - size: every value a node yields, strings and lists by what printing them writes, is at most
 *   `maxChars` (lists and dicts also at most `maxItems` entries), and so is the output;
 * - depth: nodes nest at most `maxDepth` deep (a recursive macro fails cleanly, not with the stack);
 * - the few operations that make a large value from small ones in one step are checked before they
 *   run: `range` (at most `maxItems`, as Jinja's own sandbox: MAX_RANGE = 100000), `indent`'s width
 *   and `tojson`'s indent, `replace`, `join` and `split`.
 *
 * Real templates use a small share of this: Qwen3's with 1000 messages of ~200 characters takes 54k steps
 * (0.5 s on a busy 2-core machine), 200 messages 11k. A loop iteration costs the library ~5 µs (a
 * new scope) and is charged 4 steps, so a million steps is a second or two at worst.
 * A template past a limit fails with a TemplateLimitError saying which, and the caller names the
 * template (jinja-template.ts).
 */
import { Environment, Interpreter } from "@huggingface/jinja";
import {
  bareDefault, booleanValue, emptyList, filterOperand, filterResult, isUndefined, undefinedOperation, undefinedTest, UNDEFINED_OPERATORS,
  type RuntimeValue,
} from "./jinja-undefined.ts";

export interface RenderLimits {
  /** Node evaluations per rendering. */
  maxSteps: number;
  /** Wall-clock milliseconds per rendering. */
  maxMs: number;
  /** Characters of any value, printed, and of the output. */
  maxChars: number;
  /** Entries of any list or dict, and items of a `range`. */
  maxItems: number;
  /** Nesting of node evaluations (macro calls included). */
  maxDepth: number;
}

export const DEFAULT_RENDER_LIMITS: RenderLimits = {
  maxSteps: 1_000_000,
  maxMs: 5_000,
  maxChars: 16 << 20,
  maxItems: 100_000,
  maxDepth: 400,
};

/** What a loop iteration costs in steps: about as much time as four node evaluations. */
const STEPS_PER_ITERATION = 4;

/** Widest `indent` and `tojson(indent=...)` a template may ask for. */
const MAX_INDENT = 256;

/** A rendering stopped by a limit: the message says which. */
export class TemplateLimitError extends Error {}

// The parts of the library's runtime values and AST nodes these checks read.
type Value = RuntimeValue;
interface Node {
  type: string;
  value?: unknown;
  callee?: Node;
  args?: Node[];
  filter?: Node;
  operand?: Node;
  object?: Node;
  property?: Node;
  iterable?: Node;
  lhs?: Node;
  left?: Node;
  right?: Node;
  operator?: Node;
  test?: Node;
  negate?: boolean;
}
type ApplyFilter = (operand: Value, filter: Node, environment: Environment) => Value;
type EvaluateArguments = (args: Node[], environment: Environment) => [Value[], Map<string, Value>];
type EvaluateNode = (node: Node, environment: Environment) => Value;
/** The library's private methods hooked here: methods like any other, only private in its types. */
interface Hooked {
  applyFilter: ApplyFilter;
  evaluateArguments: EvaluateArguments;
  evaluateTestExpression: EvaluateNode;
  evaluateBinaryExpression: EvaluateNode;
}

/** Characters printing `value` writes, at most (lists and dicts as the library prints them). Cached per value. */
class SizeOf {
  private readonly known = new WeakMap<object, number>();

  of(v: Value): number {
    switch (v.type) {
      case "StringValue":
        return (v.value as string).length + 2;
      case "ArrayValue":
      case "TupleValue":
      case "ObjectValue":
      case "NamespaceValue": {
        const cached = this.known.get(v);
        if (cached !== undefined) return cached;
        let size = 2;
        if (v.value instanceof Map) for (const [k, item] of v.value as Map<string, Value>) size += k.length + 4 + this.of(item);
        else for (const item of v.value as Value[]) size += 2 + this.of(item);
        this.known.set(v, size);
        return size;
      }
      default:
        return 24;
    }
  }
}

/** The library's interpreter with the limits above checked at every node. */
export class BoundedInterpreter extends Interpreter {
  private steps = 0;
  private depth = 0;
  private nextClockCheck = 1024;
  /** The iterable expressions of the loops met so far. */
  private readonly loopIterables = new WeakSet<Node>();
  private readonly deadline: number;
  private readonly size = new SizeOf();
  /** Operands a hook has evaluated already: the library's own evaluation of the node takes them instead of evaluating it again. */
  private readonly preset = new Map<Node, Value>();

  constructor(environment: Environment, private readonly limits: RenderLimits = DEFAULT_RENDER_LIMITS) {
    super(environment);
    this.deadline = performance.now() + limits.maxMs;
    const self = this as unknown as Hooked;
    const evaluateArguments = self.evaluateArguments.bind(this);
    const apply = self.applyFilter.bind(this);
    const test = self.evaluateTestExpression.bind(this);
    const binary = self.evaluateBinaryExpression.bind(this);
    // Filters are checked before they run, and take an undefined operand as Jinja2 does (jinja-undefined.ts).
    self.applyFilter = (operand, filter, environment) => {
      const given = filterName(filter);
      const name = given === undefined ? undefined : (FILTER_ALIASES[given] ?? given);
      if (name === "default" && filter.type === "Identifier") return bareDefault(operand);
      const seen = filterOperand(name, operand);
      const node = name === given ? filter : renamedFilter(filter, name!);
      this.checkFilter(seen, name, node, environment, evaluateArguments);
      return filterResult(apply(seen, node, environment) as Value | undefined);
    };
    self.evaluateTestExpression = (node, environment) => {
      const operand = this.evaluate(node.operand as never, environment) as Value;
      const jinja2 = undefinedTest(String(node.test?.value), operand);
      if (jinja2 !== null) return booleanValue(node.negate === true ? !jinja2 : jinja2);
      this.preset.set(node.operand!, operand);
      return test(node, environment);
    };
    self.evaluateBinaryExpression = (node, environment) => {
      const op = String(node.operator?.value);
      if (!UNDEFINED_OPERATORS.has(op)) return binary(node, environment);
      const left = this.evaluate(node.left as never, environment) as Value;
      const right = this.evaluate(node.right as never, environment) as Value;
      const jinja2 = undefinedOperation(op, left, right);
      if (jinja2 !== null && !Array.isArray(jinja2)) return jinja2 as Value;
      const [l, r] = jinja2 ?? [left, right];
      this.preset.set(node.left!, l);
      this.preset.set(node.right!, r);
      return binary(node, environment);
    };
  }

  override evaluate(statement: Parameters<Interpreter["evaluate"]>[0], environment: Environment): ReturnType<Interpreter["evaluate"]> {
    const given = this.preset.get(statement as unknown as Node);
    if (given !== undefined) {
      this.preset.delete(statement as unknown as Node);
      return given as unknown as ReturnType<Interpreter["evaluate"]>;
    }
    const limits = this.limits;
    this.charge(1);
    if (++this.depth > limits.maxDepth) throw new TemplateLimitError(`rendering nested more than ${limits.maxDepth} deep (a macro that calls itself?)`);
    try {
      const node = statement as unknown as Node | undefined;
      if (node !== undefined) {
        this.checkCall(node, environment);
        if (node.type === "For") this.loopIterables.add(node.iterable?.type === "SelectExpression" ? node.iterable.lhs! : node.iterable!);
      }
      let value = super.evaluate(statement, environment) as Value;
      // A loop over an undefined value runs no iteration, as in Jinja2.
      if (node !== undefined && this.loopIterables.has(node) && isUndefined(value)) value = emptyList();
      this.checkValue(value);
      // A loop is charged per item: the library's own work per iteration (a new scope, ~5 µs) is
      // the same whether its body evaluates anything or not.
      if (node !== undefined && this.loopIterables.has(node)) this.charge(STEPS_PER_ITERATION * itemCount(value));
      return value as unknown as ReturnType<Interpreter["evaluate"]>;
    } finally {
      this.depth--;
    }
  }

  /** Steps taken so far (a rendering's cost, for tests and figures). */
  get stepsTaken(): number {
    return this.steps;
  }

  /** Count `n` steps; the clock is read every 1024 of them. */
  private charge(n: number): void {
    this.steps += n;
    if (this.steps > this.limits.maxSteps) throw new TemplateLimitError(`rendering took more than ${this.limits.maxSteps} steps (a loop that does not end?)`);
    if (this.steps < this.nextClockCheck) return;
    this.nextClockCheck = this.steps + 1024;
    if (performance.now() > this.deadline) throw new TemplateLimitError(`rendering took more than ${this.limits.maxMs / 1000} s`);
  }

  /** The output of a whole rendering. */
  checkOutput(text: string): void {
    if (text.length > this.limits.maxChars) throw this.tooLarge("the output", text.length);
  }

  private tooLarge(what: string, chars: number): TemplateLimitError {
    return new TemplateLimitError(`${what} would be ${chars} characters, more than ${this.limits.maxChars}`);
  }

  private checkValue(v: Value): void {
    if (v.type === "StringValue") {
      if ((v.value as string).length > this.limits.maxChars) throw this.tooLarge("a value", (v.value as string).length);
      return;
    }
    const items = itemCount(v);
    if (items === 0) return;
    if (items > this.limits.maxItems) throw new TemplateLimitError(`a list of ${items} items, more than ${this.limits.maxItems}`);
    const size = this.size.of(v);
    if (size > this.limits.maxChars) throw this.tooLarge("a list printed", size);
  }

  /** `x.replace(a, b)` and `x.split(s)` on a string: the methods that amplify. */
  private checkCall(node: Node, environment: Environment): void {
    if (node.type !== "CallExpression" || node.callee?.type !== "MemberExpression") return;
    const method = node.callee.property;
    if (method?.type !== "Identifier" || (method.value !== "replace" && method.value !== "split")) return;
    const object = super.evaluate(node.callee.object as never, environment) as Value;
    if (object.type !== "StringValue") return;
    const args = (node.args ?? []).map((a) => super.evaluate(a as never, environment) as Value);
    this.checkStringOp(method.value, object.value as string, args);
  }

  private checkFilter(operand: Value, name: string | undefined, filter: Node, environment: Environment, evaluateArguments: EvaluateArguments): void {
    const [args, kwargs] = filter.type === "CallExpression" ? evaluateArguments(filter.args ?? [], environment) : [[], new Map<string, Value>()];
    if (name === "join" && Array.isArray(operand.value)) {
      // The list itself is bounded; a separator is repeated between every two items.
      const separator = args[0] ?? kwargs.get("d");
      const items = operand.value as Value[];
      let chars = typeof separator?.value === "string" ? separator.value.length * Math.max(0, items.length - 1) : 0;
      for (const item of items) chars += this.size.of(item);
      if (chars > this.limits.maxChars) throw this.tooLarge("join's result", chars);
    } else if (name === "indent" || name === "tojson") {
      const width = name === "indent" ? args[0] ?? kwargs.get("width") : kwargs.get("indent");
      if (typeof width?.value === "number" && width.value > MAX_INDENT) {
        throw new TemplateLimitError(`${name} by ${width.value} characters, more than ${MAX_INDENT}`);
      }
    } else if (name === "replace" && operand.type === "StringValue") {
      this.checkStringOp("replace", operand.value as string, args);
    }
  }

  /** replace and split: the result's size from the occurrences, counted before anything is built. */
  private checkStringOp(op: string, text: string, args: Value[]): void {
    const [first, second] = args;
    if (op === "split") {
      const separator = typeof first?.value === "string" ? first.value : " ";
      const pieces = occurrences(text, separator, this.limits.maxItems + 1) + 1;
      if (pieces > this.limits.maxItems) throw new TemplateLimitError(`split into more than ${this.limits.maxItems} pieces`);
      return;
    }
    if (typeof first?.value !== "string" || typeof second?.value !== "string") return;
    const grows = second.value.length - first.value.length;
    if (grows <= 0) return;
    const room = this.limits.maxChars - text.length;
    const found = occurrences(text, first.value, Math.floor(room / grows) + 1);
    if (found * grows > room) throw this.tooLarge("replace's result", text.length + found * grows);
  }
}

/** Jinja2's other names of filters the library has under one name only. */
const FILTER_ALIASES: Readonly<Record<string, string>> = { d: "default", count: "length" };

/** The filter node under another name (an alias's). */
function renamedFilter(filter: Node, name: string): Node {
  return filter.type === "CallExpression" ? { ...filter, callee: { ...filter.callee!, value: name } } : { ...filter, value: name };
}

/** A filter's name (`trim`, or `indent` of `indent(2)`). */
function filterName(filter: Node): string | undefined {
  const name = filter.type === "Identifier" ? filter.value : filter.type === "CallExpression" ? filter.callee?.value : undefined;
  return typeof name === "string" ? name : undefined;
}

/** Entries of a list or dict; 0 for anything else. */
function itemCount(v: Value): number {
  return v.value instanceof Map ? v.value.size : Array.isArray(v.value) ? v.value.length : 0;
}

/** Occurrences of `part` in `text` as replace counts them ("" matches between every character), counting at most `cap`. */
function occurrences(text: string, part: string, cap: number): number {
  if (part === "") return Math.min(text.length + 1, cap);
  let n = 0;
  for (let at = text.indexOf(part); at >= 0 && n < cap; at = text.indexOf(part, at + part.length)) n++;
  return n;
}

/** `range` as Python's, refusing more than `maxItems` items before making any. */
export function boundedRange(maxItems: number): (start: number, stop?: number, step?: number) => number[] {
  return (start, stop, step = 1) => {
    const [from, to] = stop === undefined ? [0, start] : [start, stop];
    if (step === 0) throw new Error("range() step must not be zero");
    const count = Math.max(0, Math.ceil((to - from) / step));
    if (count > maxItems) throw new TemplateLimitError(`range of ${count} items, more than ${maxItems}`);
    return Array.from({ length: count }, (_, i) => from + i * step);
  };
}

/**
 * Where a `$ref` points, inside the schema document only: `#`, `#/json/pointer` (with ~0, ~1 and
 * percent escapes), `#name` ($anchor, or an `$id`/`id` of "#name"), and a base-relative reference
 * whose document part is the root's own `$id`. Anything else (another file, a URL) is refused: a
 * constraint never fetches.
 */
import { GrammarError } from "../errors.ts";
import { isObject, type JsonValue } from "./json-value.ts";

/** A schema as written, with the JSON pointer it was found at (for messages and memoizing). */
export interface At {
  readonly raw: JsonValue;
  readonly path: string;
}

export class SchemaDocument {
  private anchors: Map<string, At> | null = null;
  private readonly rootId: string | null;

  constructor(readonly root: JsonValue) {
    const id = isObject(root) ? (root.get("$id") ?? root.get("id")) : undefined;
    this.rootId = typeof id === "string" ? id.split("#")[0]! : null;
  }

  resolve(ref: string, from: string): At {
    const hash = ref.indexOf("#");
    const docPart = hash < 0 ? ref : ref.slice(0, hash);
    const fragment = hash < 0 ? "" : ref.slice(hash + 1);
    if (docPart !== "" && !this.isRootDocument(docPart)) {
      throw new GrammarError(`${from}: $ref "${ref}" points outside the schema; only local references (#/...) are supported`);
    }
    if (fragment === "" || fragment.startsWith("/")) return this.pointer(fragment, ref, from);
    const anchored = this.anchorMap().get(fragment);
    if (anchored === undefined) throw new GrammarError(`${from}: $ref "${ref}": no $anchor or $id "#${fragment}" in the schema`);
    return anchored;
  }

  private isRootDocument(docPart: string): boolean {
    if (this.rootId === null) return false;
    return this.rootId === docPart || this.rootId.endsWith(`/${docPart}`);
  }

  private pointer(fragment: string, ref: string, from: string): At {
    let node: JsonValue = this.root;
    let path = "#";
    const parts = fragment === "" ? [] : fragment.slice(1).split("/");
    for (const escaped of parts) {
      let key: string;
      try {
        key = decodeURIComponent(escaped).replaceAll("~1", "/").replaceAll("~0", "~");
      } catch {
        throw new GrammarError(`${from}: $ref "${ref}" is not a valid JSON pointer`);
      }
      let next: JsonValue | undefined;
      if (Array.isArray(node) && /^(0|[1-9][0-9]*)$/.test(key)) next = node[Number(key)];
      else if (isObject(node)) next = node.get(key);
      if (next === undefined) throw new GrammarError(`${from}: $ref "${ref}" points to nothing in the schema`);
      node = next;
      path += `/${escaped}`;
    }
    return { raw: node, path };
  }

  private anchorMap(): Map<string, At> {
    if (this.anchors !== null) return this.anchors;
    const anchors = new Map<string, At>();
    const visit = (v: JsonValue, path: string, depth: number): void => {
      if (depth > 256) return;
      if (Array.isArray(v)) v.forEach((x, i) => visit(x, `${path}/${i}`, depth + 1));
      else if (isObject(v)) {
        const anchor = v.get("$anchor");
        if (typeof anchor === "string") anchors.set(anchor, { raw: v, path });
        for (const key of ["$id", "id"]) {
          const id = v.get(key);
          if (typeof id === "string" && id.startsWith("#")) anchors.set(id.slice(1), { raw: v, path });
        }
        for (const [k, x] of v.entries) visit(x, `${path}/${k.replaceAll("~", "~0").replaceAll("/", "~1")}`, depth + 1);
      }
    };
    visit(this.root, "#", 0);
    this.anchors = anchors;
    return anchors;
  }
}

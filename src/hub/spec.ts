/**
 * Model specs as --model, pull, rm and info take them:
 *   path/to/model.gguf                 a local file
 *   hf:OWNER/REPO/FILE.gguf            one file of a Hugging Face repository (FILE may contain folders)
 *   hf:OWNER/REPO:QUANT                the repository's GGUF file of that quantization (Q4_K_M, Q8_0, ...)
 *   hf:OWNER/REPO                      the repository's only GGUF file
 *   https://host/path/model.gguf       any http(s) URL
 */
import { ModelSpecError } from "./hub-errors.ts";

export type ModelSpec =
  | { readonly kind: "path"; readonly path: string }
  | { readonly kind: "hf-file"; readonly repo: string; readonly file: string }
  | { readonly kind: "hf-quant"; readonly repo: string; readonly quant: string | null }
  | { readonly kind: "url"; readonly url: string };

const REPO_PART = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export function parseModelSpec(spec: string): ModelSpec {
  if (spec === "") throw new ModelSpecError("empty model spec");
  if (/^https?:\/\//i.test(spec)) {
    try {
      new URL(spec);
    } catch {
      throw new ModelSpecError(`${spec}: not a valid URL`);
    }
    return { kind: "url", url: spec };
  }
  if (!spec.startsWith("hf:")) return { kind: "path", path: spec };
  return parseHubSpec(spec);
}

function parseHubSpec(spec: string): ModelSpec {
  const body = spec.slice(3);
  const usage = `${spec}: expected hf:OWNER/REPO/FILE.gguf or hf:OWNER/REPO:QUANT`;
  const colon = body.indexOf(":");
  const path = colon < 0 ? body : body.slice(0, colon);
  const quant = colon < 0 ? null : body.slice(colon + 1);
  const parts = path.split("/");
  if (parts.length < 2 || !REPO_PART.test(parts[0]!) || !REPO_PART.test(parts[1]!)) throw new ModelSpecError(usage);
  const repo = `${parts[0]}/${parts[1]}`;
  if (parts.length > 2) {
    if (quant !== null) throw new ModelSpecError(`${spec}: give either a FILE or a :QUANT, not both`);
    const file = parts.slice(2).join("/");
    if (parts.slice(2).some((p) => p === "" || p === "." || p === "..")) throw new ModelSpecError(usage);
    return { kind: "hf-file", repo, file };
  }
  if (quant !== null && !/^[A-Za-z0-9_]+$/.test(quant)) throw new ModelSpecError(`${spec}: "${quant}" is not a quantization name like Q4_K_M`);
  return { kind: "hf-quant", repo, quant };
}

/**
 * The one GGUF among `files` that has quantization `quant` (or the only GGUF when quant is null).
 * The quant matches case-insensitively as a whole word of the filename: "Q4_K" matches "model-Q4_K.gguf"
 * but not "model-Q4_K_M.gguf". Projector files (mmproj) and split shards other than the first are skipped.
 * Throws ModelSpecError listing what exists when nothing or more than one file matches.
 */
export function pickQuantFile(repo: string, files: readonly string[], quant: string | null): string {
  const ggufs = files.filter((f) => /\.gguf$/i.test(f) && !/mmproj/i.test(f) && !/-0*([2-9]|[1-9]\d+)-of-\d+\.gguf$/i.test(f));
  const wanted = quant === null ? ggufs : ggufs.filter((f) => hasQuant(f, quant));
  if (wanted.length === 1) {
    const split = /-0*1-of-0*(\d+)\.gguf$/i.exec(wanted[0]!);
    if (split !== null && Number(split[1]) > 1) {
      throw new ModelSpecError(`hf:${repo}: ${wanted[0]} is the first of ${Number(split[1])} parts of a split GGUF, and pagellm reads single-file GGUFs; merge them with llama-gguf-split --merge, or pick another quantization`);
    }
    return wanted[0]!;
  }
  const available = ggufs.map(quantOfName).filter((q, i, all) => q !== null && all.indexOf(q) === i);
  const listing = ggufs.length === 0 ? "it has no .gguf files" : `it has: ${available.length > 0 ? available.join(", ") : ggufs.join(", ")}`;
  if (wanted.length === 0) {
    const what = quant === null ? "no GGUF file" : `no ${quant} GGUF file`;
    throw new ModelSpecError(`hf:${repo}: ${what}; ${listing}`);
  }
  throw new ModelSpecError(`hf:${repo}${quant === null ? "" : `:${quant}`}: ${wanted.length} files match (${wanted.join(", ")}); name one as hf:${repo}/FILE`);
}

function hasQuant(file: string, quant: string): boolean {
  const name = file.split("/").pop()!;
  const escaped = quant.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return new RegExp(`(^|[-._])${escaped}([-.]|$)`, "i").test(name);
}

/** The quantization tag in a GGUF filename (…-Q4_K_M.gguf → Q4_K_M), or null. */
export function quantOfName(file: string): string | null {
  const name = file.split("/").pop()!.replace(/(-\d+-of-\d+)?\.gguf$/i, "");
  const match = /(?:^|[-._])((?:I?Q\d+_[A-Z0-9_]+|Q\d+|[BF]F?16|F32|TQ\d_\d|MXFP4))$/i.exec(name);
  return match ? match[1]!.toUpperCase() : null;
}

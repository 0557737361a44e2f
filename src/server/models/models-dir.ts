/**
 * The models in a `--models-dir` folder, each with the name requests use:
 *
 * - a GGUF file directly in the folder: its name without `.gguf` (`stories260K-Q8_0`); of a model
 *   split in parts (`NAME-00001-of-00003.gguf`) the first part, named without the part suffix;
 * - a subfolder holding GGUF files (as llama-server's router takes them): the folder's name, its
 *   first model file (multimodal projectors, `mmproj`, are never models);
 * - a Hugging Face cache (what `pagellm pull` fills: `models--OWNER--REPO/snapshots/...`), the
 *   folder itself or its `hub/`: `OWNER/REPO:QUANT` for each GGUF file of the snapshot refs/main
 *   names (`OWNER/REPO/FILE` when the file's name has no quantization or two files share one).
 *
 * Names are sorted; two models of one name: the first found is kept, and the caller is told.
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { listCachedModels } from "../../hub/cache.ts";
import { quantOfName } from "../../hub/spec.ts";

export interface FoundModel {
  name: string;
  path: string;
}

const PART = /-(\d{5})-of-\d{5}\.gguf$/i;

/** A GGUF file that is a model's (first) file: not a projector, not a later part. */
function isModelFile(file: string): boolean {
  if (!/\.gguf$/i.test(file) || /mmproj/i.test(basename(file))) return false;
  const part = PART.exec(file);
  return part === null || part[1] === "00001";
}

function modelName(file: string): string {
  return basename(file).replace(PART, "").replace(/\.gguf$/i, "");
}

/** The models of `dir` (see above); `onDuplicate` hears of a name found twice. */
export function scanModelsDir(dir: string, onDuplicate: (name: string, path: string) => void = () => {}): FoundModel[] {
  const found = new Map<string, string>();
  const add = (name: string, path: string) => {
    if (found.has(name)) onDuplicate(name, path);
    else found.set(name, path);
  };
  for (const entry of readdirSync(dir).sort()) {
    const path = join(dir, entry);
    let isDir: boolean;
    try {
      isDir = statSync(path).isDirectory();
    } catch {
      continue; // a dangling link
    }
    if (!isDir) {
      if (isModelFile(entry)) add(modelName(entry), path);
    } else if (!entry.startsWith("models--") && entry !== "hub" && !entry.startsWith(".")) {
      const first = readdirSync(path).sort().find(isModelFile);
      if (first !== undefined) add(entry, join(path, first));
    }
  }
  const hub = existsSync(join(dir, "hub")) ? join(dir, "hub") : dir;
  for (const m of hubModels(hub)) add(m.name, m.path);
  return [...found].map(([name, path]) => ({ name, path })).sort((a, b) => a.name.localeCompare(b.name));
}

/** The GGUF models of a Hugging Face cache at its main snapshots, named OWNER/REPO:QUANT. */
function hubModels(cacheDir: string): FoundModel[] {
  const files = listCachedModels(cacheDir).filter((m) => m.isMain && isModelFile(m.file));
  const quantCount = new Map<string, number>();
  const key = (repo: string, quant: string) => `${repo}:${quant}`;
  for (const m of files) {
    const quant = quantOfName(m.file);
    if (quant !== null) quantCount.set(key(m.repo, quant), (quantCount.get(key(m.repo, quant)) ?? 0) + 1);
  }
  return files.map((m) => {
    const quant = quantOfName(m.file);
    const unique = quant !== null && quantCount.get(key(m.repo, quant)) === 1;
    return { name: unique ? key(m.repo, quant) : `${m.repo}/${modelName(m.file)}`, path: m.path };
  });
}

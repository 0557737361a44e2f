/**
 * A child process of the concurrency test: writes or reads the same block keys as its siblings,
 * over and over, for `seconds`. Writers rewrite every block each round (atomic writes, as the disk
 * tier does); readers load every block through the disk tier and compare it with what it must be.
 * Prints { rounds, found, wrong, rejected } as JSON.
 *
 * argv: role (write | read), cache root, seconds.
 */
import { DiskKVStore } from "../../src/kv-disk/disk-store.ts";
import { encodeBlockFile } from "../../src/kv-disk/block-file.ts";
import { nodeBlockFileOps } from "../../src/kv-disk/file-ops.ts";
import { kvFingerprint } from "../../src/kv-disk/fingerprint.ts";
import { blockFileName } from "../../src/kv-disk/folder.ts";
import { hashBlockTokens, ROOT_PARENT_HASH } from "../../src/kv/block-hash.ts";
import { kvLayout } from "../../src/kv/kv-layout.ts";
import type { KVBlockKey } from "../../src/kv/second-tier.ts";
import { makeConfig } from "../../src/model/config.ts";

const [role, root, seconds] = [process.argv[2]!, process.argv[3]!, Number(process.argv[4])];
const BLOCKS = 8;
const BLOCK_SIZE = 16;
// A layout of 512 KiB blocks: a reader racing a non-atomic writer would see partial files.
const config = makeConfig({ dim: 512, hiddenDim: 512, nLayers: 8, nHeads: 8, nKvHeads: 8, vocabSize: 32, seqLen: 64, sharedClassifier: true });
const layout = kvLayout(config, BLOCK_SIZE);
const fingerprint = kvFingerprint(new Uint8Array(32).fill(7), layout, config, "stress");

const keys: KVBlockKey[] = [];
for (let i = 0; i < BLOCKS; i++) {
  const tokens = Uint32Array.from({ length: BLOCK_SIZE }, (_, t) => i * BLOCK_SIZE + t);
  const parentHash = i === 0 ? ROOT_PARENT_HASH.sha256 : keys[i - 1]!.hash;
  keys.push({ hash: hashBlockTokens(i === 0 ? null : parentHash, tokens, null), parentHash, tokens, extraKeys: new Uint8Array(0), group: 0 });
}
/** The one right content of block i. */
function kvOf(i: number): Uint8Array {
  const kv = new Uint8Array(layout.blockBytes);
  for (let b = 0; b < kv.length; b++) kv[b] = (b * 31 + i * 7) & 0xff;
  return kv;
}
const expected = keys.map((_, i) => kvOf(i));

const store = new DiskKVStore({
  root, fingerprint, layout, writeMode: "through", maxBytes: 1 << 30, modelName: "stress", modelFormat: "test",
});
const end = performance.now() + seconds * 1000;
const counts = { rounds: 0, found: 0, wrong: 0, rejected: 0 };
while (performance.now() < end) {
  for (let i = 0; i < BLOCKS; i++) {
    if (role === "write") {
      await nodeBlockFileOps.writeAtomic(store.dir, blockFileName(keys[i]!.hash), encodeBlockFile(fingerprint.full, keys[i]!, expected[i]!));
      continue;
    }
    const kv = await store.load(keys[i]!);
    if (kv === null) continue;
    counts.found++;
    if (Buffer.compare(kv, expected[i]!) !== 0) counts.wrong++;
  }
  counts.rounds++;
}
counts.rejected = store.stats.blocksRejected;
process.stdout.write(`${JSON.stringify(counts)}\n`);

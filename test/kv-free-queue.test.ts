import { describe, expect, test } from "bun:test";
import { FreeKVCacheBlockQueue, KVCacheBlock } from "../src/kv/index.ts";

function makeBlocks(n: number): KVCacheBlock[] {
  return Array.from({ length: n }, (_, id) => new KVCacheBlock(id));
}

const ids = (queue: FreeKVCacheBlockQueue): number[] => queue.toArray().map((b) => b.blockId);

/** Walks the list both ways and checks every documented invariant against `expected` (head to tail). */
function checkInvariants(queue: FreeKVCacheBlockQueue, blocks: readonly KVCacheBlock[], expected: readonly number[]): void {
  expect(queue.length).toBe(expected.length);
  expect(ids(queue)).toEqual([...expected]);
  const inQueue = new Set(expected);
  for (const block of blocks) {
    if (!inQueue.has(block.blockId)) {
      expect(block.prevFree).toBeNull();
      expect(block.nextFree).toBeNull();
    }
  }
  // Backward walk from the tail sentinel: the last block's next is the tail, whose prev is that block.
  if (expected.length > 0) {
    const first = blocks[expected[0]!]!;
    const last = blocks[expected[expected.length - 1]!]!;
    const head = first.prevFree!;
    const tail = last.nextFree!;
    expect(head.prevFree).toBeNull();
    expect(tail.nextFree).toBeNull();
    const backward: number[] = [];
    for (let node = tail.prevFree; node !== head; node = node!.prevFree) backward.push((node as KVCacheBlock).blockId);
    expect(backward).toEqual([...expected].reverse());
    for (const id of expected) {
      const block = blocks[id]!;
      expect(block.prevFree!.nextFree).toBe(block);
      expect(block.nextFree!.prevFree).toBe(block);
    }
  }
}

describe("FreeKVCacheBlockQueue", () => {
  test("starts in the given order", () => {
    const blocks = makeBlocks(5);
    const queue = new FreeKVCacheBlockQueue(blocks);
    checkInvariants(queue, blocks, [0, 1, 2, 3, 4]);
  });

  test("popLeft takes from the head, append puts at the tail, appendLeft at the head", () => {
    const blocks = makeBlocks(5);
    const queue = new FreeKVCacheBlockQueue(blocks);
    expect(queue.popLeft().blockId).toBe(0);
    expect(queue.popLeft().blockId).toBe(1);
    checkInvariants(queue, blocks, [2, 3, 4]);
    queue.append(blocks[0]!);
    checkInvariants(queue, blocks, [2, 3, 4, 0]);
    queue.appendLeft(blocks[1]!);
    checkInvariants(queue, blocks, [1, 2, 3, 4, 0]);
  });

  test("remove from head, middle and tail", () => {
    const blocks = makeBlocks(6);
    const queue = new FreeKVCacheBlockQueue(blocks);
    queue.remove(blocks[0]!); // head
    checkInvariants(queue, blocks, [1, 2, 3, 4, 5]);
    queue.remove(blocks[3]!); // middle
    checkInvariants(queue, blocks, [1, 2, 4, 5]);
    queue.remove(blocks[5]!); // tail
    checkInvariants(queue, blocks, [1, 2, 4]);
    queue.append(blocks[3]!);
    queue.append(blocks[0]!);
    checkInvariants(queue, blocks, [1, 2, 4, 3, 0]);
    expect(queue.popLeft().blockId).toBe(1);
    checkInvariants(queue, blocks, [2, 4, 3, 0]);
  });

  test("emptying and refilling", () => {
    const blocks = makeBlocks(3);
    const queue = new FreeKVCacheBlockQueue(blocks);
    queue.remove(blocks[1]!);
    queue.popLeft();
    queue.popLeft();
    checkInvariants(queue, blocks, []);
    expect(() => queue.popLeft()).toThrow("empty");
    queue.appendLeft(blocks[2]!);
    queue.append(blocks[0]!);
    checkInvariants(queue, blocks, [2, 0]);
  });

  test("rejects removing a block that is not queued and queueing one twice", () => {
    const blocks = makeBlocks(3);
    const queue = new FreeKVCacheBlockQueue(blocks);
    const popped = queue.popLeft();
    expect(() => queue.remove(popped)).toThrow("not in the free queue");
    expect(() => queue.append(blocks[1]!)).toThrow("already in the free queue");
    expect(() => queue.appendLeft(blocks[2]!)).toThrow("already in the free queue");
    checkInvariants(queue, blocks, [1, 2]);
  });

  test("random operation sequences match a plain array model", () => {
    let seed = 12345;
    const random = (n: number): number => {
      seed = (seed * 1103515245 + 12345) >>> 0;
      return (seed >>> 8) % n;
    };
    for (let round = 0; round < 200; round++) {
      const n = 1 + random(24);
      const blocks = makeBlocks(n);
      const queue = new FreeKVCacheBlockQueue(blocks);
      const model = blocks.map((b) => b.blockId);
      for (let step = 0; step < 60; step++) {
        const outside = blocks.filter((b) => !model.includes(b.blockId));
        const op = random(4);
        if (op === 0 && model.length > 0) {
          expect(queue.popLeft().blockId).toBe(model.shift()!);
        } else if (op === 1 && model.length > 0) {
          const id = model[random(model.length)]!;
          queue.remove(blocks[id]!);
          model.splice(model.indexOf(id), 1);
        } else if (op === 2 && outside.length > 0) {
          const block = outside[random(outside.length)]!;
          queue.append(block);
          model.push(block.blockId);
        } else if (op === 3 && outside.length > 0) {
          const block = outside[random(outside.length)]!;
          queue.appendLeft(block);
          model.unshift(block.blockId);
        }
        checkInvariants(queue, blocks, model);
      }
    }
  });
});

/**
 * Preloaded into a gateway by bench/stream-heap.ts (`bun --preload`): on SIGUSR2 it runs a full
 * collection and writes this thread's heap, by object type, to `$HEAP_DUMP_DIR/heap-<pid>-<n>.json`.
 */
import { heapStats } from "bun:jsc";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.env.HEAP_DUMP_DIR ?? "/tmp";
let dumps = 0;
process.on("SIGUSR2", () => {
  Bun.gc(true);
  const stats = heapStats();
  const dump = { heapBytes: stats.heapSize, extraBytes: stats.extraMemorySize, objects: stats.objectCount, types: stats.objectTypeCounts };
  writeFileSync(join(dir, `heap-${process.pid}-${dumps++}.json`), JSON.stringify(dump));
});

import { describe, expect, test } from "bun:test";
import { fetchUpstreamFile, readTextBounded } from "./upstream.ts";

/** A body of endless 16 KiB chunks of "a", counting how many the reader pulled. */
function endlessBody() {
  const chunk = new TextEncoder().encode("a".repeat(16 * 1024));
  const counter = { pulls: 0, cancelled: false };
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      counter.pulls++;
      controller.enqueue(chunk);
    },
    cancel() {
      counter.cancelled = true;
    },
  }, { highWaterMark: 0 });
  return { response: new Response(body), counter };
}

describe("readTextBounded", () => {
  test("reads a body within the bound whole", async () => {
    const got = await readTextBounded(new Response('{"error":{"message":"busy"}}'), 1024);
    expect(got).toEqual({ text: '{"error":{"message":"busy"}}', truncated: false });
  });

  test("stops at the bound on an endless body, cancels it and keeps exactly the bound", async () => {
    const { response, counter } = endlessBody();
    const got = await readTextBounded(response, 40 * 1024);
    expect(got.truncated).toBe(true);
    expect(got.text.length).toBe(40 * 1024);
    expect(counter.cancelled).toBe(true);
    expect(counter.pulls).toBeLessThanOrEqual(4); // 40 KiB is three 16 KiB chunks, plus at most one read ahead
  });

  test("a body of exactly the bound is not truncated", async () => {
    const got = await readTextBounded(new Response("b".repeat(100)), 100);
    expect(got).toEqual({ text: "b".repeat(100), truncated: false });
  });
});

describe("fetchUpstreamFile", () => {
  test("downloads a file within the bound, and refuses one a byte over it", async () => {
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("p".repeat(100), { headers: { "content-type": "image/png" } }) });
    try {
      const url = `http://127.0.0.1:${server.port}/image.png`;
      const whole = await fetchUpstreamFile(url, { bytesMax: 100, timeoutMs: 5_000 });
      expect("bytes" in whole ? [whole.bytes.byteLength, whole.contentType] : whole).toEqual([100, "image/png"]);
      const over = await fetchUpstreamFile(url, { bytesMax: 99, timeoutMs: 5_000 });
      expect(over).toEqual({ code: "upstream_error", message: "The upstream's file is larger than the limit of 99 bytes.", retryable: false });
    } finally {
      server.stop(true);
    }
  });

  test("a compressed file is bounded by what it unpacks to, not by its declared length", async () => {
    const packed = Bun.gzipSync("z".repeat(1_000_000));
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response(packed, { headers: { "content-encoding": "gzip", "content-length": String(packed.byteLength) } }) });
    try {
      const got = await fetchUpstreamFile(`http://127.0.0.1:${server.port}/image.png`, { bytesMax: 100_000, timeoutMs: 5_000 });
      expect(packed.byteLength).toBeLessThan(100_000);
      expect(got).toEqual({ code: "upstream_error", message: "The upstream's file is larger than the limit of 100000 bytes.", retryable: false });
    } finally {
      server.stop(true);
    }
  });
});

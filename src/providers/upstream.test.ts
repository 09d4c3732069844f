import { describe, expect, test } from "bun:test";
import { until } from "../../test/until.ts";
import { OpenAIStreamDecoder } from "./openai/stream.ts";
import {
  FILE_REDIRECTS_MAX,
  fetchUpstreamFile,
  readTextBounded,
  sendUpstream,
  StreamStalled,
  UpstreamReply,
  UpstreamStream,
  silenceWatch,
} from "./upstream.ts";

/** A body of endless 16 KiB chunks of "a", counting how many the reader pulled. */
function endlessBody() {
  const chunk = new TextEncoder().encode("a".repeat(16 * 1024));
  const counter = { pulls: 0, cancelled: false };
  const body = new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        counter.pulls++;
        controller.enqueue(chunk);
      },
      cancel() {
        counter.cancelled = true;
      },
    },
    { highWaterMark: 0 },
  );
  return { response: new Response(body), counter };
}

describe("sendUpstream: the wait for the reply's headers", () => {
  test("a call past its deadline is aborted as upstream_timeout; a call beside it with a later deadline is answered", async () => {
    let releaseSlow: () => void = () => {};
    const slowReleased = new Promise<void>((resolve) => (releaseSlow = resolve));
    const server = Bun.serve({
      port: 0,
      async fetch(request) {
        if (new URL(request.url).pathname === "/hang") await new Promise(() => {});
        await slowReleased;
        return new Response("{}", { headers: { "content-type": "application/json" } });
      },
    });
    const call = (path: string, timeoutMs: number) =>
      sendUpstream({
        baseUrl: `http://127.0.0.1:${server.port}/`,
        request: { path, body: "{}", headers: { "content-type": "application/json" } },
        requestId: "req_test",
        timeoutMs,
      });
    try {
      const startedMs = performance.now();
      const answered = call("/slow", 5_000);
      const hung = await call("/hang", 150);
      const tookMs = performance.now() - startedMs;
      expect(hung).toMatchObject({ ok: false, failure: { code: "upstream_timeout" } });
      expect(tookMs).toBeGreaterThanOrEqual(150);
      expect(tookMs).toBeLessThan(2_000);
      releaseSlow();
      const reply = await answered;
      expect(reply.ok).toBe(true);
      if (reply.ok) reply.reply.close("done");
    } finally {
      server.stop(true);
    }
  });
});

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
    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: () => new Response("p".repeat(100), { headers: { "content-type": "image/png" } }),
    });
    try {
      const url = `http://127.0.0.1:${server.port}/image.png`;
      const whole = await fetchUpstreamFile(url, { backendUrl: url, bytesMax: 100, timeoutMs: 5_000 });
      expect("bytes" in whole ? [whole.bytes.byteLength, whole.contentType] : whole).toEqual([100, "image/png"]);
      const over = await fetchUpstreamFile(url, { backendUrl: url, bytesMax: 99, timeoutMs: 5_000 });
      expect(over).toEqual({
        code: "upstream_error",
        message: "The upstream's file is larger than the limit of 99 bytes.",
        retryable: false,
      });
    } finally {
      server.stop(true);
    }
  });

  test("a compressed file is bounded by what it unpacks to, not by its declared length", async () => {
    const packed = Bun.gzipSync("z".repeat(1_000_000));
    const server = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: () => new Response(packed, { headers: { "content-encoding": "gzip", "content-length": String(packed.byteLength) } }),
    });
    try {
      const got = await fetchUpstreamFile(`http://127.0.0.1:${server.port}/image.png`, {
        backendUrl: `http://127.0.0.1:${server.port}/v1`,
        bytesMax: 100_000,
        timeoutMs: 5_000,
      });
      expect(packed.byteLength).toBeLessThan(100_000);
      expect(got).toEqual({
        code: "upstream_error",
        message: "The upstream's file is larger than the limit of 100000 bytes.",
        retryable: false,
      });
    } finally {
      server.stop(true);
    }
  });
});

describe("fetchUpstreamFile: only the backend's origin, public https and data:", () => {
  /** A backend on loopback: /a.png is the image, /hop/N redirects N more times, /to?url= redirects there. */
  const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 1, 2, 3]);
  let hits: string[] = [];
  const backend = () =>
    Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch(req) {
        const url = new URL(req.url);
        hits.push(url.pathname);
        if (url.pathname === "/a.png") return new Response(png, { headers: { "content-type": "image/png" } });
        const hop = /^\/hop\/(\d+)$/.exec(url.pathname);
        if (hop) return Response.redirect(Number(hop[1]) === 0 ? "/a.png" : `/hop/${Number(hop[1]) - 1}`, 302);
        if (url.pathname === "/to") return Response.redirect(url.searchParams.get("url")!, 307);
        return new Response("no", { status: 404 });
      },
    });
  const refused = (why: string) => ({
    code: "upstream_error" as const,
    message: `The upstream's file URL was refused: ${why}.`,
    retryable: false,
  });
  const notPublic = "the URL's address is not a public one";

  async function withBackend(run: (origin: string) => Promise<void>) {
    hits = [];
    const server = backend();
    try {
      await run(`http://127.0.0.1:${server.port}`);
    } finally {
      server.stop(true);
    }
  }
  const get = (url: string, origin: string) => fetchUpstreamFile(url, { backendUrl: `${origin}/v1`, bytesMax: 1_000, timeoutMs: 5_000 });

  test("the backend's own origin, private as it is, with redirects inside it", () =>
    withBackend(async (origin) => {
      expect(await get(`${origin}/hop/2`, origin)).toEqual({ bytes: png, contentType: "image/png" });
      expect(hits).toEqual(["/hop/2", "/hop/1", "/hop/0", "/a.png"]);
    }));

  test(`more than ${FILE_REDIRECTS_MAX} redirects are refused`, () =>
    withBackend(async (origin) => {
      expect(await get(`${origin}/hop/${FILE_REDIRECTS_MAX}`, origin)).toEqual(refused(`more than ${FILE_REDIRECTS_MAX} redirects`));
      expect(hits).not.toContain("/a.png");
    }));

  test("file:, loopback and link-local URLs are refused without a connection", () =>
    withBackend(async (origin) => {
      const port = new URL(origin).port;
      expect(await get("file:///proc/self/environ", origin)).toEqual(
        refused("file: URLs are not fetched (only https, or the backend's own origin)"),
      );
      expect(await get(`https://127.0.0.1:${port}/a.png`, origin)).toEqual(refused(notPublic));
      expect(await get(`http://localhost:${port}/a.png`, origin)).toEqual(
        refused("http: URLs are not fetched (only https, or the backend's own origin)"),
      );
      expect(await get(`https://localhost:${port}/a.png`, origin)).toEqual(
        refused("the URL's host resolves to an address that is not a public one"),
      );
      expect(await get("https://169.254.169.254/latest/meta-data/", origin)).toEqual(refused(notPublic));
      expect(hits).toEqual([]);
    }));

  test("a redirect from the backend's origin to a private address is refused at that hop", () =>
    withBackend(async (origin) => {
      const cases: [string, string][] = [
        [`https://127.0.0.1:${new URL(origin).port}/a.png`, notPublic],
        [`https://localhost:${new URL(origin).port}/a.png`, "the URL's host resolves to an address that is not a public one"],
        ["https://[::ffff:127.0.0.1]/a.png", notPublic],
        ["file:///etc/passwd", "file: URLs are not fetched (only https, or the backend's own origin)"],
        ["data:image/png;base64,iVBORw==", "data: URLs are not fetched (only https, or the backend's own origin)"],
      ];
      for (const [to, why] of cases) expect(await get(`${origin}/to?url=${encodeURIComponent(to)}`, origin)).toEqual(refused(why));
      expect(hits).toEqual(Array(cases.length).fill("/to"));
    }));

  test("a host name is resolved once, by the lookup given, and judged by its answer", async () => {
    const asked: string[] = [];
    const got = await fetchUpstreamFile("https://images.example/a.png", {
      backendUrl: "http://10.0.0.5/v1",
      bytesMax: 1_000,
      timeoutMs: 5_000,
      lookup: async (host) => (asked.push(host), [{ address: "127.0.0.1", family: 4 }]),
    });
    expect(got).toEqual(refused("the URL's host resolves to an address that is not a public one"));
    expect(asked).toEqual(["images.example"]);
  });

  test("a lookup that never answers is bounded by the download's time", async () => {
    const got = await fetchUpstreamFile("https://slow.example/a.png", {
      backendUrl: "http://10.0.0.5/v1",
      bytesMax: 1_000,
      timeoutMs: 100,
      lookup: () => new Promise(() => {}),
    });
    expect(got).toMatchObject({ code: "upstream_timeout" });
  });

  test("a data: URL is decoded in-process, within the byte bound", async () => {
    const url = `data:image/png;base64,${Buffer.from(png).toString("base64")}`;
    expect(await fetchUpstreamFile(url, { backendUrl: "http://10.0.0.5/v1", bytesMax: 1_000, timeoutMs: 5_000 })).toEqual({
      bytes: png,
      contentType: "image/png",
    });
    expect(await fetchUpstreamFile(url, { backendUrl: "http://10.0.0.5/v1", bytesMax: 6, timeoutMs: 5_000 })).toMatchObject({
      message: "The upstream's file is larger than the limit of 6 bytes.",
    });
  });
});

describe("UpstreamStream: the silence of open streams", () => {
  /** A reply whose body sends `first`, then nothing until the test pushes more or closes it. */
  function silentReply(first: string) {
    let push!: (text: string) => void;
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(first));
        push = (text) => controller.enqueue(new TextEncoder().encode(text));
      },
      cancel() {
        cancelled = true;
      },
    });
    const reply = new UpstreamReply(new Response(body), new AbortController(), () => {});
    return { reply, push: (text: string) => push(text), cancelled: () => cancelled };
  }
  const chunk = (n: number) => `data: {"choices":[{"index":0,"delta":{"content":"t${n}"}}]}\n\n`;

  test("keep-alives every interval of silence, none while data flows; a stall ends the read and says so", async () => {
    const { reply, push, cancelled } = silentReply(chunk(0));
    const keepAlives: number[] = [];
    const startedMs = performance.now();
    const upstream = new UpstreamStream(reply, new OpenAIStreamDecoder(), { keepAliveMs: 60, stallMsMax: 400 }, () =>
      keepAlives.push(performance.now() - startedMs),
    );
    expect(silenceWatch().streams).toBe(1);
    const first = await upstream.read();
    expect(first.done).toBe(false);
    expect(upstream.piece(first.value!).frames.map((f) => f.text)).toEqual(["t0"]);
    // Data every 20 ms for 200 ms: never silent for a keep-alive interval (the pace is the behaviour under test).
    for (let n = 1; n <= 10; n++) {
      await Bun.sleep(20);
      push(chunk(n));
      const read = await upstream.read();
      upstream.piece(read.value!);
    }
    expect(keepAlives).toEqual([]);
    // Then silence: keep-alives about every 60 ms until the stall at 400 ms ends the pending read.
    const read = await upstream.read();
    expect(read.done).toBe(true);
    expect(() => upstream.ended()).toThrow(StreamStalled);
    expect(cancelled()).toBe(true);
    expect(keepAlives.length).toBeGreaterThanOrEqual(4);
    expect(keepAlives.length).toBeLessThanOrEqual(7);
    expect(silenceWatch().streams).toBe(0);
    upstream.close();
  });

  test("two streams with their own timings are watched apart; a closed one is no longer watched", async () => {
    const slow = silentReply(chunk(0));
    const fast = silentReply(chunk(0));
    const seen = { slow: 0, fast: 0 };
    const slowStream = new UpstreamStream(
      slow.reply,
      new OpenAIStreamDecoder(),
      { keepAliveMs: 10_000, stallMsMax: 60_000 },
      () => seen.slow++,
    );
    const fastStream = new UpstreamStream(
      fast.reply,
      new OpenAIStreamDecoder(),
      { keepAliveMs: 50, stallMsMax: 60_000 },
      () => seen.fast++,
    );
    expect(silenceWatch().streams).toBe(2);
    // Each has read its first chunk and waits for the next: silent from then on.
    for (const stream of [slowStream, fastStream]) stream.piece((await stream.read()).value!);
    // (Closing them below releases the body with these reads pending: they reject, as expected.)
    slowStream.read().catch(() => {});
    fastStream.read().catch(() => {});
    await until(() => seen.fast >= 3, { what: "three keep-alives of the fast stream" });
    expect(seen.slow).toBe(0);
    fastStream.close();
    slowStream.close();
    expect(silenceWatch().streams).toBe(0);
    expect(slow.cancelled() || fast.cancelled()).toBe(false);
  });

  test("time away from read() (a slow client, the meter) is not silence: no keep-alive, no stall", async () => {
    const { reply, push } = silentReply(chunk(0));
    const keepAlives: number[] = [];
    const upstream = new UpstreamStream(reply, new OpenAIStreamDecoder(), { keepAliveMs: 50, stallMsMax: 150 }, () => keepAlives.push(1));
    const first = await upstream.read();
    upstream.piece(first.value!);
    push(chunk(1));
    // The behaviour under test: the upstream goes on while its reader is busy elsewhere for twice the stall bound.
    await Bun.sleep(300);
    expect(keepAlives).toEqual([]);
    const next = await upstream.read();
    expect(next.done).toBe(false);
    expect(upstream.piece(next.value!).frames.map((f) => f.text)).toEqual(["t1"]);
    upstream.close();
  });

  test("the watch ticks as often as its most demanding open stream needs, and stops with the last", async () => {
    const opened = (keepAliveMs: number) =>
      new UpstreamStream(silentReply(chunk(0)).reply, new OpenAIStreamDecoder(), { keepAliveMs, stallMsMax: 60_000 }, () => {});
    const slow = opened(10_000);
    expect(silenceWatch().everyMs).toBe(1_000);
    const fast = opened(50);
    expect(silenceWatch().everyMs).toBe(5);
    fast.close();
    expect(silenceWatch().everyMs).toBe(1_000);
    slow.close();
    expect(silenceWatch().everyMs).toBe(0);
  });

  test("a read after the end of the body says done without waiting", async () => {
    const reply = new UpstreamReply(new Response(chunk(0)), new AbortController(), () => {});
    const upstream = new UpstreamStream(reply, new OpenAIStreamDecoder(), { keepAliveMs: 50, stallMsMax: 100 }, () => {});
    const first = await upstream.read();
    expect(first.done).toBe(false);
    expect((await upstream.read()).done).toBe(true);
    expect(() => upstream.ended()).not.toThrow();
    upstream.close();
    expect(silenceWatch().streams).toBe(0);
  });
});

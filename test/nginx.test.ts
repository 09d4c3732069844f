/**
 * Behind a proxy, as docs/cluster.md configures it: Debian's nginx and HAProxy each run the block
 * read out of docs/cluster.md itself (only the upstream's port and the listen address replaced,
 * each replacement checked) in front of a test gateway with TRUSTED_PROXIES=127.0.0.1. Clients
 * on distinct loopback addresses (curl's --interface: Bun's fetch cannot pick a source address)
 * are seen as themselves: a key's address allowlist, the per-address sign-in limit from 30
 * addresses, a session's address, an IPv6 client, forged headers, and a stream flowing event by
 * event. Without /usr/sbin/nginx (/usr/sbin/haproxy) that suite is skipped LOUDLY, with a count
 * (.ci/run installs nginx-light and haproxy). The same rules with the headers sent straight to
 * a gateway run everywhere.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX } from "../src/accountArea/otp.ts";
import { startSmsSimulator, type SmsSimulator } from "../src/sim/sms.ts";
import { SETUP_MS_MAX, startTestGateway, type TestGateway } from "./helpers.ts";
import { until } from "./until.ts";

const SMS_KEY = "proxy-sms-key";
const TEMPLATE = "darvaze-otp";
/** Source addresses that ask a sign-in code each: more than the per-address limit. */
const SOURCE_ADDRESSES = 30;
/** How long the generated events of a stream may take to come through a proxy. */
const STREAM_MS_MAX = 15_000;
/** How long a proxy may take to answer after it starts (a loaded machine). */
const PROXY_START_MS_MAX = 15_000;

/** A block of docs/cluster.md (```nginx, ```haproxy), each replacement of the test's ports checked to still match it. */
function docsBlock(language: string, replacements: [RegExp, string][]): string {
  const doc = readFileSync(join(import.meta.dir, "../docs/cluster.md"), "utf8");
  let block = new RegExp(`\`\`\`${language}\n([\\s\\S]*?)\`\`\``).exec(doc)?.[1];
  if (!block) throw new Error(`docs/cluster.md has no ${language} block`);
  for (const [pattern, by] of replacements) {
    if (!pattern.test(block))
      throw new Error(`docs/cluster.md's ${language} block no longer matches ${pattern}: update test/nginx.test.ts`);
    block = block.replace(pattern, by);
  }
  return block;
}

/** A proxy as docs/cluster.md configures it, run in the foreground with every path in a folder of its own. */
interface ProxyKind {
  name: string;
  binary: string;
  /** The Debian package that has it. */
  debian: string;
  /** The docs' block (```nginx) and its listen line, replaced by the test's addresses. */
  block: string;
  listen: [RegExp, (port: number) => string];
  /** The whole configuration file around the docs' block. */
  config(dir: string, block: string): string;
  args(dir: string, configFile: string): string[];
}

const NGINX: ProxyKind = {
  name: "nginx",
  binary: "/usr/sbin/nginx",
  debian: "nginx-light",
  block: "nginx",
  listen: [/listen 8080;/, (port) => `listen 127.0.0.1:${port}; listen [::1]:${port};`],
  config: (dir, block) => `${process.getuid?.() === 0 ? "user root;\n" : ""}worker_processes 1;
pid ${dir}/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
${block}
}
`,
  args: (dir, configFile) => ["-p", dir, "-c", configFile, "-g", "daemon off;"],
};

const HAPROXY: ProxyKind = {
  name: "HAProxy",
  binary: "/usr/sbin/haproxy",
  debian: "haproxy",
  block: "haproxy",
  listen: [/bind :8080/, (port) => `bind 127.0.0.1:${port}\n    bind [::1]:${port}`],
  config: (_, block) => block,
  args: (_, configFile) => ["-db", "-f", configFile],
};

/** Writes `proxy`'s configuration into `dir` (the docs' nodes all the gateway at `upstreamPort`) and gives the command that runs it. */
function proxyCommand(proxy: ProxyKind, dir: string, upstreamPort: number, listenPort: number): string[] {
  const [listen, listenAt] = proxy.listen;
  const block = docsBlock(proxy.block, [
    [/127\.0\.0\.1:808[1-3]/g, `127.0.0.1:${upstreamPort}`],
    [listen, listenAt(listenPort)],
  ]);
  const file = join(dir, `${proxy.block}.conf`);
  writeFileSync(file, proxy.config(dir, block));
  return [proxy.binary, ...proxy.args(dir, file)];
}

/** Ports tried for one free on both 127.0.0.1 and ::1. */
const FREE_PORT_TRIES_MAX = 20;

/** A port free on both 127.0.0.1 and ::1 just now. */
function freePort(): number {
  for (let i = 0; i < FREE_PORT_TRIES_MAX; i++) {
    const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = probe.port;
    probe.stop(true);
    try {
      Bun.listen({ hostname: "::1", port, socket: { data() {} } }).stop(true);
      return port;
    } catch {}
  }
  throw new Error(`no port free on both 127.0.0.1 and ::1 in ${FREE_PORT_TRIES_MAX} tries (is IPv6 loopback up?)`);
}

interface Curled {
  status: number;
  body: any;
  headers: string;
}

/** One request by curl from the source address `from`. */
async function curl(
  from: string,
  url: string,
  options: { method?: string; headers?: Record<string, string>; body?: unknown } = {},
): Promise<Curled> {
  const args = ["curl", "-sS", "-g", "--interface", from, "-X", options.method ?? "GET", "-D", "-", "-o", "-", "-w", "\n%{http_code}"];
  for (const [name, value] of Object.entries(options.headers ?? {})) args.push("-H", `${name}: ${value}`);
  if (options.body !== undefined) args.push("-H", "content-type: application/json", "--data-binary", JSON.stringify(options.body));
  args.push(url);
  const proc = Bun.spawn(args, { stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) throw new Error(`curl ${url} from ${from} failed (${code}): ${err}`);
  const statusAt = out.lastIndexOf("\n");
  const split = out.indexOf("\r\n\r\n");
  const text = out.slice(split + 4, statusAt);
  let body: any = text;
  try {
    body = JSON.parse(text);
  } catch {}
  return { status: Number(out.slice(statusAt + 1)), body, headers: out.slice(0, split) };
}

/** A gateway that trusts 127.0.0.1 (the proxy, and the test's own fetch) and sends sign-in codes to an SMS simulator. */
async function trustingGateway(extra: Record<string, string> = {}): Promise<{ sms: SmsSimulator; t: TestGateway }> {
  const sms = await startSmsSimulator({ apiKey: SMS_KEY, template: TEMPLATE });
  const t = await startTestGateway({
    TRUSTED_PROXIES: "127.0.0.1",
    SMS_SENDER: "kavenegar",
    KAVENEGAR_API_KEY: SMS_KEY,
    KAVENEGAR_TEMPLATE: TEMPLATE,
    KAVENEGAR_URL: sms.url,
    ...extra,
  });
  return { sms, t };
}

const phone = (i: number) => `0935${String(i).padStart(7, "0")}`;

// biome-ignore lint/suspicious/noConfusingVoidType: the shape of bun:test's own test function
type It = (name: string, fn: () => void | Promise<unknown>, timeoutMs?: number) => void;

/** `describe` for tests that need `proxy`; without it they are skipped LOUDLY, with their count. */
function withProxy(proxy: ProxyKind, name: string, body: (it: It) => void): void {
  if (existsSync(proxy.binary)) return describe(name, () => body(test));
  describe.skip(name, () => {
    let count = 0;
    body((testName, fn, timeoutMs) => {
      count++;
      test.skip(testName, fn, timeoutMs);
    });
    process.stderr.write(
      `\n*** SKIPPED ${count} test(s) in "${name}": they need ${proxy.binary} (apt-get install -y ${proxy.debian}; .ci/run installs it) ***\n\n`,
    );
  });
}

/** The suite behind one proxy, as docs/cluster.md configures it. */
function behind(proxy: ProxyKind): void {
  withProxy(proxy, `behind ${proxy.name}, as docs/cluster.md configures it`, (it) => suiteBehind(proxy, it));
}

function suiteBehind(proxy: ProxyKind, it: It): void {
  let sms: SmsSimulator;
  let t: TestGateway;
  let running: Subprocess;
  let dir: string;
  let proxied: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "darvaze-proxy-"));
    const port = freePort();
    proxied = `http://127.0.0.1:${port}`;
    ({ sms, t } = await trustingGateway({ PUBLIC_URL: proxied }));
    running = Bun.spawn(proxyCommand(proxy, dir, Number(new URL(t.url).port), port), { stdout: "inherit", stderr: "inherit" });
    await until(
      async () => {
        if (running.exitCode !== null) throw new Error(`${proxy.name} exited ${running.exitCode} (its errors are above)`);
        return (await fetch(`${proxied}/health`).catch(() => null))?.status === 200;
      },
      { msMax: PROXY_START_MS_MAX, what: `${proxy.name} answering /health`, pollMs: 50 },
    );
  }, SETUP_MS_MAX);

  afterAll(async () => {
    if (running && running.exitCode === null) {
      running.kill("SIGTERM");
      await running.exited;
    }
    await t?.stop();
    await sms?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  }, SETUP_MS_MAX);

  /** What a browser on the console's page sends (its origin is PUBLIC_URL's). */
  const fromPage = () => ({ origin: proxied, "sec-fetch-site": "same-origin" });
  const otp = (from: string, i: number) =>
    curl(from, `${proxied}/console/api/otp`, { method: "POST", headers: fromPage(), body: { phone: phone(i) } });

  it("a key allowed 127.0.0.7/32 is admitted for the client at 127.0.0.7 and refused from 127.0.0.8", async () => {
    const { key } = await t.fundedKey(10, { allowed_ips: ["127.0.0.7/32"] });
    const auth = { authorization: `Bearer ${key}` };
    expect((await curl("127.0.0.7", `${proxied}/v1/models`, { headers: auth })).status).toBe(200);
    const refused = await curl("127.0.0.8", `${proxied}/v1/models`, { headers: auth });
    expect([refused.status, refused.body.error.code]).toEqual([403, "permission_denied"]);
    expect(refused.body.error.message).toContain("127.0.0.8");
  });

  it(`sign-in codes from ${SOURCE_ADDRESSES} addresses all go out; one address is still held to its ${OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX} an hour`, async () => {
    for (let i = 0; i < SOURCE_ADDRESSES; i++) {
      const sent = await otp(`127.0.1.${i + 1}`, i);
      expect([i, sent.status]).toEqual([i, 202]);
    }
    for (let i = 0; i < OTP_SENDS_PER_ADDRESS_PER_HOUR_MAX; i++) expect((await otp("127.0.2.1", 100 + i)).status).toBe(202);
    const over = await otp("127.0.2.1", 200);
    expect([over.status, over.body.error.code]).toEqual([429, "code_resend_limited"]);
  }, 60_000);

  it("a session made through the proxy carries its client's address", async () => {
    const from = "127.0.3.9";
    const sent = await otp(from, 300);
    expect(sent.status).toBe(202);
    const headers = fromPage();
    const signed = await curl(from, `${proxied}/console/api/sign-in`, {
      method: "POST",
      headers,
      body: { phone: phone(300), code_id: sent.body.code_id, code: sms.lastCode(phone(300)) },
    });
    expect(signed.status).toBe(200);
    const cookie = /set-cookie: ([^;]+)/i.exec(signed.headers)![1]!;
    const sessions = await curl("127.0.3.10", `${proxied}/console/api/sessions`, { headers: { ...headers, cookie } });
    expect(sessions.body.data.map((s: { client_address: string }) => s.client_address)).toEqual([from]);
  });

  it("an IPv6 client (the proxy on [::1] too) is seen as ::1", async () => {
    const { key } = await t.fundedKey(10, { allowed_ips: ["::1/128"] });
    const auth = { authorization: `Bearer ${key}` };
    const port = new URL(proxied).port;
    expect((await curl("::1", `http://[::1]:${port}/v1/models`, { headers: auth })).status).toBe(200);
    const refused = await curl("127.0.0.7", `${proxied}/v1/models`, { headers: auth });
    expect([refused.status, refused.body.error.message]).toEqual([403, expect.stringContaining("127.0.0.7")]);
  });

  it("forged X-Forwarded-For entries are never read: through the proxy they stand left of its own, and straight to the node the peer is not trusted", async () => {
    const { key } = await t.fundedKey(10, { allowed_ips: ["127.0.0.7/32"] });
    const forged = { authorization: `Bearer ${key}`, "x-forwarded-for": "127.0.0.7" };
    const viaNginx = await curl("127.0.0.8", `${proxied}/v1/models`, { headers: forged });
    expect([viaNginx.status, viaNginx.body.error.message]).toEqual([403, expect.stringContaining("127.0.0.8")]);
    const direct = await curl("127.0.0.8", `${t.url}/v1/models`, { headers: forged });
    expect([direct.status, direct.body.error.message]).toEqual([403, expect.stringContaining("127.0.0.8")]);
  });

  it("a stream flows through event by event: what the upstream generated arrives while it generates nothing more", async () => {
    const sim = t.sim!;
    const before = { ...sim.options };
    // The upstream sends 3 tokens 50 ms apart, then goes silent with the connection open.
    Object.assign(sim.options, { itlMs: 50, outputTokens: 8, stallAfterChunks: 3 });
    const { key } = await t.fundedKey(10_000);
    const aborter = new AbortController();
    try {
      const response = await fetch(`${proxied}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "gpt-4o-mini", stream: true, messages: [{ role: "user", content: "hi" }] }),
        signal: aborter.signal,
      });
      expect(response.status).toBe(200);
      const reader = response.body!.getReader();
      const decoder = new TextDecoder();
      let text = "";
      const contentEvents = () =>
        text.split("\n\n").filter((event) => event.startsWith("data: {") && JSON.parse(event.slice(6)).choices?.[0]?.delta?.content).length;
      // A buffering proxy holds the events back while the upstream is silent: the read would never return.
      const deadline = Bun.sleep(STREAM_MS_MAX).then(() => null);
      while (contentEvents() < 3) {
        const read = await Promise.race([reader.read(), deadline]);
        if (read === null || read.done)
          throw new Error(`after ${STREAM_MS_MAX} ms through ${proxy.name}, ${contentEvents()} of the 3 generated events: ${text}`);
        text += decoder.decode(read.value, { stream: true });
      }
      expect(text).not.toContain("[DONE]");
      // All the upstream made so far, and it is still holding the stream open, silent.
      expect(sim.log.inFlight).toBe(1);
    } finally {
      aborter.abort();
      Object.assign(sim.options, before);
    }
  });
}

behind(NGINX);
behind(HAPROXY);

describe("trusted proxy headers, sent straight to the gateway", () => {
  let sms: SmsSimulator;
  let t: TestGateway;

  beforeAll(async () => {
    ({ sms, t } = await trustingGateway());
  }, SETUP_MS_MAX);

  afterAll(async () => {
    await t?.stop();
    await sms?.stop();
  }, SETUP_MS_MAX);

  test("from the trusted peer an IPv6 or IPv4-mapped client is the one forwarded; from another peer the header is ignored", async () => {
    const { key } = await t.fundedKey(10, { allowed_ips: ["2001:db8::/64", "203.0.113.7"] });
    const call = (from: string, forwardedFor: string) =>
      curl(from, `${t.url}/v1/models`, { headers: { authorization: `Bearer ${key}`, "x-forwarded-for": forwardedFor } });
    expect((await call("127.0.0.1", "198.51.100.1, 2001:DB8:0::7, 127.0.0.1")).status).toBe(200);
    expect((await call("127.0.0.1", "::ffff:203.0.113.7")).status).toBe(200);
    const outside = await call("127.0.0.1", "2001:db8:1:0:0:0:0:7");
    expect([outside.status, outside.body.error.message]).toEqual([403, expect.stringContaining("2001:db8:1::7")]);
    const untrusted = await call("127.0.0.9", "2001:db8::7");
    expect([untrusted.status, untrusted.body.error.message]).toEqual([403, expect.stringContaining("127.0.0.9")]);
  });

  test("a request without Host (a health check over HTTP/1.0, HAProxy's default) is a 400 in the error shape, not a 500", async () => {
    const proc = Bun.spawn(["curl", "-sS", "--http1.0", "-H", "Host:", "-w", "\n%{http_code}", `${t.url}/ready`], { stdout: "pipe" });
    const [out] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
    const [body, status] = [out.slice(0, out.lastIndexOf("\n")), out.slice(out.lastIndexOf("\n") + 1)];
    expect([status, JSON.parse(body).error.code]).toEqual(["400", "invalid_request"]);
  });

  test("X-Forwarded-Proto from the trusted peer makes the console's origin https (and its cookie Secure); from another peer it is ignored", async () => {
    const origin = `https://${new URL(t.url).host}`;
    const headers = { origin, "sec-fetch-site": "same-origin", "x-forwarded-proto": "https" };
    const sent = await curl("127.0.0.1", `${t.url}/console/api/otp`, { method: "POST", headers, body: { phone: phone(1) } });
    expect(sent.status).toBe(202);
    const signed = await curl("127.0.0.1", `${t.url}/console/api/sign-in`, {
      method: "POST",
      headers,
      body: { phone: phone(1), code_id: sent.body.code_id, code: sms.lastCode(phone(1)) },
    });
    expect(signed.status).toBe(200);
    expect(signed.headers).toMatch(/set-cookie: __Host-dvz_session=[^;]+;.*; Secure/i);
    const untrusted = await curl("127.0.0.9", `${t.url}/console/api/otp`, { method: "POST", headers, body: { phone: phone(2) } });
    expect([untrusted.status, untrusted.body.error.code]).toEqual([403, "cross_site_refused"]);
  });
});

/**
 * `bun run demo` as a newcomer runs it: a fresh data folder, the embedded defaults, and the
 * curl line it prints, run as printed, and the simulated bank page it prints. A second demo on the same folder must refuse to start.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { writePoolsFile } from "./helpers.ts";

const READY_MS_MAX = 60_000;
const folder = mkdtempSync(join(tmpdir(), "darvaze-demo-"));
const env: Record<string, string> = { ...(process.env as Record<string, string>), DARVAZE_DATA: folder, PORT: "0" };
delete env.DATABASE_URL;
delete env.NATS_URL;
delete env.ADMIN_TOKEN;
delete env.KEY_PEPPER;

const demo = Bun.spawn(["bun", "run", "demo"], { cwd: join(import.meta.dir, ".."), env, stdout: "pipe", stderr: "pipe" });

afterAll(() => {
  demo.kill();
  rmSync(folder, { recursive: true, force: true });
});

async function readUntil(stream: ReadableStream<Uint8Array>, marker: string, timeoutMs: number): Promise<string> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  const deadline = Date.now() + timeoutMs;
  while (!text.includes(marker)) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new Error(`demo printed no "${marker}" within ${timeoutMs} ms:\n${text}`);
    const next = await Promise.race([reader.read(), Bun.sleep(remaining).then(() => null)]); // the read's bound, not a wait
    if (!next || next.done) throw new Error(`demo output ended before "${marker}":\n${text}`);
    text += decoder.decode(next.value, { stream: true });
  }
  reader.releaseLock();
  return text;
}

test(
  "bun run demo prints a key that works with the curl it prints",
  async () => {
    const output = await readUntil(demo.stdout, "Press Ctrl+C", READY_MS_MAX);
    const lines = output.split("\n");
    const baseUrl = lines.find((l) => l.startsWith("export OPENAI_BASE_URL="))!.split("=")[1]!;
    const key = lines.find((l) => l.startsWith("export OPENAI_API_KEY="))!.split("=")[1]!;
    expect(baseUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    expect(key).toMatch(/^sk-dvz-[0-9A-Za-z]{40}$/);

    const curl = lines.find((l) => l.startsWith("curl -s") && l.includes("/chat/completions"))!;
    const run = Bun.spawnSync(["sh", "-c", curl]);
    expect(run.exitCode).toBe(0);
    const reply = JSON.parse(run.stdout.toString()) as {
      object: string;
      choices: { message: { content: string } }[];
      usage: { completion_tokens: number };
    };
    expect(reply.object).toBe("chat.completion");
    expect(reply.choices[0]!.message.content.length).toBeGreaterThan(0);
    expect(reply.usage.completion_tokens).toBeGreaterThan(0);

    const credits = lines.find((l) => l.startsWith("curl -s") && l.includes("/credits"))!;
    const balance = JSON.parse(Bun.spawnSync(["sh", "-c", credits]).stdout.toString()) as { balance_micro_toman: string };
    expect(BigInt(balance.balance_micro_toman)).toBeLessThan(1_000_000n * 1_000_000n);

    // The wallet was funded through the simulated Zarinpal, and a second bank page waits for a browser.
    expect(output).toContain("funded by a paid top-up of 1000000 toman through the simulated Zarinpal");
    const bankPage = lines.find((l) => /^http:\/\/127\.0\.0\.1:\d+\/pg\/StartPay\/A\d{35}$/.test(l))!;
    const page = await fetch(bankPage);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("500,000 rial");

    // The demo's upstreams answer at a human pace: a stream's tokens arrive spread out (40 ms apart by default).
    const streamed = await fetch(`${baseUrl}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello!" }], max_tokens: 10, stream: true }),
    });
    const arrivals: number[] = [];
    for await (const part of streamed.body!) if (new TextDecoder().decode(part).includes('"content"')) arrivals.push(performance.now());
    expect(arrivals.length).toBeGreaterThan(1);
    expect(arrivals.at(-1)! - arrivals[0]!).toBeGreaterThanOrEqual(200);

    // The account area: its address, and the demo customer signed in with the code the development sender printed.
    const consoleUrl = lines.find((l) => l.startsWith("Account area: "))!.slice("Account area: ".length);
    expect(consoleUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/console\/$/);
    expect(output).toMatch(/Operators' live dashboard: http:\/\/127\.0\.0\.1:\d+\/admin\/dashboard/);
    const origin = new URL(consoleUrl).origin;
    const asked = await fetch(`${origin}/console/api/otp`, {
      method: "POST",
      headers: { origin, "content-type": "application/json" },
      body: JSON.stringify({ phone: "09120000000" }),
    });
    expect(asked.status).toBe(202);
    const { code_id } = (await asked.json()) as { code_id: string };
    const withCode = await readUntil(demo.stdout, "valid 2 minutes", 10_000);
    const code = /SMS to 09120000000: your Darvaze sign-in code is (\d{6})/.exec(withCode)![1]!;
    const signIn = await fetch(`${origin}/console/api/sign-in`, {
      method: "POST",
      headers: { origin, "content-type": "application/json" },
      body: JSON.stringify({ phone: "09120000000", code_id, code }),
    });
    expect(signIn.status).toBe(200);
    const session = (await signIn.json()) as { phone: string };
    expect(session.phone).toBe("+989120000000");
    expect((await fetch(consoleUrl)).headers.get("content-type")).toBe("text/html; charset=utf-8");
  },
  READY_MS_MAX + 10_000,
);

test("a second process on the same data folder refuses to start, saying why", async () => {
  const second = Bun.spawn(["bun", "run", "src/main.ts"], {
    cwd: join(import.meta.dir, ".."),
    env: { ...env, ADMIN_TOKEN: "x".repeat(16), KEY_PEPPER: "y".repeat(32), DARVAZE_CONFIG: writePoolsFile({}) },
    stdout: "pipe",
    stderr: "pipe",
  });
  const code = await second.exited;
  const stderr = await new Response(second.stderr).text();
  expect(code).toBe(1);
  expect(stderr).toContain(`the data folder ${folder} is in use by process`);
});

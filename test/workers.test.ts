/**
 * WORKERS (src/workers.ts): a host's gateway processes on one port, supervised. Two workers serve
 * one port (each counts requests on its own port's /metrics); a worker killed with -9 fails only
 * the requests it had in flight and comes back; SIGTERM drains the host; the embedded mode
 * refuses more than one worker, naming why.
 */
import { expect, test } from "bun:test";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { startSimulator } from "../src/sim/server.ts";
import { ADMIN_TOKEN, freshDatabase, SETUP_MS_MAX } from "./helpers.ts";
import { freePort } from "./natsServer.ts";
import { clusterEnv, gatewayStartFailure } from "./processes.ts";
import { describeWith } from "./services.ts";
import { untilValue } from "./until.ts";

const ROOT = join(import.meta.dir, "..");
const CLIENTS = 4;
const testSecrets = { ADMIN_TOKEN, KEY_PEPPER: "workers-test-pepper-0123456789abcdef0123456789" };

test("the embedded mode refuses WORKERS above 1, naming why", async () => {
  const failed = await gatewayStartFailure({ ...testSecrets, WORKERS: "2", PORT: "0", DATABASE_URL: undefined, NATS_URL: undefined });
  expect(failed.exitCode).toBe(1);
  expect(failed.stderr).toContain("WORKERS");
  expect(failed.stderr).toContain("PGlite");
}, 60_000);

/** The supervisor's log, as it arrives: each line parsed. */
class Log {
  readonly lines: Record<string, unknown>[] = [];
  constructor(child: Subprocess<"ignore", "pipe", "pipe">) {
    void (async () => {
      const decoder = new TextDecoder();
      let rest = "";
      for await (const chunk of child.stderr) {
        rest += decoder.decode(chunk, { stream: true });
        const parts = rest.split("\n");
        rest = parts.pop()!;
        for (const part of parts) if (part.startsWith("{")) this.lines.push(JSON.parse(part));
      }
    })();
  }
  of(event: string): Record<string, unknown>[] {
    return this.lines.filter((line) => line.event === event);
  }
}

describeWith(["nats", "postgres"], "WORKERS=2 on one port", (it) => {
  it("both workers serve the port; one killed fails only its requests in flight and comes back; SIGTERM drains them", async () => {
    const sim = await startSimulator({ itlMs: 1, outputTokens: 8 });
    const database = (await freshDatabase())!;
    const [port, portBase] = [await freePort(), await freePort()];
    const env = { ...process.env, ...clusterEnv(database.url, sim), WORKERS: "2", PORT: String(port), WORKER_PORT_BASE: String(portBase) };
    const host = Bun.spawn(["bun", "run", "src/main.ts"], { cwd: ROOT, env, stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    const log = new Log(host);
    const url = `http://127.0.0.1:${port}`;
    const refusals: string[] = [];
    try {
      await untilValue(() => log.of("workers_listening")[0], { msMax: SETUP_MS_MAX, what: "both workers listening" });
      const admin = (path: string, body: unknown) =>
        fetch(url + path, { method: "POST", headers: { authorization: `Bearer ${ADMIN_TOKEN}` }, body: JSON.stringify(body) }).then(
          (r) => r.json() as Promise<any>,
        );
      const account = await admin("/admin/accounts", { name: "workers" });
      await admin(`/admin/accounts/${account.id}/topups`, { amount_toman: 1_000_000, reference: "workers-seed" });
      const { key } = await admin(`/admin/accounts/${account.id}/keys`, { name: "k" });
      const chat = () =>
        fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hello" }], max_tokens: 8 }),
          keepalive: false, // a new connection each: the kernel spreads them over the workers
        }).then(
          async (r) => {
            const text = await r.text();
            if (r.status !== 200 && refusals.length < 5) refusals.push(`${r.status} ${text.slice(0, 300)}`);
            return r.status;
          },
          () => "failed" as const,
        );
      const statuses: (number | "failed")[] = [];
      await Promise.all(
        Array.from({ length: CLIENTS }, async () => {
          for (let i = 0; i < 15; i++) statuses.push(await chat());
        }),
      );
      expect(
        statuses.filter((s) => s !== 200),
        refusals.join("\n"),
      ).toEqual([]);
      // Each worker counted some of them, on its own port.
      for (const index of [0, 1]) {
        const own = `http://127.0.0.1:${portBase + index}/metrics`;
        const metrics = await (await fetch(own, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })).text();
        expect(metrics).toMatch(/darvaze_requests_total\{[^}]*operation="chat"[^}]*status="200"[^}]*\} [1-9]/);
      }

      // Kill one worker with -9 under load: only what it had in flight may fail, and it comes back.
      const victim = log.of("worker_listening").find((line) => line.worker === 0)!;
      let running = true;
      const outcomes: (number | "failed")[] = [];
      const load = Promise.all(
        Array.from({ length: CLIENTS }, async () => {
          while (running) outcomes.push(await chat());
        }),
      );
      await untilValue(() => outcomes.length > 20 || undefined, { msMax: 30_000, what: "load before the kill" });
      process.kill(victim.pid as number, "SIGKILL");
      const back = await untilValue(() => log.of("worker_listening").find((line) => line.worker === 0 && line.pid !== victim.pid), {
        msMax: SETUP_MS_MAX,
        what: "worker 0 started again",
      });
      const afterBack = outcomes.length;
      await untilValue(() => outcomes.length > afterBack + 20 || undefined, { msMax: 30_000, what: "load after the restart" });
      running = false;
      await load;
      const failed = outcomes.filter((o) => o !== 200);
      process.stdout.write(
        `worker killed under ${CLIENTS} clients: ${outcomes.length} requests, ${failed.length} failed (${failed.join(", ")})\n`,
      );
      // At most the requests in flight on the killed worker (one per client) and the connections the
      // kernel had queued for its socket as it died (a client's next request, sent at once): two per client.
      expect(failed.length).toBeLessThanOrEqual(2 * CLIENTS);
      expect(outcomes.slice(afterBack).every((o) => o === 200)).toBe(true);
      expect(log.of("worker_died")).toHaveLength(1);
      expect((await fetch(`http://127.0.0.1:${portBase}/ready`)).status).toBe(200);
      expect(back.pid).not.toBe(victim.pid);

      host.kill("SIGTERM");
      expect(await host.exited).toBe(0);
      expect(log.of("workers_stopping")).toHaveLength(1);
      await expect(fetch(`${url}/ready`)).rejects.toThrow();
    } finally {
      host.kill("SIGKILL");
      for (const line of log.of("worker_started")) {
        try {
          process.kill(line.pid as number, "SIGKILL");
        } catch {}
      }
      await sim.stop();
      await database.drop();
    }
  }, 180_000);
});

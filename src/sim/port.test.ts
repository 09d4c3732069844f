import { expect, test } from "bun:test";
import { join } from "node:path";
import { startSimulator } from "./server.ts";

test("a second simulator on a busy port fails (no shared port), and its CLI says which port, exit 1", async () => {
  const first = await startSimulator({ port: 0 });
  try {
    expect(await startSimulator({ port: first.port }).catch((error: { code?: string }) => error.code)).toBe("EADDRINUSE");
    const cli = Bun.spawn(["bun", "run", join(import.meta.dir, "main.ts"), "--port", String(first.port)], {
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(await cli.exited).toBe(1);
    expect((await new Response(cli.stderr).text()).trim()).toBe(
      `simulator: port ${first.port} is in use (another simulator?); pass a free --port`,
    );
  } finally {
    await first.stop();
  }
});

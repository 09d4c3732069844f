/**
 * The Python clients' virtual environment: made once per set of pinned requirements (a folder
 * named by their hash under the checkout's gitignored tmp/), with pip installing exactly the
 * pinned files with --no-deps, so nothing is resolved or fetched beyond them. Where Python, venv
 * or pip is missing the tests are skipped loudly (python.test.ts), and CI fails a pass that ran
 * none of them (.ci/run, DARVAZE_PYTHON_TESTS_LOG).
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const HERE = import.meta.dir;
const REQUIREMENTS = ["requirements.txt", "requirements-no-deps.txt"].map((name) => join(HERE, name));
/** The longest pip may take to install the environment (measured: ~30 s on a loaded 2-core machine). */
export const PYTHON_INSTALL_MS_MAX = 600_000;
/** A script's run against the gateway, all its calls included. */
export const PYTHON_SCRIPT_MS_MAX = 180_000;

/** Why Python clients cannot run here, or null when python3 with venv and pip is present. */
export function pythonMissing(): string | null {
  const python = Bun.which("python3");
  if (!python) return "python3 is not installed";
  const probe = Bun.spawnSync([python, "-c", "import venv, ensurepip"], { stdout: "ignore", stderr: "pipe" });
  return probe.exitCode === 0 ? null : `python3 has no venv or ensurepip (${probe.stderr.toString().trim().slice(-200)})`;
}

function folder(): string {
  const hash = createHash("sha256");
  for (const path of REQUIREMENTS) hash.update(readFileSync(path));
  return join(HERE, "..", "..", "tmp", `python-${hash.digest("hex").slice(0, 16)}`);
}

async function run(command: string[], what: string): Promise<void> {
  const child = Bun.spawn(command, { stdout: "pipe", stderr: "pipe", env: { ...process.env, PIP_DISABLE_PIP_VERSION_CHECK: "1" } });
  const timer = setTimeout(() => child.kill(), PYTHON_INSTALL_MS_MAX);
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  clearTimeout(timer);
  if (code !== 0) throw new Error(`${what} failed (exit ${code}):\n${(stdout + stderr).slice(-4_000)}`);
}

/** The environment's python, made and installed first when it is not there yet. */
export async function pythonClients(): Promise<string> {
  const root = folder();
  const python = join(root, "bin", "python");
  const ready = join(root, "installed");
  if (existsSync(ready)) return python;
  rmSync(root, { recursive: true, force: true });
  mkdirSync(root, { recursive: true });
  await run([Bun.which("python3")!, "-m", "venv", root], "python3 -m venv");
  // --retries 0: an index this machine cannot reach answers "no" at once instead of after back-offs.
  const pip = [python, "-m", "pip", "install", "--no-deps", "--retries", "0", "--timeout", "30", "--quiet"];
  await run([...pip, "-r", REQUIREMENTS[0]!], "pip install -r requirements.txt");
  await run([...pip, "-r", REQUIREMENTS[1]!], "pip install -r requirements-no-deps.txt");
  writeFileSync(ready, new Date().toISOString());
  return python;
}

/** One line a client script printed (harness.py). */
export type ScriptLine =
  | { kind: "check"; name: string; ok: true; cost_micro: string }
  | { kind: "check"; name: string; ok: false; error: string; detail: string }
  | { kind: "done" };

export interface ScriptRun {
  lines: ScriptLine[];
  /** What the script wrote besides its JSON lines, and its standard error: shown when it fails. */
  rest: string;
  exitCode: number;
}

/** Runs one client script against a gateway, with the key it should use. */
export async function runClientScript(python: string, script: string, env: Record<string, string>): Promise<ScriptRun> {
  const child = Bun.spawn([python, join(HERE, script)], {
    cwd: HERE,
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, ...env, PYTHONPATH: join(HERE, "stand-ins"), PYTHONUNBUFFERED: "1" },
  });
  const timer = setTimeout(() => child.kill(), PYTHON_SCRIPT_MS_MAX);
  const [stdout, stderr, exitCode] = await Promise.all([
    new Response(child.stdout).text(),
    new Response(child.stderr).text(),
    child.exited,
  ]);
  clearTimeout(timer);
  const lines: ScriptLine[] = [];
  let rest = "";
  for (const line of stdout.split("\n")) {
    if (line.startsWith("{")) lines.push(JSON.parse(line) as ScriptLine);
    else if (line.trim() !== "") rest += `${line}\n`;
  }
  return { lines, rest: (rest + stderr).slice(-8_000), exitCode };
}

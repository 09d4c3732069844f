/** `bun run bench/pg-commit-bare.ts`: a bare program's limit for a batch line's claim on PostgreSQL (DATABASE_URL or the test database): SELECT 1, and an advisory lock + one-row UPDATE in a transaction on an unlogged and on a logged table (the commit's WAL flush), 200 each. bench/RESULTS.md. */
import { SQL } from "bun";
const db = new SQL(process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test");
const time = async (f: () => Promise<unknown>) => {
  const v: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t = performance.now();
    await f();
    v.push(performance.now() - t);
  }
  v.sort((a, b) => a - b);
  const at = (i: number) => (v[i] ?? Number.NaN).toFixed(2);
  return `p50 ${at(100)} p90 ${at(180)} max ${at(199)}`;
};
/** Times an advisory lock + one-row UPDATE + commit on a fresh table of its own, dropped after. */
async function lockUpdateCommit(table: string, unlogged: boolean): Promise<string> {
  await db.unsafe(`CREATE ${unlogged ? "UNLOGGED " : ""}TABLE IF NOT EXISTS ${table} (id int primary key, n int)`);
  await db.unsafe(`INSERT INTO ${table} VALUES (1,0) ON CONFLICT DO NOTHING`);
  const figures = await time(() =>
    db.begin(async (tx) => {
      await tx`SELECT pg_advisory_xact_lock(1)`;
      await tx.unsafe(`UPDATE ${table} SET n = n + 1 WHERE id = 1`);
    }),
  );
  await db.unsafe(`DROP TABLE ${table}`);
  return figures;
}
console.log("select 1:", await time(() => db`SELECT 1`));
console.log("tx lock+update (unlogged table, no WAL):", await lockUpdateCommit("t_bare", true));
console.log("tx lock+update (logged table, commit flush):", await lockUpdateCommit("bare_probe", false));
await db.close();

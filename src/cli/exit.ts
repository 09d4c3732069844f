/**
 * How a CLI command ends, shared by the one-request commands (gw.ts) and the live view (top.ts):
 * its exit code, and the words for a failure. A URL is shown without any user:password in it.
 */

export const EXIT = { ok: 0, refused: 1, usage: 2, unreachable: 3, auditFailed: 4 } as const;

/** The refusal printed when no reply came (exit 3), naming the gateway as the operator gave it. */
export function unreachableText(url: string, reason: string): string {
  return `error: cannot reach the gateway at ${shownUrl(url)} (${reason}); is it running, and are --url / GW_URL right?`;
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The URL without any user:password in it, for messages. */
export function shownUrl(url: string): string {
  const parsed = new URL(url);
  parsed.username = "";
  parsed.password = "";
  return parsed.toString().replace(/\/+$/, "");
}

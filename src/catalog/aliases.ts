/**
 * Vendors' dated model ids, as clients send them, and the catalog model each one names. Claude
 * Code and the vendors' SDKs pin snapshots (`claude-sonnet-4-20250514`, `gpt-4o-2024-08-06`); the
 * catalog prices the model, not the snapshot, so a dated id is served and billed as its model.
 * Listed only where the vendor's snapshot is the model the catalog lists; the catalog's own ids
 * always win.
 */
export const MODEL_ALIASES: ReadonlyMap<string, string> = new Map([
  ["claude-3-5-haiku-20241022", "claude-3-5-haiku"],
  ["claude-3-5-haiku-latest", "claude-3-5-haiku"],
  ["claude-opus-4-20250514", "claude-opus-4"],
  ["claude-opus-4-0", "claude-opus-4"],
  ["claude-sonnet-4-20250514", "claude-sonnet-4"],
  ["claude-sonnet-4-0", "claude-sonnet-4"],
  ["claude-3-7-sonnet-20250219", "claude-3-7-sonnet"],
  ["claude-3-7-sonnet-latest", "claude-3-7-sonnet"],
  ["gpt-4o-2024-05-13", "gpt-4o"],
  ["gpt-4o-2024-08-06", "gpt-4o"],
  ["gpt-4o-2024-11-20", "gpt-4o"],
  ["gpt-4o-mini-2024-07-18", "gpt-4o-mini"],
  ["gpt-4.1-2025-04-14", "gpt-4.1"],
  ["gpt-4.1-mini-2025-04-14", "gpt-4.1-mini"],
  ["gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"],
  ["o3-2025-04-16", "o3"],
  ["o4-mini-2025-04-16", "o4-mini"],
  ["gemini-2.0-flash-001", "gemini-2.0-flash"],
]);

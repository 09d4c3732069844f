/** Between polls of a batch in the tests: its reads are free but within the key's FREE_RPM (120 a minute), as a client's poll must be. */
export const BATCH_POLL_MS = 600;

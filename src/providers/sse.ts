/**
 * The one server-sent-events splitter: every reader of SSE in the gateway uses it (upstream
 * streams of every vendor, the operator CLI's `gw top`, the dashboard page, which loads this file
 * transpiled at /admin/dashboard/sse.js). Text arrives in arbitrary pieces: `event:` and `data:`
 * lines up to a blank line make one event; comments (`:`) and other fields are skipped; CRLF is
 * accepted. The buffer holds at most one unfinished event, bounded by `eventCharsMax`.
 *
 * Keep this file free of imports: the dashboard loads it as is.
 */

/** A single event larger than this is a fault of its sender, not something to buffer forever. */
export const sseEventCharsMax = 16 * 1024 * 1024;

export interface SseEvent {
  event: string | null;
  data: string;
}

export class SseSplitter {
  private buffer = "";
  private event: string | null = null;
  /** The data lines of the event being read, joined by newlines; null before its first. */
  private data: string | null = null;
  private dataChars = 0;
  private readonly eventCharsMax: number;

  constructor(options: { eventCharsMax?: number } = {}) {
    this.eventCharsMax = options.eventCharsMax ?? sseEventCharsMax;
  }

  /** The events completed by this piece of text; throws when one event grows past the bound. */
  push(text: string): SseEvent[] {
    const events: SseEvent[] = [];
    const buffer = this.buffer === "" ? text : this.buffer + text;
    let start = 0;
    let newline: number;
    // Lines are read in place: only a data line's value and an event's name are cut out.
    while ((newline = buffer.indexOf("\n", start)) !== -1) {
      const end = newline > start && buffer.charCodeAt(newline - 1) === 13 ? newline - 1 : newline;
      if (end === start) {
        if (this.data !== null) events.push({ event: this.event, data: this.data });
        this.event = null;
        this.data = null;
        this.dataChars = 0;
      } else if (buffer.startsWith("data:", start)) {
        const data = buffer.slice(buffer.charCodeAt(start + 5) === 32 ? start + 6 : start + 5, end);
        this.data = this.data === null ? data : `${this.data}\n${data}`;
        this.dataChars += data.length;
      } else if (buffer.startsWith("event:", start)) this.event = buffer.slice(start + 6, end).trim();
      start = newline + 1;
    }
    this.buffer = start === buffer.length ? "" : buffer.slice(start);
    if (this.buffer.length + this.dataChars > this.eventCharsMax)
      throw new Error(`a server-sent event exceeds ${this.eventCharsMax} characters`);
    return events;
  }
}

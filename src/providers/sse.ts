/**
 * Splits server-sent events out of text that arrives in arbitrary pieces: `event:` and `data:`
 * lines up to a blank line make one event; comments (`:`) and other fields are skipped; CRLF is
 * accepted. The buffer holds at most one unfinished event, bounded by `sseEventCharsMax`.
 */

/** A single event larger than this is an upstream fault, not something to buffer forever. */
export const sseEventCharsMax = 16 * 1024 * 1024;

export interface SseEvent {
  event: string | null;
  data: string;
}

export class SseSplitter {
  private buffer = "";
  private event: string | null = null;
  private dataLines: string[] = [];
  private dataChars = 0;

  /** The events completed by this piece of text; throws when one event grows past the bound. */
  push(text: string): SseEvent[] {
    const events: SseEvent[] = [];
    this.buffer += text;
    let start = 0;
    let newline: number;
    while ((newline = this.buffer.indexOf("\n", start)) !== -1) {
      let line = this.buffer.slice(start, newline);
      start = newline + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (this.dataLines.length > 0) events.push({ event: this.event, data: this.dataLines.join("\n") });
        this.event = null;
        this.dataLines = [];
        this.dataChars = 0;
      } else if (line.startsWith("data:")) {
        const data = line.slice(line.startsWith("data: ") ? 6 : 5);
        this.dataLines.push(data);
        this.dataChars += data.length;
      }
      else if (line.startsWith("event:")) this.event = line.slice(6).trim();
    }
    this.buffer = this.buffer.slice(start);
    if (this.buffer.length + this.dataChars > sseEventCharsMax) throw new Error("an upstream stream event exceeds sseEventCharsMax");
    return events;
  }
}

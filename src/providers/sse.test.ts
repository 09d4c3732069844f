import { expect, test } from "bun:test";
import { SseSplitter, sseEventCharsMax } from "./sse.ts";

test("events split across pieces, CRLF, comments, multi-line data and named events", () => {
  const sse = new SseSplitter();
  const text = ': hello\r\nevent: ping\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata: two\n\n';
  const events = [...text].flatMap((char) => sse.push(char));
  expect(events).toEqual([
    { event: "ping", data: '{"a":\n1}' },
    { event: null, data: "two" },
  ]);
});

test("an event that never ends is refused at the bound instead of buffered forever", () => {
  const sse = new SseSplitter();
  const line = `data: ${"x".repeat(1024 * 1024)}\n`;
  expect(() => {
    for (let i = 0; i * line.length <= sseEventCharsMax + line.length; i++) sse.push(line);
  }).toThrow(`exceeds ${sseEventCharsMax} characters`);
});

test("a smaller bound, as the operator's tools use", () => {
  const sse = new SseSplitter({ eventCharsMax: 10 });
  expect(sse.push("data: 12345\n\n")).toEqual([{ event: null, data: "12345" }]);
  expect(() => sse.push("data: 12345678901\n")).toThrow("exceeds 10 characters");
});

/** The rules as the module states them, on whole text: lines end at LF (a CR before it is dropped). */
function referenceEvents(text: string): { event: string | null; data: string }[] {
  const events: { event: string | null; data: string }[] = [];
  let event: string | null = null;
  let data: string[] = [];
  const lines = text.split("\n");
  lines.pop(); // the unfinished last line
  for (const raw of lines) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line === "") {
      if (data.length > 0) events.push({ event, data: data.join("\n") });
      event = null;
      data = [];
    } else if (line.startsWith("data:")) data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
    else if (line.startsWith("event:")) event = line.slice(6).trim();
  }
  return events;
}

test("any text cut into any pieces gives the events the rules give the whole text", () => {
  let seed = 7;
  const random = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const pick = <T>(items: T[]) => items[Math.floor(random() * items.length)]!;
  const parts = [
    "data:",
    "data: ",
    "data:  ",
    "event:",
    "event: x ",
    ": note",
    "id: 1",
    "retry: 5",
    '{"a":1}',
    "é",
    "😀",
    "",
    " ",
    "[DONE]",
  ];
  for (let run = 0; run < 2_000; run++) {
    let text = "";
    const lines = Math.floor(random() * 12);
    for (let i = 0; i < lines; i++) text += pick(parts) + pick(["", pick(parts)]) + pick(["\n", "\r\n", "\n\n", "\r\n\r\n"]);
    const sse = new SseSplitter();
    const events: { event: string | null; data: string }[] = [];
    for (let at = 0; at < text.length; ) {
      const next = Math.min(text.length, at + 1 + Math.floor(random() * 8));
      events.push(...sse.push(text.slice(at, next)));
      at = next;
    }
    expect(events).toEqual(referenceEvents(text));
  }
});

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

import OpenAI from "openai";
import { startTestGateway } from "./test/helpers.ts";
const t = await startTestGateway();
const { key } = await t.fundedKey(1000);
const client = new OpenAI({ baseURL: `${t.url}/v1`, apiKey: key, maxRetries: 0 });
for (const stream of [false, true, false, true]) {
  const t0 = performance.now();
  for (let i = 0; i < 20; i++) {
    if (stream) { const s = await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], stream: true }); for await (const _ of s); }
    else await client.chat.completions.create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
  }
  console.log(stream ? "stream" : "json", ((performance.now() - t0) / 20).toFixed(1), "ms");
}
await t.stop();

-- wrk script: POST a short non-streaming chat completion with a bearer key.
--   wrk -t1 -c64 -d10s -s bench/chat.lua http://127.0.0.1:PORT/v1/chat/completions -- <key>
-- done() prints one JSON line that bench/wrk.ts parses (latencies in microseconds).

local body = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}'
local req

function init(args)
  local headers = {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. (args[1] or "bench"),
  }
  req = wrk.format("POST", nil, headers, body)
end

function request()
  return req
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end

-- wrk script: POST a short non-streaming chat completion with a bearer key.
--   wrk -t1 -c64 -d10s -s bench/chat.lua http://127.0.0.1:PORT/v1/chat/completions -- <key> ["Name: value" ...]
--   wrk ... -- @/path/to/keys.txt ["Name: value" ...]     (one key per line, taken round-robin per request)
-- Arguments after the key are extra request headers. done() prints one JSON line that
-- bench/wrk.ts parses (latencies in microseconds).

local body = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}'
local reqs = {}
local n = 0
local i = 0

function init(args)
  local first = args[1] or "bench"
  local keys = {}
  if string.sub(first, 1, 1) == "@" then
    for line in io.lines(string.sub(first, 2)) do
      if line ~= "" then keys[#keys + 1] = line end
    end
  else
    keys[1] = first
  end
  local extra = {}
  for j = 2, #args do
    local name, value = string.match(args[j], "^([^:]+):%s*(.*)$")
    if name then extra[name] = value end
  end
  -- One prepared request per key: no formatting on the hot path.
  for _, key in ipairs(keys) do
    local headers = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. key }
    for name, value in pairs(extra) do headers[name] = value end
    reqs[#reqs + 1] = wrk.format("POST", nil, headers, body)
  end
  n = #reqs
end

function request()
  i = i % n + 1
  return reqs[i]
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"duration_us":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end

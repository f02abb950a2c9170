-- wrk script for scripts/bench-ingest: each thread sends its own slice of
-- pre-signed requests (one "id signature" pair per line) with one body.
local counter = 0
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
end

local lines, body, ts, path
local idx, step

function init(args)
  lines = {}
  for line in io.lines(args[1]) do lines[#lines + 1] = line end
  local f = io.open(args[2], "rb")
  body = f:read("*a")
  f:close()
  ts = args[3]
  path = args[4]
  step = tonumber(args[5])
  idx = tid + 1
end

function request()
  local line = lines[idx]
  idx = idx + step
  if idx > #lines then idx = tid + 1 end  -- wrapped: duplicates, reported by the check
  local id, sig = line:match("^(%S+) (%S+)$")
  return wrk.format("POST", path, {
    ["Content-Type"] = "application/json",
    ["webhook-id"] = id,
    ["webhook-timestamp"] = ts,
    ["webhook-signature"] = sig,
  }, body)
end

function done(summary, latency, requests)
  io.write(string.format(
    "RESULT %d %d %d %d %.0f %.0f %.0f\n", summary.requests, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.duration, latency:percentile(50), latency:percentile(99), latency:percentile(99.9)))
end

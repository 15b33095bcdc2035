"""The Lua scripts of served filters (run with EVAL / EVALSHA on the server, atomically).

- ``CREATE_META_SCRIPT``: create ``NAME:meta`` only when absent (one atomic check-and-set).
- ``REMOVE_SCRIPT``: a counting filter's removal decided key by key on the server: refuse a key with a counter
  below the number of its probes on it, leave saturated counters alone, record the batch chunk
  (``RedisCountingBloomFilter._decrement`` uses it when a WATCHed transaction cannot be used).
"""
from __future__ import annotations

__all__ = ["CREATE_META_SCRIPT", "REMOVE_SCRIPT", "LUA_OPS_PER_CALL"]

#: How many sub-operations a Lua script passes to one redis.call (Lua's unpack() limit is about 8,000 values).
LUA_OPS_PER_CALL = 1500

CREATE_META_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], unpack(ARGV))
  return 1
end
return 0
"""



# ---- the counting filter: Lua scripts ---------------------------------------------------------------------------------
# KEYS: meta, batch record, part 0, part 1, ...   ARGV: record seconds, k, part bits, field type, counter max, mode,
# then the k offsets of every key (Redis bit offsets of the whole payload, as decimal strings).
_SCRIPT_COMMON = """
local record = redis.call('GET', KEYS[2])
if record then return {1, tonumber(record)} end
local k = tonumber(ARGV[2])
local part_bits = tonumber(ARGV[3])
local field = ARGV[4]
local counter_max = tonumber(ARGV[5])
local mode = ARGV[6]
local first = 7
local n = (#ARGV - first + 1) / k
local nparts = #KEYS - 2
local function locate(i)  -- part index (0-based) and part-local offset of ARGV[i]
  if nparts == 1 then return 0, ARGV[i] end
  local o = tonumber(ARGV[i])
  local p = math.floor(o / part_bits)
  return p, o - p * part_bits
end
local function flush(p, ops)  -- one BITFIELD on part p; returns its replies
  if #ops == 0 then return {} end
  return redis.call('BITFIELD', KEYS[3 + p], unpack(ops))
end
"""

REMOVE_SCRIPT = _SCRIPT_COMMON + """
-- Read every counter once, decide key by key on the values as the earlier keys of the batch left them, then write.
local value = {}
local wanted, where = {}, {}
for p = 0, nparts - 1 do wanted[p] = {}; where[p] = {} end
for i = first, #ARGV do
  if value[ARGV[i]] == nil then
    value[ARGV[i]] = false
    local p, o = locate(i)
    local t = wanted[p]
    t[#t + 1] = 'GET'; t[#t + 1] = field; t[#t + 1] = o
    where[p][#where[p] + 1] = ARGV[i]
  end
end
for p = 0, nparts - 1 do
  local t, names = wanted[p], where[p]
  for s = 1, #t, 3 * %d do
    local ops = {}
    for j = s, math.min(s + 3 * %d - 1, #t) do ops[#ops + 1] = t[j] end
    local replies = redis.call('BITFIELD_RO', KEYS[3 + p], unpack(ops))
    for j, v in ipairs(replies) do value[names[(s - 1) / 3 + j]] = v end
  end
end
local removed, failed = 0, -1
local decrements = {}
for key = 0, n - 1 do
  local base = first + key * k
  local uses = {}
  local present = true
  for i = base, base + k - 1 do uses[ARGV[i]] = (uses[ARGV[i]] or 0) + 1 end
  for o, count in pairs(uses) do
    local v = value[o]
    if v ~= counter_max and v < count then present = false end
  end
  if present then
    for i = base, base + k - 1 do
      local v = value[ARGV[i]]
      if v ~= counter_max then  -- sticky: a saturated counter's true value is unknown, never decrement it
        value[ARGV[i]] = v - 1
        decrements[#decrements + 1] = i
      end
    end
    removed = removed + 1
  elseif mode == 'raise' then
    return {2, key}  -- nothing was written
  end
end
local ops = {}
for p = 0, nparts - 1 do ops[p] = {} end
for _, i in ipairs(decrements) do
  local p, o = locate(i)
  local t = ops[p]
  t[#t + 1] = 'INCRBY'; t[#t + 1] = field; t[#t + 1] = o; t[#t + 1] = -1
  if #t >= 4 * %d then flush(p, t); ops[p] = {} end
end
for p = 0, nparts - 1 do flush(p, ops[p]) end
redis.call('HINCRBY', KEYS[1], 'num_keys', 0 - removed)  -- never "-0"
redis.call('SET', KEYS[2], removed, 'EX', ARGV[1])
return {0, removed}
""" % (LUA_OPS_PER_CALL, LUA_OPS_PER_CALL, LUA_OPS_PER_CALL)


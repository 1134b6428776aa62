-- Argo CD health check for kvcache.io/KVCacheTier (Lua 5.1).
--   Healthy      Ready is True for the current generation.
--   Progressing  no status yet; status.observedGeneration (or Ready's) lags metadata.generation;
--                Ready is Unknown; or Ready is False only because kvtier is still working
--                (provisioning, binding a claim, applying, probing).
--   Degraded     Ready is False for any other reason, including TargetNotFound: with sync
--                waves the model server is synced before its tier, so a missing target is a
--                mistake to show, not a state to wait on. The message lists every failing
--                condition ("Type: message").
-- Conditions are handled generically: a condition fails when its status is False, or True for
-- the negative-polarity Conflict.
local PROGRESSING_REASONS = {
  Provisioning = true, ClaimPending = true, Applying = true, Probing = true,
  NotProbed = true, NotSized = true, Pending = true, Reconciling = true,
}
local NEGATIVE = { Conflict = true }

local hs = {}
local generation = obj.metadata and obj.metadata.generation
local status = obj.status
if status == nil or status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for kvtier to reconcile the tier"
  return hs
end
if generation ~= nil and (status.observedGeneration == nil or status.observedGeneration < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for kvtier to observe generation " .. generation
  return hs
end

local ready = nil
local failing = {}
local progressing = true -- every failing condition is only work in progress
for _, c in ipairs(status.conditions) do
  if c.type == "Ready" then
    ready = c
  elseif (c.status == "False" and not NEGATIVE[c.type]) or (c.status == "True" and NEGATIVE[c.type]) then
    table.insert(failing, c.type .. ": " .. (c.message or c.reason or ""))
    if not PROGRESSING_REASONS[c.reason] then
      progressing = false
    end
  end
end

if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the Ready condition"
  return hs
end
if generation ~= nil and ready.observedGeneration ~= nil and ready.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for kvtier to observe generation " .. generation
  return hs
end
if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = ready.message or ""
  return hs
end
if ready.status ~= "False" then
  hs.status = "Progressing"
  hs.message = ready.message or ready.reason or ""
  return hs
end
if #failing > 0 then
  hs.status = progressing and "Progressing" or "Degraded"
  hs.message = table.concat(failing, "; ")
  return hs
end
hs.status = PROGRESSING_REASONS[ready.reason] and "Progressing" or "Degraded"
hs.message = ready.message or ready.reason or ""
return hs

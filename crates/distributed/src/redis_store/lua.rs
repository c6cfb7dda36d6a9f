//! Server-side scripts of the inventory. Each runs atomically on the Redis
//! server that owns the inventory's hash slot, so that concurrent processes
//! never see (or make) a half-done namespace change or extent merge.
//!
//! `KEYS[1]` is always the inventory key prefix `{<ns>}:`; every key a
//! script touches starts with it, hence shares its hash slot (Redis Cluster
//! runs the script on that one node).
//!
//! Numbers the scripts compare (offsets, sizes, label ids, worker ids) are
//! fixed-width lowercase hex strings, so that Lua's string order is their
//! numeric order and no 64-bit arithmetic (which Lua's doubles cannot do
//! exactly) is ever needed: an extent is stored as its start and end, and a
//! merge only picks among existing boundaries.

pub const PRELUDE: &str = r#"
local P = KEYS[1]
local Z16 = '0000000000000000'
local function fget(r, name)
  for i = 1, #r, 2 do if r[i] == name then return r[i + 1] end end
  return nil
end
local function rec(id)
  local r = redis.call('HGETALL', P .. 'file:' .. id)
  if #r == 0 then return nil end
  return r
end
-- A record as its name `path` shows it; with `nlink`, that link count.
local function at(r, path, nlink)
  local out, seen = {}, false
  for i = 1, #r, 2 do
    local k, v = r[i], r[i + 1]
    if k == 'path' then v = path end
    if k == 'nlink' then
      seen = true
      if nlink then v = nlink end
    end
    out[#out + 1] = k
    out[#out + 1] = v
  end
  if nlink and not seen then
    out[#out + 1] = 'nlink'
    out[#out + 1] = nlink
  end
  return out
end
local function rec_at(id, path)
  local r = rec(id)
  if not r then return nil end
  return at(r, path)
end
-- Names of a file: 'path' in its record is the first, 'nlink' (absent: 1)
-- counts them, and the others are in the sorted set links:<id>.
local function nlink_of(r)
  return tonumber(fget(r, 'nlink') or '1')
end
-- Open files: holds:<id> is the set of sessions holding file id open; a
-- session lives while its lease hlease:<session> does (its process renews
-- it); holding:<session> lists its files, and 'nameless' the files kept
-- open past their last name ('nlink' 0).
--
-- Whether a live session holds file `id`; sessions whose lease expired
-- (their process died) leave the set.
local function held(id)
  local hk = P .. 'holds:' .. id
  local live = false
  for _, s in ipairs(redis.call('SMEMBERS', hk)) do
    if redis.call('EXISTS', P .. 'hlease:' .. s) == 1 then
      live = true
    else
      redis.call('SREM', hk, s)
    end
  end
  return live
end
-- Drops file `id` with everything of it; returns its extents.
local function drop_file(id)
  local ext = redis.call('ZRANGE', P .. 'x:' .. id, 0, -1)
  redis.call('DEL', P .. 'x:' .. id, P .. 'xattr:' .. id, P .. 'file:' .. id, P .. 'links:' .. id,
    P .. 'holds:' .. id)
  redis.call('SREM', P .. 'nameless', id)
  return ext
end
-- A file kept open past its last name, nobody holding it any more: dropped,
-- and its record returned (nil otherwise).
local function drop_if_let_go(id)
  local r = rec(id)
  if not r or fget(r, 'nlink') ~= '0' or held(id) then return nil end
  drop_file(id)
  return r
end
-- Drops the name `path` of file `id` (record `r`), the file itself with its
-- last name unless a live session holds it open (then it stays, by id, with
-- 'nlink' 0). Returns the record as `path` showed it, with its remaining
-- link count, and the extents to reclaim (none while it stays).
local function unname(id, r, path, now)
  redis.call('DEL', P .. 'path:' .. path)
  redis.call('ZREM', P .. 'paths', path)
  local n = nlink_of(r)
  if n <= 1 or fget(r, 'kind') == 'd' then
    if fget(r, 'kind') == 'f' and held(id) then
      redis.call('HSET', P .. 'file:' .. id, 'nlink', '0', 'ctime', now)
      redis.call('SADD', P .. 'nameless', id)
      return rec_at(id, path), {}
    end
    return at(r, path, '0'), drop_file(id)
  end
  local fk, lk = P .. 'file:' .. id, P .. 'links:' .. id
  if fget(r, 'path') == path then
    local first = redis.call('ZRANGE', lk, 0, 0)[1]
    redis.call('ZREM', lk, first)
    redis.call('HSET', fk, 'path', first)
  else
    redis.call('ZREM', lk, path)
  end
  redis.call('HSET', fk, 'nlink', string.format('%d', n - 1), 'ctime', now)
  return rec_at(id, path), {}
end
-- The name `old` of file `cid` is now `new`.
local function move_name(cid, old, new)
  redis.call('DEL', P .. 'path:' .. old)
  redis.call('ZREM', P .. 'paths', old)
  redis.call('SET', P .. 'path:' .. new, cid)
  redis.call('ZADD', P .. 'paths', 0, new)
  local fk = P .. 'file:' .. cid
  if redis.call('HGET', fk, 'path') == old then
    redis.call('HSET', fk, 'path', new)
  else
    redis.call('ZREM', P .. 'links:' .. cid, old)
    redis.call('ZADD', P .. 'links:' .. cid, 0, new)
  end
end
local function id_of(path)
  local v = redis.call('GET', P .. 'path:' .. path)
  if v then return v end
  return nil
end
-- Moves name `from` of file `id` (of kind `kind`) to `to`, and for a
-- directory every name under it.
local function move_tree(from, to, kind, id)
  if kind == 'd' then
    local pre = from .. '/'
    local kids = redis.call('ZRANGEBYLEX', P .. 'paths', '[' .. pre, '[' .. pre .. '\255')
    for _, p in ipairs(kids) do
      local cid = redis.call('GET', P .. 'path:' .. p)
      local np = to .. string.sub(p, #from + 1)
      if cid then
        move_name(cid, p, np)
      else
        redis.call('ZREM', P .. 'paths', p)
      end
    end
  end
  move_name(id, from, to)
end
-- Kind codes: as FileKind's Debug names them, and in words.
local KIND_NAMES = {f = 'File', d = 'Dir', l = 'Symlink', p = 'Fifo', c = 'CharDevice',
  b = 'BlockDevice', s = 'Socket'}
local KIND_WORDS = {f = 'file', d = 'directory', l = 'symbolic link', p = 'FIFO',
  c = 'character device', b = 'block device', s = 'socket'}
local function kind_name(k)
  return KIND_NAMES[k] or 'Dir'
end
-- Why an entry of kind `k` holds no data (nil: it does).
local function no_data(k, path)
  if k == 'd' then return {'invalidarg', tostring(path) .. ' is a directory, it has no data'} end
  if k ~= 'f' and k ~= 'l' then
    return {'invalidarg', tostring(path) .. ' is a ' .. KIND_WORDS[k] .. ', it holds no data'}
  end
  return nil
end
-- The directory holding `path` changed: its mtime and ctime are `now`, and
-- it gained (`subdirs` 1) or lost (-1) a subdirectory, whose '..' is one of
-- its links (a directory's 'nlink' is 2 plus its subdirectories).
local function touch_parent(path, now, subdirs)
  if path == '/' then return end
  local dir = string.match(path, '^(.*)/[^/]*$')
  if dir == '' then dir = '/' end
  local did = dir and id_of(dir)
  if did then
    local fk = P .. 'file:' .. did
    redis.call('HSET', fk, 'mtime', now, 'ctime', now)
    if subdirs ~= 0 then redis.call('HINCRBY', fk, 'nlink', subdirs) end
  end
end
local function dir_delta(kind)
  if kind == 'd' then return 1 end
  return 0
end
-- Who a record belongs to: {application, uid, gid} (records written before
-- files had a POSIX owner belong to root).
local function owner_of(r)
  return {fget(r, 'owner'), fget(r, 'uid') or '0', fget(r, 'gid') or '0'}
end
local function new_entry(path, kind, mode, o, now)
  local id = string.format('%d', redis.call('HINCRBY', P .. 'ctr', 'file', 1))
  redis.call('HSET', P .. 'file:' .. id, 'v', '1', 'id', id, 'path', path, 'kind', kind,
    'size', Z16, 'mode', mode, 'owner', o[1], 'uid', o[2], 'gid', o[3],
    'ctime', now, 'mtime', now, 'atime', now, 'nlink', string.format('%d', 1 + dir_delta(kind)))
  redis.call('SET', P .. 'path:' .. path, id)
  redis.call('ZADD', P .. 'paths', 0, path)
  touch_parent(path, now, dir_delta(kind))
  return id
end
local function check_parents(first, path)
  for i = first, #ARGV do
    local did = id_of(ARGV[i])
    local k = did and redis.call('HGET', P .. 'file:' .. did, 'kind')
    if k and k ~= 'd' then
      -- The reason begins as labios_label::error::PARENT_NOT_DIR says.
      return {'invalidpath', path, 'parent ' .. ARGV[i] .. ' is a ' .. KIND_WORDS[k]}
    end
  end
  return nil
end
local function make_parents(first, o, now)
  for i = first, #ARGV do
    if not id_of(ARGV[i]) then new_entry(ARGV[i], 'd', '493', o, now) end
  end
end
-- A new file `id` starts with the hints (user.labios.* attributes, as
-- labios_label::hints::PREFIX names them) of the nearest directory above
-- it that has any: ARGV[first..] are its ancestors, outermost first, and
-- '/' is above them.
local function inherit_hints(first, id)
  for i = #ARGV, first - 1, -1 do
    local did = id_of(i >= first and ARGV[i] or '/')
    if did then
      local all = redis.call('HGETALL', P .. 'xattr:' .. did)
      local hints = {}
      for j = 1, #all, 2 do
        if string.sub(all[j], 1, 12) == 'user.labios.' then
          hints[#hints + 1] = all[j]
          hints[#hints + 1] = all[j + 1]
        end
      end
      if #hints > 0 then
        redis.call('HSET', P .. 'xattr:' .. id, unpack(hints))
        return
      end
    end
  end
end
local function overlapping(xk, s, e)
  local ex = {}
  local prev = redis.call('ZREVRANGEBYLEX', xk, '(' .. s, '-', 'LIMIT', 0, 1)
  if #prev == 1 and string.sub(prev[1], 17, 32) > s then ex[#ex + 1] = prev[1] end
  for _, m in ipairs(redis.call('ZRANGEBYLEX', xk, '[' .. s, '(' .. e)) do ex[#ex + 1] = m end
  return ex
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"#;

/// ARGV: path, kind (f|d), mode, owner, now, uid, gid, missing-ancestor
/// candidates... A new file inherits its nearest hinted directory's hints.
pub const CREATE: &str = r#"
local path, kind, mode, now = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local owner = {ARGV[4], ARGV[6], ARGV[7]}
local id = id_of(path)
if id then
  local r = rec(id)
  if not r then return {'storage', 'key ' .. P .. 'path:' .. path .. ' names missing file ' .. id} end
  if fget(r, 'kind') == kind then return {'ok', at(r, path)} end
  return {'exists', path .. ' exists as a ' .. kind_name(fget(r, 'kind'))}
end
local err = check_parents(8, path)
if err then return err end
make_parents(8, owner, now)
local made = new_entry(path, kind, mode, owner, now)
if kind == 'f' then inherit_hints(8, made) end
return {'ok', rec(made)}
"#;

/// ARGV: path, target, size (16 hex digits), owner, now, uid, gid,
/// ancestors of path. The entry and its target are written together: never
/// a link without one.
pub const SYMLINK: &str = r#"
local path, target, size, now = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local owner = {ARGV[4], ARGV[6], ARGV[7]}
local id = id_of(path)
if id then
  local r = rec(id)
  if not r then return {'storage', 'key ' .. P .. 'path:' .. path .. ' names missing file ' .. id} end
  return {'exists', path .. ' exists as a ' .. kind_name(fget(r, 'kind'))}
end
local err = check_parents(8, path)
if err then return err end
make_parents(8, owner, now)
id = new_entry(path, 'l', '511', owner, now)
redis.call('HSET', P .. 'file:' .. id, 'size', size)
redis.call('HSET', P .. 'xattr:' .. id, 'labios.symlink', target)
return {'ok', rec(id)}
"#;

/// ARGV: path.
pub const LOOKUP: &str = r#"
local id = id_of(ARGV[1])
if not id then return {'ok'} end
local r = rec_at(id, ARGV[1])
if not r then return {'ok'} end
return {'ok', r}
"#;

/// ARGV: 'path' or 'id', the path or id, start (hex16), end (hex16). The
/// record and the extents overlapping the range (none lie past a file's
/// size: truncation cuts them), or nothing.
pub const READ_PLAN: &str = r#"
local id, r
if ARGV[1] == 'path' then
  id = id_of(ARGV[2])
  if not id then return {'ok'} end
  r = rec_at(id, ARGV[2])
else
  id = ARGV[2]
  r = rec(id)
end
if not r then return {'ok'} end
local s, e = ARGV[3], ARGV[4]
if s < e then return {'ok', r, overlapping(P .. 'x:' .. id, s, e)} end
return {'ok', r, {}}
"#;

/// ARGV: from, to, now, most names of a file, ancestors of to.
pub const LINK: &str = r#"
local from, to, now, max = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local id = id_of(from)
if not id then return {'notfound', from} end
local r = rec(id)
if not r then return {'storage', 'key ' .. P .. 'path:' .. from .. ' names missing file ' .. id} end
local oid = id_of(to)
if oid then
  local o = rec(oid)
  return {'exists', to .. ' exists as a ' .. kind_name(o and fget(o, 'kind') or 'f')}
end
if fget(r, 'kind') == 'd' then
  return {'invalidarg', from .. ' is a directory: no hard link to a directory'}
end
local n = nlink_of(r)
if n >= max then
  return {'invalidarg', from .. ' has ' .. string.format('%d', n) .. ' names: too many links'}
end
local err = check_parents(5, to)
if err then return err end
make_parents(5, owner_of(r), now)
redis.call('SET', P .. 'path:' .. to, id)
redis.call('ZADD', P .. 'paths', 0, to)
redis.call('ZADD', P .. 'links:' .. id, 0, to)
redis.call('HSET', P .. 'file:' .. id, 'nlink', string.format('%d', n + 1), 'ctime', now)
touch_parent(to, now, 0)
return {'ok', rec_at(id, to)}
"#;

/// ARGV: prefix.
pub const LIST: &str = r#"
local pre = ARGV[1]
local ps
if pre == '' then
  ps = redis.call('ZRANGE', P .. 'paths', 0, -1)
else
  ps = redis.call('ZRANGEBYLEX', P .. 'paths', '[' .. pre, '[' .. pre .. '\255')
end
local out = {}
for _, p in ipairs(ps) do
  local id = id_of(p)
  if id then
    local r = rec_at(id, p)
    if r then out[#out + 1] = r end
  end
end
return {'ok', out}
"#;

/// ARGV: path, now.
pub const REMOVE: &str = r#"
local path, now = ARGV[1], ARGV[2]
local id = id_of(path)
if not id then return {'notfound', path} end
local r = rec(id)
if not r then return {'storage', 'key ' .. P .. 'path:' .. path .. ' names missing file ' .. id} end
if fget(r, 'kind') == 'd' then
  local pre = path .. '/'
  local c = redis.call('ZRANGEBYLEX', P .. 'paths', '[' .. pre, '[' .. pre .. '\255', 'LIMIT', 0, 1)
  if #c > 0 then return {'invalidarg', 'directory ' .. path .. ' is not empty'} end
end
local gone, ext = unname(id, r, path, now)
touch_parent(path, now, -dir_delta(fget(r, 'kind')))
return {'ok', gone, ext}
"#;

/// ARGV: from, to, now, how (r: replace, n: no replace, x: exchange),
/// missing-ancestor candidates of `to`...
pub const RENAME: &str = r#"
local from, to, now, how = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local id = id_of(from)
if not id then return {'notfound', from} end
local oid = id_of(to)
if how == 'n' and oid then return {'exists', to .. ' exists'} end
if how == 'x' then
  if not oid then return {'notfound', to} end
  if oid == id then return {'ok'} end
  local r, o = rec(id), rec(oid)
  if not r or not o then
    return {'storage', from .. ' or ' .. to .. ' names a missing file'}
  end
  local ka, kb = fget(r, 'kind'), fget(o, 'kind')
  -- No path starts with '#': the first tree waits there while the second
  -- takes its place.
  local aside = '#' .. from
  move_tree(from, aside, ka, id)
  move_tree(to, from, kb, oid)
  move_tree(aside, to, ka, id)
  redis.call('HSET', P .. 'file:' .. id, 'ctime', now)
  redis.call('HSET', P .. 'file:' .. oid, 'ctime', now)
  local delta = dir_delta(kb) - dir_delta(ka)
  touch_parent(from, now, delta)
  touch_parent(to, now, -delta)
  return {'ok'}
end
if from == to then return {'ok'} end
local r = rec(id)
-- Two names of one file: POSIX leaves both in place.
if oid == id then return {'ok'} end
if not r then return {'storage', 'key ' .. P .. 'path:' .. from .. ' names missing file ' .. id} end
local kind = fget(r, 'kind')
local old
if oid then
  local o = rec(oid)
  if o and (fget(o, 'kind') == 'd' or kind == 'd') then
    return {'exists', to .. ' exists as a ' .. kind_name(fget(o, 'kind')) .. '; only a file or symbolic link replaces one'}
  end
  old = o
end
local err = check_parents(5, to)
if err then return err end
local oext
if old then
  old, oext = unname(oid, old, to, now)
  -- A file that keeps other names is not replaced, only this name.
  if fget(old, 'nlink') ~= '0' then old = nil end
elseif oid then
  redis.call('DEL', P .. 'path:' .. to)
  redis.call('ZREM', P .. 'paths', to)
end
make_parents(5, owner_of(r), now)
move_tree(from, to, kind, id)
redis.call('HSET', P .. 'file:' .. id, 'ctime', now)
touch_parent(from, now, -dir_delta(kind))
touch_parent(to, now, dir_delta(kind))
if old then return {'ok', old, oext} end
return {'ok'}
"#;

/// ARGV: id, size (hex16), now.
pub const SET_SIZE: &str = r#"
local id, sz, now = ARGV[1], ARGV[2], ARGV[3]
local r = rec(id)
if not r then return {'notfound', 'file id ' .. id} end
local bad = no_data(fget(r, 'kind'), fget(r, 'path'))
if bad then return bad end
local xk = P .. 'x:' .. id
for _, m in ipairs(redis.call('ZRANGEBYLEX', xk, '[' .. sz, '+')) do redis.call('ZREM', xk, m) end
local prev = redis.call('ZREVRANGEBYLEX', xk, '(' .. sz, '-', 'LIMIT', 0, 1)
if #prev == 1 and string.sub(prev[1], 17, 32) > sz then
  redis.call('ZREM', xk, prev[1])
  redis.call('ZADD', xk, 0, string.sub(prev[1], 1, 16) .. sz .. string.sub(prev[1], 33))
end
redis.call('HSET', P .. 'file:' .. id, 'size', sz, 'mtime', now, 'ctime', now)
return {'ok'}
"#;

/// A change of attributes, as `SetAttr::apply` does it. ARGV: id, now, then
/// mode, uid, gid, atime, mtime, each empty when unchanged.
pub const SET_ATTR: &str = r#"
local id, now = ARGV[1], ARGV[2]
local mode, uid, gid, at, mt = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local fk = P .. 'file:' .. id
local r = redis.call('HMGET', fk, 'kind', 'mode')
if not r[1] then return {'notfound', 'file id ' .. id} end
local m = tonumber(r[2])
if mode ~= '' then
  m = tonumber(mode)
elseif (uid ~= '' or gid ~= '') and r[1] == 'f' then
  -- A new owner drops set-user-ID (0o4000), and set-group-ID (0o2000)
  -- when group execution (0o010) is on.
  if m % 4096 >= 2048 then m = m - 2048 end
  if math.floor(m / 8) % 2 == 1 and m % 2048 >= 1024 then m = m - 1024 end
end
local set = {'mode', string.format('%d', m), 'ctime', now}
for _, f in ipairs({{'uid', uid}, {'gid', gid}, {'atime', at}, {'mtime', mt}}) do
  if f[2] ~= '' then
    set[#set + 1] = f[1]
    set[#set + 1] = f[2]
  end
end
redis.call('HSET', fk, unpack(set))
return {'ok', rec(id)}
"#;

/// Newest label wins. ARGV: id, start (hex16), end (hex16), label (hex32),
/// worker (hex8), now.
pub const COMMIT: &str = r#"
local id, s, e, lbl, w, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local fk = P .. 'file:' .. id
local r = redis.call('HMGET', fk, 'kind', 'size', 'path')
if not r[1] then return {'notfound', 'file id ' .. id} end
local bad = no_data(r[1], r[3])
if bad then return bad end
if s < e then
  local xk = P .. 'x:' .. id
  local ex = overlapping(xk, s, e)
  local cursor = s
  local pieces = {}
  for _, m in ipairs(ex) do
    if string.sub(m, 33, 64) > lbl then
      local a, b = string.sub(m, 1, 16), string.sub(m, 17, 32)
      if a < s then a = s end
      if b > e then b = e end
      if a > cursor then pieces[#pieces + 1] = cursor .. a end
      if b > cursor then cursor = b end
    end
  end
  if cursor < e then pieces[#pieces + 1] = cursor .. e end
  for _, m in ipairs(ex) do
    if string.sub(m, 33, 64) <= lbl then
      local a, b, rest = string.sub(m, 1, 16), string.sub(m, 17, 32), string.sub(m, 33)
      redis.call('ZREM', xk, m)
      if a < s then redis.call('ZADD', xk, 0, a .. s .. rest) end
      if b > e then redis.call('ZADD', xk, 0, e .. b .. rest) end
    end
  end
  for _, p in ipairs(pieces) do redis.call('ZADD', xk, 0, p .. lbl .. w) end
end
if (not r[2]) or e > r[2] then redis.call('HSET', fk, 'size', e) end
redis.call('HSET', fk, 'mtime', now, 'ctime', now)
return {'ok'}
"#;

/// The size is read and extended in one step, so concurrent appends get
/// disjoint ranges. Sizes are hex16; the sum is done in 32-bit halves,
/// exact in Lua's doubles. ARGV: id, len (hex16), now. Returns the offset.
pub const RESERVE_APPEND: &str = r#"
local id, len, now = ARGV[1], ARGV[2], ARGV[3]
local fk = P .. 'file:' .. id
local r = redis.call('HMGET', fk, 'kind', 'size', 'path')
if not r[1] then return {'notfound', 'file id ' .. id} end
local bad = no_data(r[1], r[3])
if bad then return bad end
local size = r[2] or Z16
local lo = tonumber(string.sub(size, 9, 16), 16) + tonumber(string.sub(len, 9, 16), 16)
local carry = math.floor(lo / 4294967296)
local hi = tonumber(string.sub(size, 1, 8), 16) + tonumber(string.sub(len, 1, 8), 16) + carry
if hi >= 4294967296 then
  return {'invalidarg', 'appending to ' .. tostring(r[3]) .. ' runs past the largest offset'}
end
redis.call('HSET', fk, 'size', string.format('%08x%08x', hi, lo % 4294967296), 'mtime', now, 'ctime', now)
return {'ok', size}
"#;

/// ARGV: id, start (hex16), end (hex16).
pub const EXTENTS: &str = r#"
local id, s, e = ARGV[1], ARGV[2], ARGV[3]
if redis.call('EXISTS', P .. 'file:' .. id) == 0 then return {'notfound', 'file id ' .. id} end
if s < e then return {'ok', overlapping(P .. 'x:' .. id, s, e)} end
return {'ok', {}}
"#;

/// Sets (ARGV: id, now, name, presence, while_empty, value, room) or
/// removes (ARGV: id, now, name, presence, while_empty) an extended
/// attribute, if the condition holds: `presence` is `any`, `present` (the
/// attribute must exist), `absent` or `both` (never holds); `while_empty` `1` needs the file's
/// size 0. A value is stored only if the other attributes take at most
/// `room` bytes (the total limit less this name and value). The reply is
/// the bytes the others take, whether the attribute existed (1|0) and the
/// file's size (hex), which the caller checks with the same `check_xattr`
/// and `XattrCond::check` as every inventory: it finds refused exactly
/// what this script left unchanged.
pub const SET_XATTR: &str = r#"
local id, now, name, presence, empty = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local fk, ak = P .. 'file:' .. id, P .. 'xattr:' .. id
if redis.call('EXISTS', fk) == 0 then return {'notfound', 'file id ' .. id} end
local exists = redis.call('HEXISTS', ak, name)
local size = redis.call('HGET', fk, 'size') or Z16
local held = presence ~= 'both' and (presence ~= 'present' or exists == 1)
  and (presence ~= 'absent' or exists == 0) and (empty ~= '1' or size == Z16)
if #ARGV == 5 then
  if held and redis.call('HDEL', ak, name) == 1 then redis.call('HSET', fk, 'ctime', now) end
  return {'ok', 0, exists, size}
end
local others = 0
local all = redis.call('HGETALL', ak)
for i = 1, #all, 2 do
  if all[i] ~= name then others = others + #all[i] + #all[i + 1] end
end
if held and others <= tonumber(ARGV[7]) then
  redis.call('HSET', ak, name, ARGV[6])
  redis.call('HSET', fk, 'ctime', now)
end
return {'ok', others, exists, size}
"#;

/// ARGV: id.
pub const XATTRS: &str = r#"
local id = ARGV[1]
if redis.call('EXISTS', P .. 'file:' .. id) == 0 then return {'notfound', 'file id ' .. id} end
return {'ok', redis.call('HGETALL', P .. 'xattr:' .. id)}
"#;

/// ARGV: label (hex32), encoded status, ttl ms, final (1|0).
pub const SET_STATUS: &str = r#"
local now = now_ms()
redis.call('SET', P .. 'label:' .. ARGV[1], ARGV[2], 'PX', ARGV[3])
redis.call('ZREMRANGEBYSCORE', P .. 'labels', '-inf', now)
redis.call('ZADD', P .. 'labels', now + tonumber(ARGV[3]), ARGV[1])
if ARGV[4] == '1' then redis.call('PUBLISH', P .. 'done', ARGV[1]) end
return 1
"#;

pub const LABEL_COUNT: &str = r#"
redis.call('ZREMRANGEBYSCORE', P .. 'labels', '-inf', now_ms())
return redis.call('ZCARD', P .. 'labels')
"#;

/// ARGV: file id, session, lease (ms).
pub const HOLD: &str = r#"
local id, s, lease = ARGV[1], ARGV[2], ARGV[3]
if not rec(id) then return {'notfound', 'file id ' .. id} end
redis.call('SADD', P .. 'holds:' .. id, s)
redis.call('SET', P .. 'hlease:' .. s, '1', 'PX', lease)
redis.call('SADD', P .. 'holding:' .. s, id)
redis.call('PEXPIRE', P .. 'holding:' .. s, lease)
return {'ok'}
"#;

/// ARGV: file id, session. Returns the record of a file that went.
pub const LET_GO: &str = r#"
local id, s = ARGV[1], ARGV[2]
redis.call('SREM', P .. 'holds:' .. id, s)
redis.call('SREM', P .. 'holding:' .. s, id)
local r = drop_if_let_go(id)
if r then return {'ok', r} end
return {'ok'}
"#;

/// ARGV: session. Ends its holds and lease; returns the records of the
/// files that went.
pub const LET_GO_SESSION: &str = r#"
local s = ARGV[1]
redis.call('DEL', P .. 'hlease:' .. s)
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', P .. 'holding:' .. s)) do
  redis.call('SREM', P .. 'holds:' .. id, s)
  local r = drop_if_let_go(id)
  if r then out[#out + 1] = r end
end
redis.call('DEL', P .. 'holding:' .. s)
return {'ok', out}
"#;

/// Drops the files kept open past their last name for sessions whose
/// lease expired; returns their records.
pub const DROP_UNHELD: &str = r#"
local out = {}
for _, id in ipairs(redis.call('SMEMBERS', P .. 'nameless')) do
  if not rec(id) then
    redis.call('SREM', P .. 'nameless', id)
  else
    local r = drop_if_let_go(id)
    if r then out[#out + 1] = r end
  end
end
return {'ok', out}
"#;

/// ARGV: labels (hex32) to forget.
pub const FORGET: &str = r#"
for i = 1, #ARGV do
  redis.call('DEL', P .. 'label:' .. ARGV[i])
  redis.call('ZREM', P .. 'labels', ARGV[i])
end
return #ARGV
"#;

/// Warehouse put on one server: KEYS = value, usage counter; ARGV = value,
/// bound. 1 if stored, -1 if it does not fit now.
pub const WH_PUT: &str = r#"
local old = redis.call('STRLEN', KEYS[1])
local used = tonumber(redis.call('GET', KEYS[2]) or '0')
local len = string.len(ARGV[1])
if used - old + len > tonumber(ARGV[2]) then return -1 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('INCRBY', KEYS[2], len - old)
return 1
"#;

/// Warehouse take on one server: KEYS = value, usage counter.
pub const WH_TAKE: &str = r#"
local v = redis.call('GET', KEYS[1])
if not v then return false end
redis.call('DEL', KEYS[1])
redis.call('DECRBY', KEYS[2], string.len(v))
return v
"#;

/// Warehouse delete on one server: KEYS = value, usage counter.
pub const WH_DELETE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local n = redis.call('STRLEN', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('DECRBY', KEYS[2], n)
return 1
"#;

/// Cluster mode, step 1: reserve ARGV[1] bytes under the bound ARGV[2] in
/// the usage counter KEYS[1]. 1 if reserved, -1 if no room.
pub const WH_RESERVE: &str = r#"
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return -1 end
redis.call('INCRBY', KEYS[1], ARGV[1])
return 1
"#;

/// Cluster mode, step 2: store and return the replaced value's length.
pub const WH_SWAP: &str = r#"
local old = redis.call('STRLEN', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1])
return old
"#;

/// Cluster mode take: value and length, counter released by the caller.
pub const WH_GETDEL_LEN: &str = r#"
local n = redis.call('STRLEN', KEYS[1])
if redis.call('DEL', KEYS[1]) == 0 then return -1 end
return n
"#;

/// Once per namespace: sets each directory's 'nlink' to 2 plus its
/// subdirectories, which versions before they were counted did not keep.
pub const COUNT_SUBDIRS: &str = r#"
if redis.call('HGET', P .. 'ctr', 'subdirs') then return {'ok'} end
local dirs = {}
for _, p in ipairs(redis.call('ZRANGE', P .. 'paths', 0, -1)) do
  local id = id_of(p)
  if id and redis.call('HGET', P .. 'file:' .. id, 'kind') == 'd' then
    dirs[p] = id
    redis.call('HSET', P .. 'file:' .. id, 'nlink', '2')
  end
end
for p, _ in pairs(dirs) do
  local parent = string.match(p, '^(.*)/[^/]*$')
  if parent == '' then parent = '/' end
  if p ~= '/' and dirs[parent] then
    redis.call('HINCRBY', P .. 'file:' .. dirs[parent], 'nlink', 1)
  end
end
redis.call('HSET', P .. 'ctr', 'subdirs', '1')
return {'ok'}
"#;

/// Takes one field of a hash: its value, gone from the hash once read.
/// KEYS = hash; ARGV = field.
pub const TAKE_FIELD: &str = r#"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
return v
"#;

-- Wireshark dissector for clusternet's frames: EDP, ESP, the EDP control
-- messages (port 0), CTP (over EDP, and over UDP) and netgauge's control
-- messages. Wire formats: PROTOCOL.md, esp/PROTOCOL.md, ctp/PROTOCOL.md and
-- netgauge/src/control/wire.rs of the clusternet repository.
--
-- Install: scripts/install-dissector.sh (copies this file into Wireshark's
-- personal Lua plugin folder), or load it for one run:
--   tshark -X lua_script:dissector/clusternet.lua -r capture.pcap
--
-- Filter names. Wireshark already has protocols named "edp" (Extreme
-- Discovery Protocol) and "esp" (IPsec ESP), and a Lua plugin cannot take a
-- name that is taken, so EDP and ESP are `cnedp` and `cnesp` ("clusternet
-- EDP/ESP"): cnedp.srcport, cnesp.flags.syn, cnesp.seq, ... CTP keeps `ctp`
-- (ctp.command, ctp.id, ...); netgauge's control messages are `netgauge`.
--
-- How an EDP payload is decoded (see README "Wireshark"):
--   1. destination or source port 0: an EDP control message (echo);
--   2. a port with a dissector in the table "cnedp.port" ("Decode As"; the
--      preference "CTP ports (EDP)", ctp.edp_ports, puts CTP there): that
--      dissector; CTP then reports every inconsistency as expert info;
--   3. otherwise, with the preference "Detect CTP by its header" on (the
--      default): CTP when the 25-byte header is self-consistent exactly as
--      ctp/src/wire.rs parses it, and its packet size equals the EDP payload
--      length (the CTP packet is the whole EDP payload), or the payload is
--      whole confirmations packed together, possibly followed by one other
--      packet last (CTP over EDP);
--   4. netgauge control messages (40 bytes starting with "NGv1");
--   5. data.
--
-- Room for other protocols carried by EDP (MAK): another Lua plugin can add
-- its dissector to the "cnedp.port" table, or a heuristic with
-- `_G.clusternet.add_edp_heuristic(name, fn)` where fn(tvb, pinfo, tree)
-- returns true when it dissected the payload.
--
-- Malformed input never raises a Lua error: every field is read only after
-- its bytes are known to be there; what does not fit is reported as expert
-- info of group "Malformed" and the frame's info column says why.
--
-- Tested with Wireshark/tshark 4.0 (Lua 5.2). No bitwise operators and no
-- API newer than 4.0 are used, so that other Lua versions load it too.

local VERSION = "1.0"

-- Loaded twice (installed as a plugin and given with -X lua_script:)? The
-- protocols exist already: keep the first copy and say so.
-- (Wireshark runs each script in its own environment: the shared table is
-- _G.clusternet.)
if _G.clusternet and _G.clusternet.loaded_from then
    io.stderr:write("clusternet.lua: already loaded from " .. _G.clusternet.loaded_from
        .. "; ignoring " .. debug.getinfo(1, "S").source .. "\n")
    return
end
local clusternet = {}
_G.clusternet = clusternet
clusternet.version = VERSION
clusternet.loaded_from = debug.getinfo(1, "S").source

-------------------------------------------------------------------------------
-- Helpers
-------------------------------------------------------------------------------

-- True if bit `mask` (a power of two) is set in `x`.
local function has(x, mask)
    return math.floor(x / mask) % 2 == 1
end

-- The bits of `x` (8-bit) that are not in `known` (8-bit), as a number.
local function unknown_bits(x, known)
    local out, bit = 0, 1
    for _ = 0, 7 do
        if has(x, bit) and not has(known, bit) then
            out = out + bit
        end
        bit = bit * 2
    end
    return out
end

-- The range [off, off+len) of `tvb`, or nil when it is empty or not all
-- captured (so a field is added only when its bytes are there).
local function rng(tvb, off, len)
    if len <= 0 or off < 0 or off + len > tvb:len() then
        return nil
    end
    return tvb(off, len)
end

-- Adds `field` over [off, off+len) when those bytes exist (big-endian).
local function add_be(tree, field, tvb, off, len)
    local r = rng(tvb, off, len)
    if r then
        return tree:add(field, r)
    end
end

-- Adds `field` over [off, off+len) when those bytes exist (little-endian).
local function add_le(tree, field, tvb, off, len)
    local r = rng(tvb, off, len)
    if r then
        return tree:add_le(field, r)
    end
end

-- RFC 1071 ones' complement sum (folded to 16 bits, not complemented) of
-- tvb bytes [off, off+len); an odd last byte is padded with zero.
local function ones_sum(tvb, off, len)
    local sum = 0
    if len <= 0 then
        return 0
    end
    local s = tvb:raw(off, len)
    local n = #s
    local i = 1
    local CHUNK = 512 -- even, so pairs never straddle chunks
    while i <= n do
        local j = math.min(i + CHUNK - 1, n)
        local b = { s:byte(i, j) }
        local m = #b
        for k = 1, m - 1, 2 do
            sum = sum + b[k] * 256 + b[k + 1]
        end
        if m % 2 == 1 then
            sum = sum + b[m] * 256
        end
        i = j + 1
    end
    while sum > 0xffff do
        sum = sum % 65536 + math.floor(sum / 65536)
    end
    return sum
end

local function fold(sum)
    while sum > 0xffff do
        sum = sum % 65536 + math.floor(sum / 65536)
    end
    return sum
end

-- Appends " [Malformed: why]" to the info column once per frame.
local function info_malformed(pinfo, why)
    pinfo.cols.info:append(" [Malformed: " .. why .. "]")
end

local data_dissector = Dissector.get("data")

local function call_data(tvb, pinfo, tree)
    if tvb:len() > 0 then
        data_dissector:call(tvb, pinfo, tree)
    end
end

-- The protocol item for `tvb` (an empty tvb has no range to point at).
local function proto_item(tree, proto, tvb, len)
    local r = rng(tvb, 0, math.min(len, tvb:len()))
    if r then
        return tree:add(proto, r)
    end
    return tree:add(proto)
end

-------------------------------------------------------------------------------
-- netgauge control messages (netgauge/src/control/wire.rs): 40 bytes, LE
-------------------------------------------------------------------------------

local p_ng = Proto("netgauge", "netgauge control message")
local NG_LEN = 40
local ng_kinds = { [1] = "HELLO", [2] = "READY", [3] = "END", [4] = "REPORT", [5] = "BYE" }
local ng_patterns = { [1] = "one_one", [2] = "stream" }

local ngf = {
    magic = ProtoField.string("netgauge.magic", "Magic"),
    kind = ProtoField.uint8("netgauge.kind", "Kind", base.DEC, ng_kinds),
    pattern = ProtoField.uint8("netgauge.pattern", "Pattern", base.DEC, ng_patterns),
    step = ProtoField.uint32("netgauge.step", "Step", base.DEC),
    size = ProtoField.uint64("netgauge.size", "Message size (bytes)", base.DEC),
    count = ProtoField.uint64("netgauge.count", "Count", base.DEC,
        nil, nil, "HELLO: messages in the step, warm-up included; REPORT: received intact"),
    extra = ProtoField.uint64("netgauge.extra", "Extra", base.DEC,
        nil, nil, "HELLO: warm-up iterations; REPORT: bytes received intact"),
}
p_ng.fields = ngf

-- True if `tvb` at `off` holds a netgauge control message (as Ctrl::decode
-- accepts: magic, a known kind and pattern) within `len` bytes.
local function is_netgauge(tvb, off, len)
    if len < NG_LEN or off + NG_LEN > tvb:len() then
        return false
    end
    if tvb:raw(off, 4) ~= "NGv1" then
        return false
    end
    return ng_kinds[tvb(off + 4, 1):uint()] ~= nil and ng_patterns[tvb(off + 5, 1):uint()] ~= nil
end

-- Dissects the control message at the start of `tvb` (is_netgauge was true).
local function dissect_netgauge(tvb, pinfo, tree)
    local t = tree:add(p_ng, tvb(0, NG_LEN))
    t:add(ngf.magic, tvb(0, 4))
    t:add(ngf.kind, tvb(4, 1))
    t:add(ngf.pattern, tvb(5, 1))
    t:add_le(ngf.step, tvb(8, 4))
    t:add_le(ngf.size, tvb(12, 8))
    t:add_le(ngf.count, tvb(20, 8))
    t:add_le(ngf.extra, tvb(28, 8))
    local kind = ng_kinds[tvb(4, 1):uint()]
    local s = string.format("netgauge %s step %d %s size %s", kind, tvb(8, 4):le_uint(),
        ng_patterns[tvb(5, 1):uint()], tostring(tvb(12, 8):le_uint64()))
    if kind == "HELLO" or kind == "REPORT" then
        s = s .. " count " .. tostring(tvb(20, 8):le_uint64())
    end
    t:append_text(": " .. s)
    pinfo.cols.protocol = "netgauge"
    pinfo.cols.info:append(" " .. s)
    return NG_LEN
end

-------------------------------------------------------------------------------
-- CTP (ctp/PROTOCOL.md, ctp/src/wire.rs): 25-byte little-endian header
-------------------------------------------------------------------------------

local p_ctp = Proto("ctp", "Commands Transfer Protocol (CTP v1.2)")
local CTP_HLEN = 25

local ctpf = {
    size = ProtoField.uint16("ctp.size", "Packet size (bytes, header included)", base.DEC),
    command = ProtoField.uint16("ctp.command", "Command", base.DEC, nil, 0x7fff),
    confirmation = ProtoField.bool("ctp.confirmation", "Confirmation", 16, nil, 0x8000),
    number = ProtoField.uint32("ctp.number", "Packet number", base.DEC),
    count = ProtoField.uint32("ctp.count", "Packet count", base.DEC),
    id = ProtoField.uint32("ctp.id", "Packet id", base.HEX_DEC),
    msgsize = ProtoField.uint64("ctp.msgsize", "Message size (bytes)", base.DEC),
    options = ProtoField.uint8("ctp.options", "Options", base.HEX),
    opt_del = ProtoField.bool("ctp.options.delaftererror", "DelAfterError", 8, nil, 0x01),
    opt_noresend = ProtoField.bool("ctp.options.noresend", "NoResend", 8, nil, 0x02),
    opt_unique = ProtoField.bool("ctp.options.uniquecommand", "UniqueCommand", 8, nil, 0x04),
    opt_bcast = ProtoField.bool("ctp.options.broadcast", "Broadcast", 8, nil, 0x08),
    opt_start = ProtoField.bool("ctp.options.startsession", "StartSession", 8, nil, 0x10),
    opt_reserved = ProtoField.uint8("ctp.options.reserved", "Undefined bits", base.HEX, nil, 0xe0),
    data = ProtoField.bytes("ctp.data", "Data"),
    datalen = ProtoField.uint16("ctp.datalen", "Data length (bytes)", base.DEC),
}
p_ctp.fields = ctpf

local ctpe = {
    truncated = ProtoExpert.new("ctp.truncated", "CTP header truncated",
        expert.group.MALFORMED, expert.severity.ERROR),
    size_small = ProtoExpert.new("ctp.size.too_small", "CTP packet size smaller than the header",
        expert.group.MALFORMED, expert.severity.ERROR),
    size_big = ProtoExpert.new("ctp.size.too_big", "CTP packet size beyond the datagram",
        expert.group.MALFORMED, expert.severity.ERROR),
    inconsistent = ProtoExpert.new("ctp.inconsistent", "Inconsistent CTP header",
        expert.group.MALFORMED, expert.severity.ERROR),
    options = ProtoExpert.new("ctp.options.undefined", "Undefined CTP option bits set",
        expert.group.PROTOCOL, expert.severity.WARN),
    trailing = ProtoExpert.new("ctp.trailing", "Bytes after the CTP packet (ignored)",
        expert.group.PROTOCOL, expert.severity.NOTE),
}
p_ctp.experts = ctpe

p_ctp.prefs.edp_ports = Pref.range("CTP ports (EDP)", "",
    "EDP ports whose payload is always decoded as CTP (e.g. 19470, netgauge's default port)", 65535)
p_ctp.prefs.udp_ports = Pref.range("CTP ports (UDP)", "",
    "UDP ports whose payload is always decoded as CTP", 65535)
p_ctp.prefs.heuristic = Pref.bool("Detect CTP by its header", true,
    "Decode an EDP (or UDP) payload as CTP when its 25-byte header is self-consistent "
        .. "and its packet size equals the payload length")

-- The inconsistency of a CTP header as ctp/src/wire.rs Repr::parse finds it
-- (nil when consistent). `tvb` holds at least 25 bytes and `size` is within it.
local function ctp_inconsistency(tvb, size)
    local body = size - CTP_HLEN
    local cmd = tvb(2, 2):le_uint()
    local number = tvb(4, 4):le_uint()
    local count = tvb(8, 4):le_uint()
    local ms_lo = tvb(16, 4):le_uint()
    local ms_hi = tvb(20, 4):le_uint()
    if ms_hi >= 65536 then
        return "message size exceeds 48 bits"
    end
    local msgsize = ms_hi * 4294967296 + ms_lo
    if cmd >= 0x8000 then
        if body ~= 0 then
            return "confirmation with a body"
        end
    elseif count <= 1 then
        if number ~= 0 then
            return "normal command with packet number > 0"
        end
        if msgsize ~= body then
            return "normal command whose message size differs from its body length"
        end
    else
        if number >= count then
            return "packet number not below packet count"
        end
        if body > msgsize then
            return "part larger than its message"
        end
    end
    return nil
end

-- True if the bytes of `tvb` from `off` on are whole, consistent CTP
-- packets, every one but the last a confirmation: CTP over EDP packs the
-- confirmations due to one peer in front of another confirmation or of a
-- data packet (ctp/PROTOCOL.md "Confirmations share a frame").
local function ctp_packed_ok(tvb, off)
    local n = tvb:len()
    if off >= n then
        return false
    end
    while off < n do
        if n - off < CTP_HLEN then
            return false
        end
        local size = tvb(off, 2):le_uint()
        if size < CTP_HLEN or size > n - off then
            return false
        end
        local c = tvb(off, size):tvb()
        local conf = size == CTP_HLEN and c(2, 2):le_uint() >= 0x8000
        if (off + size < n and not conf) or unknown_bits(c(24, 1):uint(), 0x1f) ~= 0
            or ctp_inconsistency(c, size) then
            return false
        end
        off = off + size
    end
    return true
end

-- True if `tvb` looks like exactly one CTP packet, or confirmations packed
-- together (heuristic, see the top).
local function ctp_heuristic_ok(tvb)
    local n = tvb:len()
    if n < CTP_HLEN or n > 65535 then
        return false
    end
    if tvb(0, 2):le_uint() ~= n then
        return ctp_packed_ok(tvb, 0)
    end
    if unknown_bits(tvb(24, 1):uint(), 0x1f) ~= 0 then
        return false
    end
    return ctp_inconsistency(tvb, n) == nil
end

function p_ctp.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    pinfo.cols.protocol = "CTP"
    local t = proto_item(tree, p_ctp, tvb, CTP_HLEN)
    if n < CTP_HLEN then
        -- Show what is there, then say why it stops.
        add_le(t, ctpf.size, tvb, 0, 2)
        add_le(t, ctpf.command, tvb, 2, 2)
        add_le(t, ctpf.confirmation, tvb, 2, 2)
        local msg = string.format("CTP header truncated: %d bytes needed, %d present", CTP_HLEN, n)
        t:add_proto_expert_info(ctpe.truncated, msg)
        pinfo.cols.info:set("CTP")
        info_malformed(pinfo, "header truncated")
        return n
    end
    local size = tvb(0, 2):le_uint()
    local cmdfield = tvb(2, 2):le_uint()
    local command = cmdfield % 0x8000
    local confirm = cmdfield >= 0x8000
    local number = tvb(4, 4):le_uint()
    local count = tvb(8, 4):le_uint()
    local id = tvb(12, 4):le_uint()
    local opts = tvb(24, 1):uint()

    local size_item = t:add_le(ctpf.size, tvb(0, 2))
    t:add_le(ctpf.command, tvb(2, 2))
    t:add_le(ctpf.confirmation, tvb(2, 2))
    t:add_le(ctpf.number, tvb(4, 4))
    t:add_le(ctpf.count, tvb(8, 4))
    t:add_le(ctpf.id, tvb(12, 4))
    t:add_le(ctpf.msgsize, tvb(16, 8))
    local ot = t:add(ctpf.options, tvb(24, 1))
    ot:add(ctpf.opt_del, tvb(24, 1))
    ot:add(ctpf.opt_noresend, tvb(24, 1))
    ot:add(ctpf.opt_unique, tvb(24, 1))
    ot:add(ctpf.opt_bcast, tvb(24, 1))
    ot:add(ctpf.opt_start, tvb(24, 1))
    local names = {}
    for _, o in ipairs({ { 0x01, "DelAfterError" }, { 0x02, "NoResend" }, { 0x04, "UniqueCommand" },
        { 0x08, "Broadcast" }, { 0x10, "StartSession" } }) do
        if has(opts, o[1]) then
            names[#names + 1] = o[2]
        end
    end
    if #names > 0 then
        ot:append_text(" (" .. table.concat(names, ", ") .. ")")
    end
    if unknown_bits(opts, 0x1f) ~= 0 then
        ot:add(ctpf.opt_reserved, tvb(24, 1))
        ot:add_proto_expert_info(ctpe.options,
            string.format("Undefined CTP option bits 0x%02x set", unknown_bits(opts, 0x1f)))
    end

    local info
    if confirm then
        info = string.format("Confirmation of command %d Id=0x%08x", command, id)
    else
        info = string.format("Command %d Id=0x%08x", command, id)
    end
    if count > 1 then
        info = info .. string.format(" Part=%d/%d", number + 1, count)
    end
    if has(opts, 0x10) then
        info = info .. " [StartSession]"
    end
    if has(opts, 0x08) then
        info = info .. " [Broadcast]"
    end
    pinfo.cols.info:set(info)

    if size < CTP_HLEN then
        size_item:add_proto_expert_info(ctpe.size_small,
            string.format("CTP packet size %d is smaller than the 25-byte header", size))
        info_malformed(pinfo, "packet size below 25")
        return n
    end
    if size > n then
        size_item:add_proto_expert_info(ctpe.size_big,
            string.format("CTP packet size %d exceeds the %d bytes present", size, n))
        info_malformed(pinfo, "packet size beyond the datagram")
        call_data(tvb(CTP_HLEN):tvb(), pinfo, tree)
        return n
    end
    local body = size - CTP_HLEN
    pinfo.cols.info:append(string.format(" Len=%d", body))
    t:add(ctpf.datalen, tvb(0, 2), body):set_generated()
    local why = ctp_inconsistency(tvb, size)
    if why then
        t:add_proto_expert_info(ctpe.inconsistent, "Inconsistent CTP header: " .. why)
        info_malformed(pinfo, why)
    end
    if size < n and confirm and size == CTP_HLEN and ctp_packed_ok(tvb, size) then
        -- Packets packed behind this confirmation: one CTP tree each. The
        -- Info column names a data packet (last) if there is one.
        local info_text = tostring(pinfo.cols.info)
        local confs = 0
        local data_info = nil
        local off = size
        while off < n do
            local s = tvb(off, 2):le_uint()
            p_ctp.dissector(tvb(off, s):tvb(), pinfo, tree)
            if s == CTP_HLEN and tvb(off + 2, 2):le_uint() >= 0x8000 then
                confs = confs + 1
            else
                data_info = tostring(pinfo.cols.info)
            end
            off = off + s
        end
        if data_info then
            -- The first confirmation counts as packed with the data packet.
            info_text = data_info
            confs = confs + 1
        end
        pinfo.cols.info:set(string.format("%s (+%d packed confirmations)", info_text, confs))
        return n
    end
    if size < n then
        t:add_tvb_expert_info(ctpe.trailing, tvb(size, n - size),
            string.format("%d bytes after the CTP packet (ignored)", n - size))
    end
    if body > 0 then
        local d = tvb(CTP_HLEN, body)
        if not confirm and number == 0 and body == NG_LEN and is_netgauge(tvb, CTP_HLEN, body) then
            dissect_netgauge(d:tvb(), pinfo, tree)
        else
            t:add(ctpf.data, d)
        end
    end
    return size
end

-- A range preference ("5201,7000-7010") as a list of {low, high}.
local function parse_ranges(text)
    local out = {}
    for part in string.gmatch(tostring(text or ""), "[^,]+") do
        local a, b = string.match(part, "^%s*(%d+)%s*%-%s*(%d+)%s*$")
        if not a then
            a = string.match(part, "^%s*(%d+)%s*$")
            b = a
        end
        if a then
            out[#out + 1] = { tonumber(a), tonumber(b) }
        end
    end
    return out
end

local function in_ranges(ranges, v)
    for _, r in ipairs(ranges) do
        if v >= r[1] and v <= r[2] then
            return true
        end
    end
    return false
end

-- The EDP ports of the "CTP ports (EDP)" preference (set by apply_prefs).
local ctp_edp_ports = {}

-------------------------------------------------------------------------------
-- EDP (PROTOCOL.md, edp/src/wire.rs, edp/src/echo.rs)
-------------------------------------------------------------------------------

local p_edp = Proto("cnedp", "clusternet EDP (Ethernet Datagram Protocol)")
local EDP_HLEN = 6

local ctrl_types = { [1] = "Echo request", [2] = "Echo reply" }

local edpf = {
    srcport = ProtoField.uint16("cnedp.srcport", "Source port", base.DEC),
    dstport = ProtoField.uint16("cnedp.dstport", "Destination port", base.DEC),
    port = ProtoField.uint16("cnedp.port", "Source or destination port", base.DEC),
    len = ProtoField.uint16("cnedp.len", "Payload length (bytes)", base.DEC),
    payload = ProtoField.bytes("cnedp.payload", "Payload"),
    ctrl = ProtoField.none("cnedp.control", "Control message"),
    ctrl_type = ProtoField.uint8("cnedp.control.type", "Type", base.DEC, ctrl_types),
    ctrl_zero = ProtoField.uint8("cnedp.control.reserved", "Reserved", base.HEX),
    ctrl_ident = ProtoField.uint16("cnedp.control.ident", "Identifier", base.HEX_DEC),
    ctrl_seq = ProtoField.uint32("cnedp.control.seq", "Sequence number", base.DEC),
    ctrl_data = ProtoField.bytes("cnedp.control.data", "Data"),
}
p_edp.fields = edpf

local edpe = {
    truncated = ProtoExpert.new("cnedp.truncated", "EDP header truncated",
        expert.group.MALFORMED, expert.severity.ERROR),
    len = ProtoExpert.new("cnedp.len.bad", "EDP payload length beyond the frame",
        expert.group.MALFORMED, expert.severity.ERROR),
    ctrl_short = ProtoExpert.new("cnedp.control.truncated", "EDP control message truncated",
        expert.group.MALFORMED, expert.severity.ERROR),
    ctrl_type = ProtoExpert.new("cnedp.control.type.unknown", "Unknown EDP control message type",
        expert.group.MALFORMED, expert.severity.ERROR),
}
p_edp.experts = edpe

p_edp.prefs.ethertype = Pref.string("Ethertype", "0x88B5",
    "Ethertype of EDP frames, hex (0x...) or decimal (clusternet default 0x88B5)")

-- Sub-dissectors by EDP port ("Decode As", CTP ports, MAK later).
local edp_port_table = DissectorTable.new("cnedp.port", "clusternet EDP port", ftypes.UINT16, base.DEC, p_edp)

-- Heuristics tried in order on EDP payloads not claimed by a port: name, fn.
local edp_heuristics = {}

clusternet.edp_port_table = edp_port_table
-- Adds a heuristic for EDP payloads: fn(tvb, pinfo, tree) returns true when
-- it recognised and dissected `tvb` (the EDP payload, padding trimmed).
function clusternet.add_edp_heuristic(name, fn)
    edp_heuristics[#edp_heuristics + 1] = { name = name, fn = fn }
end

local function dissect_control(tvb, pinfo, tree)
    local n = tvb:len()
    local ct = proto_item(tree, edpf.ctrl, tvb, n)
    if n < 8 then
        add_be(ct, edpf.ctrl_type, tvb, 0, 1)
        ct:add_proto_expert_info(edpe.ctrl_short,
            string.format("EDP control message truncated: 8 bytes needed, %d present", n))
        pinfo.cols.info:append(" Control")
        info_malformed(pinfo, "control message truncated")
        return
    end
    local ty = tvb(0, 1):uint()
    local ti = ct:add(edpf.ctrl_type, tvb(0, 1))
    ct:add(edpf.ctrl_zero, tvb(1, 1))
    ct:add(edpf.ctrl_ident, tvb(2, 2))
    ct:add(edpf.ctrl_seq, tvb(4, 4))
    if n > 8 then
        ct:add(edpf.ctrl_data, tvb(8, n - 8))
    end
    local name = ctrl_types[ty]
    if not name then
        ti:add_proto_expert_info(edpe.ctrl_type, string.format("Unknown EDP control message type %d", ty))
        pinfo.cols.info:append(string.format(" Control type %d", ty))
        info_malformed(pinfo, "unknown control type")
        return
    end
    ct:append_text(": " .. name)
    pinfo.cols.info:append(string.format(" %s Id=0x%04x Seq=%d", name, tvb(2, 2):uint(), tvb(4, 4):uint()))
end

-- Dissects an EDP payload (padding trimmed) for ports `sport`, `dport`.
local function dissect_edp_payload(tvb, pinfo, tree, t, sport, dport)
    if sport == 0 or dport == 0 then
        dissect_control(tvb, pinfo, t)
        return
    end
    for _, port in ipairs({ dport, sport }) do
        local d = edp_port_table:get_dissector(port)
        if d then
            d:call(tvb, pinfo, tree)
            return
        end
    end
    if p_ctp.prefs.heuristic and ctp_heuristic_ok(tvb) then
        p_ctp.dissector(tvb, pinfo, tree)
        return
    end
    for _, h in ipairs(edp_heuristics) do
        if h.fn(tvb, pinfo, tree) then
            return
        end
    end
    if is_netgauge(tvb, 0, tvb:len()) and tvb:len() == NG_LEN then
        dissect_netgauge(tvb, pinfo, tree)
        return
    end
    t:add(edpf.payload, tvb())
end

function p_edp.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    pinfo.cols.protocol = "EDP"
    local t = proto_item(tree, p_edp, tvb, EDP_HLEN)
    if n < EDP_HLEN then
        add_be(t, edpf.srcport, tvb, 0, 2)
        add_be(t, edpf.dstport, tvb, 2, 2)
        t:add_proto_expert_info(edpe.truncated,
            string.format("EDP header truncated: 6 bytes needed, %d present", n))
        pinfo.cols.info:set("EDP")
        info_malformed(pinfo, "header truncated")
        return n
    end
    local sport, dport, len = tvb(0, 2):uint(), tvb(2, 2):uint(), tvb(4, 2):uint()
    t:add(edpf.srcport, tvb(0, 2))
    t:add(edpf.dstport, tvb(2, 2))
    t:add(edpf.port, tvb(0, 2)):set_hidden()
    t:add(edpf.port, tvb(2, 2)):set_hidden()
    local li = t:add(edpf.len, tvb(4, 2))
    t:append_text(string.format(", Src Port: %d, Dst Port: %d, Len: %d", sport, dport, len))
    pinfo.cols.info:set(string.format("%d → %d Len=%d", sport, dport, len))
    if EDP_HLEN + len > n then
        li:add_proto_expert_info(edpe.len,
            string.format("EDP payload length %d exceeds the %d bytes after the header", len, n - EDP_HLEN))
        info_malformed(pinfo, "payload length beyond the frame")
        if n > EDP_HLEN then
            t:add(edpf.payload, tvb(EDP_HLEN, n - EDP_HLEN))
        end
        return n
    end
    if len > 0 then
        dissect_edp_payload(tvb(EDP_HLEN, len):tvb(), pinfo, tree, t, sport, dport)
    elseif sport == 0 or dport == 0 then
        local ct = t:add(edpf.ctrl)
        ct:add_proto_expert_info(edpe.ctrl_short, "EDP control message truncated: 8 bytes needed, 0 present")
        pinfo.cols.info:append(" Control")
        info_malformed(pinfo, "control message truncated")
    elseif in_ranges(ctp_edp_ports, dport) or in_ranges(ctp_edp_ports, sport) then
        -- An empty datagram on a CTP port (no tvb can be empty).
        local ct = tree:add(p_ctp)
        pinfo.cols.protocol = "CTP"
        ct:add_proto_expert_info(ctpe.truncated, "CTP header truncated: 25 bytes needed, 0 present")
        info_malformed(pinfo, "CTP header truncated")
    end
    -- What follows the payload is Ethernet padding (the Ethernet dissector
    -- shows it as such because we claim only header + payload).
    return EDP_HLEN + len
end

-------------------------------------------------------------------------------
-- ESP (esp/PROTOCOL.md, esp/src/wire.rs)
-------------------------------------------------------------------------------

local p_esp = Proto("cnesp", "clusternet ESP (Ethernet Streaming Protocol)")
local ESP_HLEN = 20

local checksum_status = { [0] = "Bad", [1] = "Good", [2] = "Unverified", [3] = "Not present" }
local option_kinds = { [0] = "End of options", [1] = "No-operation", [5] = "SACK",
    [6] = "Negotiation (authentication, encryption)" }
local auth_methods = { [0] = "none", [1] = "siphash-2-4-128" }
local enc_methods = { [0] = "none" }

local espf = {
    srcport = ProtoField.uint16("cnesp.srcport", "Source port", base.DEC),
    dstport = ProtoField.uint16("cnesp.dstport", "Destination port", base.DEC),
    port = ProtoField.uint16("cnesp.port", "Source or destination port", base.DEC),
    len = ProtoField.uint16("cnesp.len", "Payload length (bytes)", base.DEC),
    flags = ProtoField.uint8("cnesp.flags", "Flags", base.HEX),
    fin = ProtoField.bool("cnesp.flags.fin", "FIN", 8, nil, 0x01),
    syn = ProtoField.bool("cnesp.flags.syn", "SYN", 8, nil, 0x02),
    rst = ProtoField.bool("cnesp.flags.rst", "RST", 8, nil, 0x04),
    ack_flag = ProtoField.bool("cnesp.flags.ack", "ACK", 8, nil, 0x10),
    reserved = ProtoField.uint8("cnesp.flags.reserved", "Undefined bits", base.HEX, nil, 0xe8),
    flags_str = ProtoField.string("cnesp.flags.str", "Flags (text)"),
    hdrlen = ProtoField.uint8("cnesp.hdrlen", "Header length (bytes, options included)", base.DEC),
    seq = ProtoField.uint32("cnesp.seq", "Sequence number (segments)", base.DEC),
    nxtseq = ProtoField.uint32("cnesp.nxtseq", "Next sequence number", base.DEC),
    ack = ProtoField.uint32("cnesp.ack", "Acknowledgement number (segments)", base.DEC),
    window = ProtoField.uint16("cnesp.window", "Window (segments)", base.DEC),
    checksum = ProtoField.uint16("cnesp.checksum", "Checksum", base.HEX),
    checksum_calc = ProtoField.uint16("cnesp.checksum.calculated", "Calculated checksum", base.HEX),
    checksum_status = ProtoField.uint8("cnesp.checksum.status", "Checksum status", base.DEC, checksum_status),
    options = ProtoField.bytes("cnesp.options", "Options"),
    opt_kind = ProtoField.uint8("cnesp.option.kind", "Kind", base.DEC, option_kinds),
    opt_len = ProtoField.uint8("cnesp.option.len", "Length", base.DEC),
    sack_count = ProtoField.uint8("cnesp.sack.count", "SACK blocks", base.DEC),
    sack_left = ProtoField.uint32("cnesp.sack.left", "SACK left edge", base.DEC),
    sack_right = ProtoField.uint32("cnesp.sack.right", "SACK right edge", base.DEC),
    dsack = ProtoField.bool("cnesp.sack.dsack", "D-SACK (RFC 2883)"),
    nego_nauth = ProtoField.uint8("cnesp.nego.auth_count", "Authentication methods", base.DEC),
    nego_auth = ProtoField.uint8("cnesp.nego.auth", "Authentication method", base.DEC, auth_methods),
    nego_nenc = ProtoField.uint8("cnesp.nego.enc_count", "Encryption methods", base.DEC),
    nego_enc = ProtoField.uint8("cnesp.nego.enc", "Encryption method", base.DEC, enc_methods),
    padding = ProtoField.bytes("cnesp.options.padding", "Option padding"),
    payload = ProtoField.bytes("cnesp.payload", "Payload"),
}
p_esp.fields = espf

local espe = {
    truncated = ProtoExpert.new("cnesp.truncated", "ESP header truncated",
        expert.group.MALFORMED, expert.severity.ERROR),
    hdrlen = ProtoExpert.new("cnesp.hdrlen.bad", "ESP header length invalid",
        expert.group.MALFORMED, expert.severity.ERROR),
    len = ProtoExpert.new("cnesp.len.bad", "ESP header and payload beyond the frame",
        expert.group.MALFORMED, expert.severity.ERROR),
    flags = ProtoExpert.new("cnesp.flags.bad", "Invalid ESP flags",
        expert.group.MALFORMED, expert.severity.ERROR),
    option = ProtoExpert.new("cnesp.option.bad", "Malformed ESP option",
        expert.group.MALFORMED, expert.severity.ERROR),
    checksum_bad = ProtoExpert.new("cnesp.checksum.bad", "Bad ESP checksum",
        expert.group.CHECKSUM, expert.severity.ERROR),
}
p_esp.experts = espe

p_esp.prefs.ethertype = Pref.string("Ethertype", "0x88B6",
    "Ethertype of ESP frames, hex (0x...) or decimal (clusternet default 0x88B6)")
p_esp.prefs.check_checksum = Pref.bool("Validate the checksum", true,
    "Verify the RFC 1071 checksum over the ESP header (options included) and payload")

local flag_names = { { 0x01, "FIN" }, { 0x02, "SYN" }, { 0x04, "RST" }, { 0x10, "ACK" } }

-- Dissects the option bytes [20, hlen) like EspRepr::parse; returns the
-- malformation found (nil if none) and the SACK blocks as text for the info
-- column.
local function dissect_esp_options(tvb, t, hlen, ack, ackflag, synrst)
    local ot = t:add(espf.options, tvb(ESP_HLEN, hlen - ESP_HLEN))
    ot:append_text(string.format(" (%d bytes)", hlen - ESP_HLEN))
    local i = ESP_HLEN
    local sack_seen = false
    local nego_seen = false
    local info = ""
    while i < hlen do
        local kind = tvb(i, 1):uint()
        if kind == 0 then
            local et = ot:add(espf.opt_kind, tvb(i, 1))
            et:prepend_text("End of options: ")
            if i + 1 < hlen then
                ot:add(espf.padding, tvb(i + 1, hlen - i - 1))
            end
            break
        elseif kind == 1 then
            ot:add(espf.opt_kind, tvb(i, 1)):prepend_text("No-operation: ")
            i = i + 1
        else
            if i + 2 > hlen then
                local k = ot:add(espf.opt_kind, tvb(i, 1))
                k:add_proto_expert_info(espe.option, "ESP option length missing (options truncated)")
                return "option length missing", info
            end
            local len = tvb(i + 1, 1):uint()
            if len < 2 or i + len > hlen then
                local k = ot:add(espf.opt_kind, tvb(i, 1))
                local l = ot:add(espf.opt_len, tvb(i + 1, 1))
                l:add_proto_expert_info(espe.option, string.format(
                    "ESP option length %d out of range: %d option bytes left", len, hlen - i))
                return "option length out of range", info
            end
            if kind == 6 then
                -- esp/src/wire/nego.rs: A, A auth ids, E, E enc ids.
                local nt = ot:add(tvb(i, len), "Negotiation")
                nt:add(espf.opt_kind, tvb(i, 1))
                nt:add(espf.opt_len, tvb(i + 1, 1))
                if nego_seen or not synrst then
                    nt:add_proto_expert_info(espe.option,
                        "Negotiation option twice, or on a segment other than SYN, SYN-ACK or RST")
                    return "misplaced negotiation option", info
                end
                nego_seen = true
                local body = len - 2
                local na = body >= 1 and tvb(i + 2, 1):uint() or 0
                if body < 1 or na == 0 or na > 8 or body - 1 < na + 1 then
                    nt:add_proto_expert_info(espe.option, "Malformed negotiation option: authentication count")
                    return "malformed negotiation option", info
                end
                local ne = tvb(i + 3 + na, 1):uint()
                if ne > 8 or body - 2 - na ~= ne then
                    nt:add_proto_expert_info(espe.option, "Malformed negotiation option: encryption count")
                    return "malformed negotiation option", info
                end
                nt:add(espf.nego_nauth, tvb(i + 2, 1))
                local names = {}
                for k = 0, na - 1 do
                    local id = tvb(i + 3 + k, 1):uint()
                    nt:add(espf.nego_auth, tvb(i + 3 + k, 1))
                    names[#names + 1] = auth_methods[id] or string.format("#%d", id)
                end
                nt:add(espf.nego_nenc, tvb(i + 3 + na, 1))
                for k = 0, ne - 1 do
                    nt:add(espf.nego_enc, tvb(i + 4 + na + k, 1))
                end
                local list = table.concat(names, ",")
                nt:append_text(": auth " .. list)
                info = info .. " AUTH=" .. list
            elseif kind == 5 then
                local st = ot:add(tvb(i, len), "SACK")
                st:add(espf.opt_kind, tvb(i, 1))
                st:add(espf.opt_len, tvb(i + 1, 1))
                local body = len - 2
                local nblocks = math.floor(body / 8)
                if body == 0 or body % 8 ~= 0 or nblocks > 4 or sack_seen then
                    local why = sack_seen and "second SACK option"
                        or string.format("SACK option of %d bytes (2 + 8 n, n = 1..4)", len)
                    st:add_proto_expert_info(espe.option, "Malformed SACK option: " .. why)
                    return "malformed SACK option", info
                end
                sack_seen = true
                st:add(espf.sack_count, tvb(i + 1, 1), nblocks):set_generated()
                for b = 0, nblocks - 1 do
                    local off = i + 2 + 8 * b
                    local left, right = tvb(off, 4):uint(), tvb(off + 4, 4):uint()
                    local bt = st:add(tvb(off, 8), string.format("Block %d: [%d, %d)", b + 1, left, right))
                    bt:add(espf.sack_left, tvb(off, 4))
                    bt:add(espf.sack_right, tvb(off + 4, 4))
                    -- RFC 2883: a first block at or below the cumulative ACK is a D-SACK.
                    local d = (right - left) % 4294967296
                    if b == 0 and ackflag and ((ack - right) % 4294967296) < 2147483648 then
                        bt:add(espf.dsack, tvb(off, 8), true):set_generated()
                        bt:append_text(" (D-SACK)")
                    end
                    info = info .. string.format(" SLE=%d SRE=%d", left, right)
                    if d == 0 or d >= 2147483648 then
                        bt:add_proto_expert_info(espe.option, "Empty SACK block")
                        return "empty SACK block", info
                    end
                end
                st:append_text(string.format(": %d block%s", nblocks, nblocks == 1 and "" or "s"))
            else
                local ut = ot:add(tvb(i, len), string.format("Unknown option kind %d (skipped)", kind))
                ut:add(espf.opt_kind, tvb(i, 1))
                ut:add(espf.opt_len, tvb(i + 1, 1))
            end
            i = i + len
        end
    end
    return nil, info
end

function p_esp.dissector(tvb, pinfo, tree)
    local n = tvb:len()
    pinfo.cols.protocol = "ESP"
    local t = proto_item(tree, p_esp, tvb, ESP_HLEN)
    if n < ESP_HLEN then
        add_be(t, espf.srcport, tvb, 0, 2)
        add_be(t, espf.dstport, tvb, 2, 2)
        add_be(t, espf.len, tvb, 4, 2)
        add_be(t, espf.flags, tvb, 6, 1)
        add_be(t, espf.hdrlen, tvb, 7, 1)
        add_be(t, espf.seq, tvb, 8, 4)
        add_be(t, espf.ack, tvb, 12, 4)
        add_be(t, espf.window, tvb, 16, 2)
        t:add_proto_expert_info(espe.truncated,
            string.format("ESP header truncated: 20 bytes needed, %d present", n))
        pinfo.cols.info:set("ESP")
        info_malformed(pinfo, "header truncated")
        return n
    end
    local sport, dport = tvb(0, 2):uint(), tvb(2, 2):uint()
    local plen, flags, hlen = tvb(4, 2):uint(), tvb(6, 1):uint(), tvb(7, 1):uint()
    local seq, ack, win, csum = tvb(8, 4):uint(), tvb(12, 4):uint(), tvb(16, 2):uint(), tvb(18, 2):uint()

    t:add(espf.srcport, tvb(0, 2))
    t:add(espf.dstport, tvb(2, 2))
    t:add(espf.port, tvb(0, 2)):set_hidden()
    t:add(espf.port, tvb(2, 2)):set_hidden()
    local len_item = t:add(espf.len, tvb(4, 2))

    local names = {}
    for _, f in ipairs(flag_names) do
        if has(flags, f[1]) then
            names[#names + 1] = f[2]
        end
    end
    local fstr = table.concat(names, ", ")
    local ft = t:add(espf.flags, tvb(6, 1))
    ft:append_text(" (" .. (fstr == "" and "none" or fstr) .. ")")
    ft:add(espf.fin, tvb(6, 1))
    ft:add(espf.syn, tvb(6, 1))
    ft:add(espf.rst, tvb(6, 1))
    ft:add(espf.ack_flag, tvb(6, 1))
    ft:add(espf.flags_str, tvb(6, 1), fstr):set_generated()
    local hl_item = t:add(espf.hdrlen, tvb(7, 1))
    t:add(espf.seq, tvb(8, 4))
    local syn, fin, rst, ackf = has(flags, 0x02), has(flags, 0x01), has(flags, 0x04), has(flags, 0x10)
    local consumes = (syn or fin or plen > 0) and 1 or 0
    t:add(espf.nxtseq, tvb(8, 4), (seq + consumes) % 4294967296):set_generated()
    t:add(espf.ack, tvb(12, 4))
    t:add(espf.window, tvb(16, 2))
    local ck_item = t:add(espf.checksum, tvb(18, 2))

    local info = string.format("%d → %d [%s] Seq=%d", sport, dport, fstr == "" and "<None>" or fstr, seq)
    if ackf then
        info = info .. string.format(" Ack=%d", ack)
    end
    info = info .. string.format(" Win=%d Len=%d", win, plen)
    pinfo.cols.info:set(info)
    t:append_text(string.format(", Src Port: %d, Dst Port: %d, Seq: %d%s, Len: %d", sport, dport, seq,
        ackf and string.format(", Ack: %d", ack) or "", plen))

    local malformed = nil
    local unknown = unknown_bits(flags, 0x17)
    if unknown ~= 0 then
        ft:add(espf.reserved, tvb(6, 1))
        ft:add_proto_expert_info(espe.flags, string.format("Undefined ESP flag bits 0x%02x set", unknown))
        malformed = "undefined flag bits"
    end
    if syn and (rst or fin) then
        ft:add_proto_expert_info(espe.flags, "SYN together with RST or FIN")
        malformed = malformed or "SYN with RST or FIN"
    end
    if (syn or fin) and plen ~= 0 then
        len_item:add_proto_expert_info(espe.flags, "SYN or FIN segment with payload")
        malformed = malformed or "SYN or FIN with payload"
    end
    if hlen < ESP_HLEN then
        hl_item:add_proto_expert_info(espe.hdrlen,
            string.format("ESP header length %d is below the 20-byte fixed header", hlen))
        info_malformed(pinfo, "header length below 20")
        return n
    end
    if hlen > n then
        hl_item:add_proto_expert_info(espe.hdrlen,
            string.format("ESP header length %d exceeds the %d bytes present (options truncated)", hlen, n))
        info_malformed(pinfo, "options truncated")
        if n > ESP_HLEN then
            t:add(espf.options, tvb(ESP_HLEN, n - ESP_HLEN))
        end
        return n
    end
    local need = hlen + plen
    if need > n then
        len_item:add_proto_expert_info(espe.len, string.format(
            "ESP header (%d) + payload length (%d) = %d bytes exceed the %d bytes present", hlen, plen, need, n))
        info_malformed(pinfo, "payload length beyond the frame")
        if n > hlen then
            t:add(espf.payload, tvb(hlen, n - hlen))
        end
        return n
    end

    -- Checksum (RFC 1071 over header with options and payload; 0 = not computed).
    if csum == 0 then
        t:add(espf.checksum_status, tvb(18, 2), 3):set_generated()
        ck_item:append_text(" [not computed]")
    elseif p_esp.prefs.check_checksum then
        local without = fold(ones_sum(tvb, 0, 18) + ones_sum(tvb, 20, need - 20))
        local calc = 0xffff - without
        if calc == 0 then
            calc = 0xffff
        end
        local good = fold(without + csum) == 0xffff
        t:add(espf.checksum_calc, tvb(18, 2), calc):set_generated()
        t:add(espf.checksum_status, tvb(18, 2), good and 1 or 0):set_generated()
        if good then
            ck_item:append_text(" [correct]")
        else
            ck_item:append_text(string.format(" [incorrect, should be 0x%04x]", calc))
            ck_item:add_proto_expert_info(espe.checksum_bad,
                string.format("Bad ESP checksum 0x%04x, should be 0x%04x", csum, calc))
            malformed = malformed or "bad checksum"
        end
    else
        t:add(espf.checksum_status, tvb(18, 2), 2):set_generated()
    end

    if hlen > ESP_HLEN then
        local why, sinfo = dissect_esp_options(tvb, t, hlen, ack, ackf, syn or rst)
        pinfo.cols.info:append(sinfo)
        if why then
            malformed = malformed or why
        end
    end
    if malformed then
        info_malformed(pinfo, malformed)
    end
    if plen > 0 then
        local ptvb = tvb(hlen, plen):tvb()
        if is_netgauge(ptvb, 0, plen) then
            t:add(espf.payload, tvb(hlen, plen))
            dissect_netgauge(ptvb, pinfo, tree)
        else
            t:add(espf.payload, tvb(hlen, plen))
        end
    end
    return need
end

-------------------------------------------------------------------------------
-- Registration: ethertypes (preferences), CTP ports, UDP heuristic
-------------------------------------------------------------------------------

local ethertype_table = DissectorTable.get("ethertype")
local udp_port_table = DissectorTable.get("udp.port")
local registered = { edp = nil, esp = nil, ctp_edp = "", ctp_udp = "" }

-- The ethertype preference `value` as a number; `default` (with a message
-- on stderr) when it is not a number in 0x0600..0xFFFF (Ethernet II types).
local warned = {}
local function parse_ethertype(name, value, default)
    local v = tonumber(value)
    if v == nil or v ~= math.floor(v) or v < 0x600 or v > 0xffff then
        local key = name .. "=" .. tostring(value)
        if warned[key] then
            return default
        end
        warned[key] = true
        io.stderr:write(string.format(
            "clusternet.lua: %s ethertype %q is not a number in 0x0600..0xFFFF; using 0x%04X\n",
            name, tostring(value), default))
        return default
    end
    return v
end

local function apply_prefs()
    local e = parse_ethertype("EDP", p_edp.prefs.ethertype, 0x88B5)
    local s = parse_ethertype("ESP", p_esp.prefs.ethertype, 0x88B6)
    if registered.edp ~= e or registered.esp ~= s then
        -- Remove both before adding either: the two may swap values.
        if registered.edp then
            ethertype_table:remove(registered.edp, p_edp)
        end
        if registered.esp then
            ethertype_table:remove(registered.esp, p_esp)
        end
        ethertype_table:add(e, p_edp)
        ethertype_table:add(s, p_esp)
        registered.edp, registered.esp = e, s
    end
    local ep = tostring(p_ctp.prefs.edp_ports or "")
    ctp_edp_ports = parse_ranges(ep)
    if registered.ctp_edp ~= ep then
        if registered.ctp_edp ~= "" then
            edp_port_table:remove(registered.ctp_edp, p_ctp)
        end
        if ep ~= "" then
            edp_port_table:add(ep, p_ctp)
        end
        registered.ctp_edp = ep
    end
    local up = tostring(p_ctp.prefs.udp_ports or "")
    if registered.ctp_udp ~= up then
        if registered.ctp_udp ~= "" then
            udp_port_table:remove(registered.ctp_udp, p_ctp)
        end
        if up ~= "" then
            udp_port_table:add(up, p_ctp)
        end
        registered.ctp_udp = up
    end
end

p_edp.prefs_changed = apply_prefs
p_esp.prefs_changed = apply_prefs
p_ctp.prefs_changed = apply_prefs
apply_prefs()

-- CTP over UDP (wire-compatible with CTP v1.2) by the same heuristic.
p_ctp:register_heuristic("udp", function(tvb, pinfo, tree)
    if not p_ctp.prefs.heuristic or not ctp_heuristic_ok(tvb) then
        return false
    end
    p_ctp.dissector(tvb, pinfo, tree)
    return true
end)

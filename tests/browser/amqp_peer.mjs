// rhea as one end of the AMQP round-trip matrix (tests/interop/
// test_amqp_matrix.py): sends the messages described on stdin, or
// receives `count` and describes them on stdout, every value with its
// AMQP type, in the same JSON the Python end writes.
//
//   node amqp_peer.mjs send HOST:PORT ADDRESS < messages.json
//   node amqp_peer.mjs receive HOST:PORT ADDRESS COUNT > messages.json
//
// A value is {"t": type, "v": value}: 64-bit integers as decimal strings,
// decimals, binary and uuids as hex, a char as its one-character string,
// a list's items and a map's [key, value] pairs as values, an array as
// {"t": "array", "e": element type, "v": [values]}.
import rhea from "rhea";

const { types } = rhea;
const [mode, address, node, count] = process.argv.slice(2);
const [host, port] = address.split(":");

// 64 bits, big-endian, from a decimal string.
function eight(text, signed) {
  const b = Buffer.alloc(8);
  if (signed) b.writeBigInt64BE(BigInt(text));
  else b.writeBigUInt64BE(BigInt(text));
  return b;
}

// A 64-bit integer rhea read: a number when it fits, else its 8 bytes.
function decimal(v, signed) {
  if (!Buffer.isBuffer(v)) return String(v);
  return String(signed ? v.readBigInt64BE(0) : v.readBigUInt64BE(0));
}

const hex = (b) => Buffer.from(b).toString("hex");
const uuidText = (b) => hex(b).replace(/^(.{8})(.{4})(.{4})(.{4})(.{12})$/, "$1-$2-$3-$4-$5");

// Array elements: one constructor for all, and the raw value it writes.
const ELEMENTS = {
  null: [0x40, () => null],
  bool: [0x56, (v) => (v ? 1 : 0)],
  ubyte: [0x50, (v) => v],
  ushort: [0x60, (v) => v],
  uint: [0x70, (v) => v],
  ulong: [0x80, (v) => eight(v, false)],
  byte: [0x51, (v) => v],
  short: [0x61, (v) => v],
  int: [0x71, (v) => v],
  long: [0x81, (v) => eight(v, true)],
  float: [0x72, (v) => v],
  double: [0x82, (v) => v],
  char: [0x73, (v) => v.codePointAt(0)],
  timestamp: [0x83, (v) => v],
  uuid: [0x98, (v) => Buffer.from(v.replace(/-/g, ""), "hex")],
  binary: [0xb0, (v) => Buffer.from(v, "hex")],
  string: [0xb1, (v) => v],
  symbol: [0xb3, (v) => v],
};

// A described value as rhea's typed value.
function wrap({ t, v, e }) {
  switch (t) {
    case "null": return types.Null();
    case "bool": return types.wrap_boolean(v);
    case "ubyte": return types.Ubyte(v);
    case "ushort": return types.Ushort(v);
    case "uint": return types.wrap_uint(v);
    case "ulong": return types.wrap_ulong(eight(v, false));
    case "byte": return types.Byte(v);
    case "short": return types.Short(v);
    case "int": return types.wrap_int(v);
    case "long": return types.wrap_long(eight(v, true));
    case "float": return types.Float(v);
    case "double": return types.Double(v);
    case "decimal32": return types.Decimal32(Buffer.from(v, "hex"));
    case "decimal64": return types.Decimal64(Buffer.from(v, "hex"));
    case "decimal128": return types.Decimal128(Buffer.from(v, "hex"));
    case "char": return types.CharUTF32(v.codePointAt(0));
    case "timestamp": return types.Timestamp(v);
    case "uuid": return types.Uuid(Buffer.from(v.replace(/-/g, ""), "hex"));
    case "binary": return types.wrap_binary(Buffer.from(v, "hex"));
    case "string": return types.wrap_string(v);
    case "symbol": return types.wrap_symbol(v);
    case "list": return v.length ? types.List32(v.map(wrap)) : types.List0();
    case "map": return types.Map32(v.flatMap(([k, x]) => [wrap(k), wrap(x)]));
    case "array": {
      const [code, raw] = ELEMENTS[e];
      return types.wrap_array(v.map((x) => raw(x.v)), code);
    }
    default: throw new Error(`no such type ${t}`);
  }
}

const NAMES = {
  Null: "null", True: "bool", False: "bool", Boolean: "bool", Ubyte: "ubyte",
  Ushort: "ushort", Uint: "uint", SmallUint: "uint", Uint0: "uint", Ulong: "ulong",
  SmallUlong: "ulong", Ulong0: "ulong", Byte: "byte", Short: "short", Int: "int",
  SmallInt: "int", Long: "long", SmallLong: "long", Float: "float", Double: "double",
  Decimal32: "decimal32", Decimal64: "decimal64", Decimal128: "decimal128",
  CharUTF32: "char", Timestamp: "timestamp", Uuid: "uuid", Vbin8: "binary",
  Vbin32: "binary", Str8: "string", Str32: "string", Sym8: "symbol", Sym32: "symbol",
  List0: "list", List8: "list", List32: "list", Map8: "map", Map32: "map",
  Array8: "array", Array32: "array",
};

// A typed value rhea read, described.
function describe(x) {
  const t = NAMES[x.type.name];
  const v = x.value;
  switch (t) {
    case "null": return { t, v: null };
    case "bool": return { t, v: x.type.name === "True" || (x.type.name === "Boolean" && v === 1) };
    case "ulong": return { t, v: decimal(v, false) };
    case "long": return { t, v: decimal(v, true) };
    case "decimal32": case "decimal64": case "decimal128": case "binary": return { t, v: hex(v) };
    case "char": return { t, v: String.fromCodePoint(v) };
    case "timestamp": return { t, v: v.getTime() };
    case "uuid": return { t, v: uuidText(v) };
    case "list": return { t, v: v.map(describe) };
    case "map": {
      const pairs = [];
      for (let i = 0; i + 1 < v.length; i += 2) pairs.push([describe(v[i]), describe(v[i + 1])]);
      return { t, v: pairs };
    }
    case "array": {
      const code = x.array_constructor.typecode;
      const e = NAMES[types.by_code[code].name];
      return { t, e, v: v.map(describe) };
    }
    default: return { t, v };
  }
}

// The sections of a message as rhea reads them, typed: rhea's own
// message decoding unwraps values into plain JavaScript, which loses
// their AMQP types, so the peer reads the raw sections with rhea's reader.
function sections(buffer) {
  const out = {};
  const reader = new types.Reader(buffer);
  while (reader.remaining()) {
    const s = reader.read();
    out[Number(s.descriptor.value)] = [...(out[Number(s.descriptor.value)] || []), s];
  }
  return out;
}

const FIELDS = ["id", "user_id", "to", "subject", "reply_to", "correlation_id", "content_type",
  "content_encoding", "absolute_expiry_time", "creation_time", "group_id", "group_sequence"];

// A received message, described as the Python end describes one.
function received(buffer) {
  const s = sections(buffer);
  const m = { annotations: [], properties: [] };
  const header = s[0x70] ? s[0x70][0].value : [];
  m.durable = header[0] ? describe(header[0]).v === true : false;
  m.priority = header[1] && header[1].type.name !== "Null" ? describe(header[1]).v : 4;
  const props = s[0x73] ? s[0x73][0].value : [];
  FIELDS.forEach((f, i) => {
    const x = props[i];
    const d = x === undefined || x.type.name === "Null" ? null : describe(x);
    m[f] = d && ["id", "correlation_id"].includes(f) ? d : d && d.v;
  });
  const pairs = (section) => {
    const v = section ? section[0].value : [];
    const out = [];
    for (let i = 0; i + 1 < v.length; i += 2) out.push([v[i].value, describe(v[i + 1])]);
    return out;
  };
  m.annotations = pairs(s[0x72]);
  m.properties = pairs(s[0x74]);
  if (s[0x75]) m.body = { section: "data", v: s[0x75].map((d) => hex(d.value)) };
  else if (s[0x76]) m.body = { section: "sequence", v: s[0x76].map((l) => describe(l).v) };
  else if (s[0x77]) m.body = { section: "value", v: describe(s[0x77][0]) };
  else m.body = { section: "none" };
  return m;
}

// A described message as rhea sends it.
function outgoing(d) {
  const m = {
    durable: d.durable,
    priority: d.priority,
    message_annotations: Object.fromEntries(d.annotations.map(([k, v]) => [k, wrap(v)])),
    application_properties: Object.fromEntries(d.properties.map(([k, v]) => [k, wrap(v)])),
  };
  if (d.id) m.message_id = wrap(d.id);
  if (d.correlation_id) m.correlation_id = wrap(d.correlation_id);
  for (const f of ["to", "subject", "reply_to", "content_type", "group_id", "group_sequence",
    "absolute_expiry_time", "creation_time"]) {
    if (d[f] !== null && d[f] !== undefined) m[f] = d[f];
  }
  const { section, v } = d.body;
  if (section === "data") m.body = rhea.message.data_sections(v.map((h) => Buffer.from(h, "hex")));
  else if (section === "sequence") m.body = rhea.message.sequence_sections(v.map((l) => l.map(wrap)));
  else m.body = wrap(v);
  return m;
}

// Keeps the bytes of each message rhea decodes, for `received`.
const decode = rhea.message.decode;
rhea.message.decode = (buffer) => Object.assign(decode(buffer), { raw: buffer });

const container = rhea.create_container({ id: `matrix-${process.pid}` });
const connection = container.connect({ host, port: Number(port), reconnect: false });
connection.on("connection_error", (c) => { console.error(c.connection.error); process.exit(2); });
connection.on("disconnected", (c) => { if (c.error) { console.error(c.error); process.exit(2); } });

if (mode === "send") {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const messages = JSON.parse(Buffer.concat(chunks).toString());
  const sender = connection.open_sender(node);
  let settled = 0;
  sender.on("sendable", () => {
    while (sender.sendable() && messages.length) sender.send(outgoing(messages.shift()));
  });
  const total = messages.length;
  sender.on("accepted", () => { if (++settled === total) connection.close(); });
  sender.on("rejected", (c) => { console.error("rejected", c.delivery.remote_state.error); process.exit(3); });
} else {
  const out = [];
  const receiver = connection.open_receiver({ source: node, credit_window: Number(count) });
  receiver.on("message", (c) => {
    out.push(received(c.message.raw));
    if (out.length === Number(count)) {
      // Closed once written: a pipe is written asynchronously, and the
      // close ends the process.
      process.stdout.write(JSON.stringify(out), () => connection.close());
    }
  });
}
connection.on("connection_close", () => process.exit(0));
setTimeout(() => { console.error("timed out"); process.exit(4); }, 20000);

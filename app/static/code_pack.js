// Code snapshots made in the browser, for `POST /api/code` (a gzipped tar): a picked folder or
// a .zip becomes a tar written here (ustar, with a PAX record for names ustar cannot hold),
// gzipped by the browser's CompressionStream; a .tar.gz is sent as it is, only listed.
// The same rules as the CLI's packer (app/cli/pack.py) where a browser can follow them: no
// .git, __pycache__, node_modules or virtual environments (a folder with pyvenv.cfg), no file
// over 50 MiB, names sorted, times and owners zeroed. A browser cannot ask git what is
// ignored: `torchyard submit --code DIR` packs what git tracks.
import {upload} from "./lib/api.js";
import {api} from "./lib/urls.js";

const MiB = 1024 * 1024;
const LIMITS = {maxFiles: 20000, maxTotalBytes: 500 * MiB, maxFileBytes: 50 * MiB};
const SKIPPED_DIRS = new Set([".git", "__pycache__", "node_modules"]);
const encoder = new TextEncoder();
const decoder = new TextDecoder();

// --- writing a tar ------------------------------------------------------------------------
const BLOCK = 512;
const octal = (n, width) => n.toString(8).padStart(width - 1, "0") + "\0";
const put = (header, offset, width, text) => {
  const bytes = typeof text === "string" ? encoder.encode(text) : text;
  header.set(bytes.subarray(0, width), offset);
};
const header = ({name, size, mode, type, prefix = ""}) => {
  const h = new Uint8Array(BLOCK);
  put(h, 0, 100, name);
  put(h, 100, 8, octal(mode, 8));
  put(h, 108, 8, octal(0, 8));  // uid
  put(h, 116, 8, octal(0, 8));  // gid
  put(h, 124, 12, octal(size, 12));
  put(h, 136, 12, octal(0, 12));  // mtime: 0, so the same files give the same bytes
  put(h, 148, 8, "        ");  // the checksum counts its own field as spaces
  put(h, 156, 1, type);
  put(h, 257, 6, "ustar\0");
  put(h, 263, 2, "00");
  put(h, 345, 155, prefix);
  let sum = 0;
  for (const b of h) sum += b;
  put(h, 148, 8, sum.toString(8).padStart(6, "0") + "\0 ");
  return h;
};
const padding = (size) => new Uint8Array((BLOCK - (size % BLOCK)) % BLOCK);
const isAscii = (s) => /^[\x20-\x7e]*$/.test(s);
// ustar holds a name as prefix (<= 155 bytes) + "/" + name (<= 100 bytes); null otherwise.
const ustarSplit = (name) => {
  if (!isAscii(name)) return null;
  if (name.length <= 100) return {prefix: "", name};
  for (let i = name.indexOf("/"); i >= 0; i = name.indexOf("/", i + 1)) {
    if (i <= 155 && name.length - i - 1 <= 100 && name.length - i - 1 > 0) {
      return {prefix: name.slice(0, i), name: name.slice(i + 1)};
    }
  }
  return null;
};
// A PAX record "<len> path=<name>\n", whose length counts its own digits.
const paxRecord = (key, value) => {
  const body = ` ${key}=${value}\n`;
  const bodyLength = encoder.encode(body).length;
  let length = bodyLength + 1;
  while (String(length).length + bodyLength !== length) length = String(length).length + bodyLength;
  return encoder.encode(length + body);
};

// [{name, blob, mode?}] -> a Blob holding the tar; the caller has sorted and checked names.
export const tarBlob = (entries) => {
  const parts = [];
  for (const entry of entries) {
    const size = entry.blob.size;
    const mode = entry.mode || 0o644;
    let split = ustarSplit(entry.name);
    if (!split) {
      const record = paxRecord("path", entry.name);
      parts.push(header({name: "PaxHeader", size: record.length, mode: 0o644, type: "x"}),
                 record, padding(record.length));
      split = {prefix: "", name: entry.name.replace(/[^\x20-\x7e]/g, "_").slice(-100)};
    }
    parts.push(header({...split, size, mode, type: "0"}), entry.blob, padding(size));
  }
  parts.push(new Uint8Array(2 * BLOCK));
  return new Blob(parts, {type: "application/x-tar"});
};

const pipe = async (blob, transform, type) =>
  new Response(blob.stream().pipeThrough(transform)).blob().then((b) => new Blob([b], {type}));
export const gzipBlob = (blob) => pipe(blob, new CompressionStream("gzip"), "application/gzip");

// --- choosing files -----------------------------------------------------------------------
export class PackError extends Error {}

// [{name, blob, mode?}] -> {entries (sorted, checked), leftOut: [{path, reason}]}
const select = (files) => {
  const venvs = new Set();
  for (const f of files) {
    const parts = f.name.split("/");
    if (parts[parts.length - 1] === "pyvenv.cfg") venvs.add(parts.slice(0, -1).join("/"));
  }
  const entries = [];
  const leftOut = [];
  const reported = new Set();
  for (const f of files) {
    const parts = f.name.split("/");
    if (!f.name || f.name.startsWith("/") || parts.some((p) => p === ".." || p === "." || p === "")) {
      leftOut.push({path: f.name, reason: "not a plain relative path"});
      continue;
    }
    let skipped = null;
    for (let depth = 1; depth < parts.length && !skipped; depth++) {
      const dir = parts.slice(0, depth).join("/");
      if (SKIPPED_DIRS.has(parts[depth - 1])) skipped = [dir, `${parts[depth - 1]} is never packed`];
      else if (venvs.has(dir)) skipped = [dir, "a virtual environment (has pyvenv.cfg)"];
    }
    if (skipped) {
      if (!reported.has(skipped[0])) {
        reported.add(skipped[0]);
        leftOut.push({path: skipped[0] + "/", reason: skipped[1]});
      }
      continue;
    }
    if (f.blob.size > LIMITS.maxFileBytes) {
      leftOut.push({path: f.name, reason: `${(f.blob.size / MiB).toFixed(1)} MiB, over the per-file limit of 50 MiB`, large: true});
      continue;
    }
    entries.push(f);
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  if (!entries.length) throw new PackError("there are no files to pack");
  if (entries.length > LIMITS.maxFiles) {
    throw new PackError(`${entries.length} files to pack, over the limit of ${LIMITS.maxFiles}`);
  }
  const total = entries.reduce((n, e) => n + e.blob.size, 0);
  if (total > LIMITS.maxTotalBytes) {
    throw new PackError(`${(total / MiB).toFixed(1)} MiB to pack, over the limit of 500 MiB`);
  }
  return {entries, leftOut, totalBytes: total};
};

// A picked folder (input webkitdirectory): paths are "folder/sub/x.py"; the folder is the root.
const fromFolder = (fileList) => Array.from(fileList, (file) => {
  const path = file.webkitRelativePath || file.name;
  return {name: path.split("/").slice(1).join("/") || file.name, blob: file};
});

// --- reading a zip (central directory; stored or deflated members) -------------------------
const readZip = async (file) => {
  const buffer = new Uint8Array(await file.arrayBuffer());
  const view = new DataView(buffer.buffer);
  let end = -1;
  for (let i = buffer.length - 22; i >= Math.max(0, buffer.length - 22 - 65535); i--) {
    if (view.getUint32(i, true) === 0x06054b50) { end = i; break; }
  }
  if (end < 0) throw new PackError(`${file.name} is not a zip file (no central directory)`);
  const count = view.getUint16(end + 10, true);
  let at = view.getUint32(end + 16, true);
  const files = [];
  for (let n = 0; n < count; n++) {
    if (view.getUint32(at, true) !== 0x02014b50) throw new PackError(`${file.name}: a damaged zip directory`);
    const method = view.getUint16(at + 10, true);
    const compressed = view.getUint32(at + 20, true);
    const nameLength = view.getUint16(at + 28, true);
    const extraLength = view.getUint16(at + 30, true);
    const commentLength = view.getUint16(at + 32, true);
    const external = view.getUint32(at + 38, true);
    const local = view.getUint32(at + 42, true);
    const name = decoder.decode(buffer.subarray(at + 46, at + 46 + nameLength));
    at += 46 + nameLength + extraLength + commentLength;
    const unixMode = external >>> 16;
    if (name.endsWith("/") || name.startsWith("__MACOSX/")) continue;  // a directory, macOS junk
    if ((unixMode & 0o170000) === 0o120000) throw new PackError(`${name}: links are not accepted in a zip`);
    const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
    const raw = new Blob([buffer.subarray(start, start + compressed)]);
    let blob;
    if (method === 0) blob = raw;
    else if (method === 8) blob = await pipe(raw, new DecompressionStream("deflate-raw"), "");
    else throw new PackError(`${name}: zip compression method ${method} is not supported (use deflate)`);
    files.push({name, blob, mode: unixMode & 0o111 ? 0o755 : 0o644});
  }
  // A zipped folder ("proj/train.py", ...): the folder is the root, as for a picked one.
  const tops = new Set(files.map((f) => f.name.split("/")[0]));
  if (tops.size === 1 && files.every((f) => f.name.includes("/"))) {
    for (const f of files) f.name = f.name.slice(f.name.indexOf("/") + 1);
  }
  return files;
};

// The member names of a .tar.gz (for the script pick), without keeping its contents.
const listTarGz = async (file) => {
  let bytes;
  try {
    bytes = new Uint8Array(/** @type {ArrayBuffer} */ (await pipe(file, new DecompressionStream("gzip"), "").then((b) => b.arrayBuffer())));
  } catch {
    throw new PackError("the archive is not a gzipped tar");
  }
  const names = [];
  let pax = null;
  for (let at = 0; at + BLOCK <= bytes.length; ) {
    const h = bytes.subarray(at, at + BLOCK);
    if (h.every((b) => b === 0)) break;
    const field = (o, w) => decoder.decode(h.subarray(o, o + w)).replace(/\0.*$/s, "");
    const size = parseInt(field(124, 12).trim() || "0", 8);
    const type = field(156, 1) || "0";
    const body = bytes.subarray(at + BLOCK, at + BLOCK + size);
    const prefix = field(345, 155);
    const name = pax || (prefix ? prefix + "/" : "") + field(0, 100);
    pax = null;
    if (type === "x" || type === "L") {
      const text = decoder.decode(body);
      pax = type === "L" ? text.replace(/\0.*$/s, "") : (/ path=([^\n]*)\n/.exec(text) || [])[1] || null;
    } else if (type === "0" || type === "\0" || type === "7") {
      names.push(name.replace(/^\.\//, ""));
    }
    at += BLOCK + Math.ceil(size / BLOCK) * BLOCK;
  }
  return names.sort();
};

// The files left out for their size (the 50 MiB limit) that a script's text names, by path or
// by file name: a launch of that script would not find them (issue 41), so the form says so
// before it starts. A name in a comment counts too: better a question too many than a run
// that fails after its queue wait.
export const neededLeftOut = (text, leftOut) => (text ? leftOut.filter((item) => {
  if (!item.large) return false;
  const base = item.path.slice(item.path.lastIndexOf("/") + 1);
  return text.includes(item.path) || (base.length > 2 && text.includes(base));
}) : []);
const MAX_SCRIPT_TEXT = MiB; // the Python files read for neededLeftOut

// A folder's FileList, or one .zip / .tar.gz File -> {blob (tar.gz), files, leftOut, texts
// (each packed .py file's text, at most 1 MiB each), ...}.
export const packCode = async (input) => {
  if (input instanceof File && /\.(tar\.gz|tgz)$/i.test(input.name)) {
    // Read once: the bytes listed are the bytes sent, even if the file changes on disk.
    const blob = new Blob([await input.arrayBuffer()], {type: "application/gzip"});
    const files = await listTarGz(blob);
    return {blob, files, leftOut: [], texts: {}, totalBytes: null};
  }
  const picked = input instanceof File ? await readZip(input) : fromFolder(input);
  const {entries, leftOut, totalBytes} = select(picked);
  const blob = await gzipBlob(tarBlob(entries));
  /** @type {Record<string, string>} */
  const texts = {};
  for (const e of entries) {
    if (e.name.endsWith(".py") && e.blob.size <= MAX_SCRIPT_TEXT) texts[e.name] = await e.blob.text();
  }
  return {blob, files: entries.map((e) => e.name), leftOut, texts, totalBytes};
};

// POST the tar.gz to /api/code with upload progress; resolves to {ok, status, body} like
// lib/api.js call.
/**
 * @param {Blob} blob
 * @param {(loaded: number, total: number) => void} onProgress
 */
export const uploadCode = (blob, onProgress) => upload(api.code(), blob, "code.tar.gz", onProgress);

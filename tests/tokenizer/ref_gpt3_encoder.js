// ref_gpt3_encoder.js: reference GPT-2 ids for every linux-doc document from
// npm gpt-3-encoder@1.1.4 (OpenAI's encoder.py ported to JS; nobody here wrote
// it). Each document is passed whole to its encode().
//   node ref_gpt3_encoder.js NODE_MODULES OUT DOC_DIR [WORKERS]
// OUT lines, in byte order of path:  path<TAB>0<TAB>-1<TAB>id id ...
// (source, byte offset, length (-1: the whole file), ids). A document that is
// not valid UTF-8 (JS would replace bytes with U+FFFD) gets "!invalid-utf8"
// instead of ids, and the comparison counts it. The output is kept between
// runs when it is newer than this script (gpt-3-encoder needs ~1-2 minutes).
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const { fork } = require('child_process');
const [nodeModules, out, docDir, workersArg] = process.argv.slice(2);

function walk(dir, acc) {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) walk(p, acc);
    else if (e.isFile() && p.endsWith('.rst.gz')) acc.push(p);
  }
  return acc;
}

function encodeSome(files) {
  const { encode } = require(path.join(nodeModules, 'gpt-3-encoder'));
  return files.map((f) => {
    const buf = zlib.gunzipSync(fs.readFileSync(f));
    const text = buf.toString('utf8');
    if (!Buffer.from(text, 'utf8').equals(buf)) return `${f}\t0\t-1\t!invalid-utf8`;
    return `${f}\t0\t-1\t${encode(text).join(' ')}`;
  });
}

if (process.env.FM_REF_WORKER) { // a worker: encode the files it is sent
  process.on('message', (files) => { process.send(encodeSome(files), () => process.exit(0)); });
} else {
  if (fs.existsSync(out) && fs.statSync(out).mtimeMs > fs.statSync(__filename).mtimeMs) {
    console.log(`gpt-3-encoder: reusing ${out}`);
    process.exit(0);
  }
  const files = walk(docDir, []).sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));
  const nw = Math.max(1, parseInt(workersArg || '2', 10));
  const parts = Array.from({ length: nw }, () => []);
  files.forEach((f, i) => parts[i % nw].push(f));
  const results = new Array(nw);
  let done = 0;
  parts.forEach((part, w) => {
    const child = fork(__filename, process.argv.slice(2), { env: { ...process.env, FM_REF_WORKER: '1' } });
    child.on('message', (lines) => {
      results[w] = lines;
      if (++done === nw) {
        const lines = files.map((_, i) => results[i % nw][Math.floor(i / nw)]);
        fs.mkdirSync(path.dirname(out), { recursive: true });
        fs.writeFileSync(out + '.tmp', lines.join('\n') + '\n');
        fs.renameSync(out + '.tmp', out);
        console.log(`gpt-3-encoder: ${files.length} documents -> ${out}`);
      }
    });
    child.on('exit', (code) => {
      if (code || results[w] === undefined) { console.error(`gpt-3-encoder worker ${w} failed`); process.exit(1); }
    });
    child.send(part);
  });
}

// gpt_tokenizer.js: npm gpt-tokenizer@4.0.0's encode throughput on one core
// (node is single-threaded), same documents and protocol as bench_tokenize.c:
// read all, one warm-up pass, then REPS timed passes of encode(whole document).
//   node gpt_tokenizer.js NODE_MODULES ENCODING REPS < list
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const [nodeModules, encoding, repsArg] = process.argv.slice(2);
const { encode } = require(path.join(nodeModules, 'gpt-tokenizer', 'cjs', 'encoding', encoding + '.js'));
const files = fs.readFileSync(0, 'utf8').split('\n').filter(Boolean);
const docs = files.map((f) => {
  const b = fs.readFileSync(f);
  return (f.endsWith('.gz') ? zlib.gunzipSync(b) : b).toString('utf8');
});
const reps = parseInt(repsArg, 10);
let ntok = 0, t0 = 0, bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d);
for (let r = -1; r < reps; r++) {
  if (r === 0) { t0 = process.hrtime.bigint(); ntok = 0; }
  for (const d of docs) ntok += encode(d).length;
}
const dt = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(`gpt-tokenizer ${encoding}: ${docs.length} docs, ${bytes * reps} bytes, ${ntok} tokens, ${dt.toFixed(3)} s, ${(ntok / dt).toFixed(0)} tokens/s`);

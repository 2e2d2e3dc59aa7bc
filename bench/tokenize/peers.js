// peers.js: encode throughput of fmhpc's peers on one core (node is
// single-threaded), same documents and protocol as bench_tokenize.c: read all,
// one warm-up pass, then REPS timed passes of encode(whole document).
//   node peers.js NODE_MODULES PEER WHAT REPS < list
// PEER (WHAT):
//   gpt-tokenizer (r50k_base | cl100k_base)  npm gpt-tokenizer@4.0.0, pure JavaScript
//   tiktoken (r50k_base | cl100k_base)       npm tiktoken@1.0.22, OpenAI's Rust tiktoken built to WASM
//   hf-tokenizers (a tokenizer.json path)    npm @anush008/tokenizers@0.6.0, the native Hugging Face
//                                            tokenizers (Rust) through N-API
// Special-token text in a document is encoded as ordinary text by every peer, as fmhpc does.
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const [nodeModulesArg, peer, what, repsArg] = process.argv.slice(2);
const nodeModules = path.resolve(nodeModulesArg);
const files = fs.readFileSync(0, 'utf8').split('\n').filter(Boolean);
const docs = files.map((f) => {
  const b = fs.readFileSync(f);
  return (f.endsWith('.gz') ? zlib.gunzipSync(b) : b).toString('utf8');
});
const reps = parseInt(repsArg, 10);

async function encoder() {
  if (peer === 'gpt-tokenizer') {
    const { encode } = require(path.join(nodeModules, 'gpt-tokenizer', 'cjs', 'encoding', what + '.js'));
    return (d) => encode(d).length;
  }
  if (peer === 'tiktoken') {
    const enc = require(path.join(nodeModules, 'tiktoken')).get_encoding(what);
    return (d) => enc.encode(d, [], []).length;
  }
  if (peer === 'hf-tokenizers') {
    const { Tokenizer } = require(path.join(nodeModules, '@anush008', 'tokenizers'));
    const tok = Tokenizer.fromFile(what);
    return async (d) => (await tok.encode(d, null, { addSpecialTokens: false })).getIds().length;
  }
  throw new Error(`unknown peer '${peer}': gpt-tokenizer, tiktoken or hf-tokenizers`);
}

(async () => {
  const enc = await encoder();
  let ntok = 0, t0 = 0, bytes = 0;
  for (const d of docs) bytes += Buffer.byteLength(d);
  for (let r = -1; r < reps; r++) {
    if (r === 0) { t0 = process.hrtime.bigint(); ntok = 0; }
    for (const d of docs) ntok += await enc(d);
  }
  const dt = Number(process.hrtime.bigint() - t0) / 1e9;
  console.log(`${peer} ${path.basename(what)}: ${docs.length} docs, ${bytes * reps} bytes, ${ntok} tokens, ` +
              `${dt.toFixed(3)} s, ${(ntok / dt).toFixed(0)} tokens/s`);
})();

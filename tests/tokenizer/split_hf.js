// split_hf.js NPM BASE_JSON TOK_COMPARE WORKDIR: fmhpc's ids against Hugging Face
// tokenizers (the native binding @anush008/tokenizers, pinned in tests/npm)
// for Split pre-tokenizer regexes that can match the empty string. HF cuts
// the text at every match, empty ones included ('x?' cuts "ab" into "a",
// "b"); fmhpc used to step over empty matches and keep "ab" whole. And ^/$
// match at line boundaries (Oniguruma's Ruby syntax). The texts go into one
// file; per pattern, HF's ids are written as tok_compare's reference, which
// compares every text (exactly that many) and checks the round trip. Exits 0
// only when every pattern's comparison passed.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const [npm, base, tokCompare, work] = process.argv.slice(2);
const { Tokenizer } = require(path.join(npm, '@anush008', 'tokenizers'));

const patterns = ['a*', '\\s*', 'x?', '(?=b)', '\\b', '$', '^', '^a', 'b$', '\\p{L}*', ' ?\\p{N}{0,3}', '(?:abc)?'];
const texts = ['baab cd', 'ab', 'aaa', 'hello  world, foo 12345!', 'héllo wörld', 'é日本 語', ' a  b ', 'abcabcx', '\n\nx\t',
               'a\nb\n', '\n', 'x\r\ny\n\n'];

(async () => {
  fs.mkdirSync(work, { recursive: true });
  const textsFile = path.join(work, 'texts.txt');
  const bufs = texts.map((t) => Buffer.from(t, 'utf8'));
  fs.writeFileSync(textsFile, Buffer.concat(bufs));
  let failed = 0;
  for (const [i, pat] of patterns.entries()) {
    const d = JSON.parse(fs.readFileSync(base, 'utf8'));
    d.pre_tokenizer = { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: pat }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
    const file = path.join(work, `split_${i}.json`);
    fs.writeFileSync(file, JSON.stringify(d));
    const tok = Tokenizer.fromFile(file);
    let ref = '', off = 0;
    for (const [k, text] of texts.entries()) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      ref += `${textsFile}\t${off}\t${bufs[k].length}\t${ids.join(' ')}\n`;
      off += bufs[k].length;
    }
    const refFile = path.join(work, `split_${i}.ids`);
    fs.writeFileSync(refFile, ref);
    const r = spawnSync(tokCompare, [file, refFile, '--docs', String(texts.length)]);
    const out = (r.stdout.toString() + r.stderr.toString()).trim();
    console.log(`/${pat}/: ${out}`);
    if (r.status !== 0) failed++;
  }
  console.log(`split_hf: ${patterns.length} patterns x ${texts.length} texts, ${failed} pattern(s) differ from HF`);
  process.exit(failed === 0 ? 0 : 1);
})();

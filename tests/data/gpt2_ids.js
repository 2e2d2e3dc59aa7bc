// gpt2_ids.js GPT_TOKENIZER_DIR: reference GPT-2 ids from npm gpt-tokenizer's
// r50k_base (GPT-2's encoding; the same ids as npm gpt-3-encoder, the port of
// OpenAI's encoder.py, at ~20x its speed). stdin: one JSON string per line;
// stdout: one JSON array of ids per line. Special-token text is plain text.
const path = require("path");
const enc = require(path.resolve(process.argv[2], "cjs/encoding/r50k_base.js"));
const opts = {allowedSpecial: new Set(), disallowedSpecial: new Set()};
const lines = require("fs").readFileSync(0, "utf8").split("\n");
const out = [];
for (const l of lines) {
  if (!l) continue;
  out.push(JSON.stringify(enc.encode(JSON.parse(l), opts)));
}
process.stdout.write(out.join("\n") + "\n");

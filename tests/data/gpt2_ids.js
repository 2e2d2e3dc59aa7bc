// gpt2_ids.js ENCODER_DIR: the reference GPT-2 ids (npm gpt-3-encoder, a
// JavaScript port of OpenAI's encoder.py). stdin: one JSON string per line;
// stdout: one JSON array of ids per line.
const path = require("path");
const enc = require(path.resolve(process.argv[2], "index.js"));
const lines = require("fs").readFileSync(0, "utf8").split("\n");
const out = [];
for (const l of lines) {
  if (!l) continue;
  out.push(JSON.stringify(enc.encode(JSON.parse(l))));
}
process.stdout.write(out.join("\n") + "\n");

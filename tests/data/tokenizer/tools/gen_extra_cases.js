// Generates extra_cases.json for a tokenizer.json with Hugging Face tokenizers (Rust, through the
// npm package @anush008/tokenizers 0.6.0 = tokenizers 0.22.2). Usage:
//   npm install @anush008/tokenizers@0.6.0 && node gen_extra_cases.js tokenizer.json out.json
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

const [, , tokPath, outPath] = process.argv;
const tok = Tokenizer.fromFile(tokPath);
const vocab = JSON.parse(fs.readFileSync(tokPath, 'utf8'));

// Deterministic PRNG (mulberry32).
let seed = 20240601;
function rand() {
  seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];

const fixed = [
  '中文分词测试：深度求索发布了新的模型。', '日本語の文章です。カタカナとひらがな、漢字。',
  '👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🇯🇵🇫🇷', 'e\u0301 a\u0308 n\u0303 \u0915\u094D\u0937 \u05E9\u05C1\u05B8',
  'tab\tnewline\ncr\rvt\vff\fnbsp\u00a0ideo\u3000ls\u2028ps\u2029nel\u0085ogham\u1680mvs\u180Eend',
  '\t\t\n\r\n \u00a0 \u3000\u3000  \n', '0 12 345 6789 1234567890123 3.14159 1e-10 ٣٤٥ ๑๒๓',
  'a'.repeat(300), '!'.repeat(100), '\n'.repeat(50), 'x' + ' '.repeat(100) + 'y', ' '.repeat(257),
  '<｜begin▁of▁sentence｜>system<｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>',
  '<｜User｜><｜User｜>  <|EOT|><｜tool▁sep｜>\n<｜place▁holder▁no▁7｜>', '<｜User not a token <｜ <| |> <｜begin▁of▁sentence',
  '\u200b\u200c\u200d\ufeff\u2060 invisible', '\u{1F600}\u{1F9D1}\u200D\u{1F91D}\u200D\u{1F9D1} \u{10348} \u{10FFFD}',
  "'s 't 're 've 'm 'll 'd DON'T I'M", ' \u0301x \u0301\u0302 ..\u0301', '\r\r\n\n \r \n\t \t\n', 'a\u180E\u180Eb \u180E',
  '한국어 문장도 있습니다. Привет, мир! مرحبا بالعالم ภาษาไทย नमस्ते', '$$$ %%% ^^^ ~~~ ``` ||| \\\\\\ ///',
  'x²+y³=z⁴ ½ ¼ Ⅻ ① ⑴ ０１２３ ＡＢＣ', 'https://a.b/c?d=e&f=g#h', 'foo_bar-baz.qux:quux;corge,grault',
];

const pool = [
  'a', 'b', 'Z', 'the', ' the', 'Hello', 'world', 'x', 'ing', 'DeepSeek', '0', '7', '42', '12345', '.', ',', '!', '?',
  '-', '_', '(', ')', '[', ']', '{', '}', '<', '>', '|', '/', '\\', '"', "'", '`', '#', '@', '&', '*', '+', '=',
  ' ', ' ', ' ', '  ', '\t', '\n', '\r\n', '\r', '\v', '\f', '\u00a0', '\u3000', '\u2028', '\u2029', '\u0085',
  '\u180E', '\u200b', '\u2003', '\u202f', '中', '文', '国', '的', '。', '，', 'の', 'カ', 'ー', 'ひ', '한', '국',
  'й', 'Ж', 'ب', 'ع', 'क', '्', 'ष', 'ก', '\u0301', '\u0308', '\u20e3', '\ufe0f', '\u200d', '👍', '🏽', '🎉',
  '🇨', '🇳', '😀', '👩', '💻', '\u{1F9D1}', '\u{10348}', '€', '£', '©', '™', '→', '∑', '√', '°', 'é', 'ñ', 'ß',
  'Ω', 'π', '²', '½', 'Ⅻ', '٣', '๓', '０', 'Ａ', '<｜User｜>', '<｜Assistant｜>', '<|EOT|>', '<｜end▁of▁sentence｜>',
  '<｜', '｜>', '▁', 'Ġ', 'Ċ',
];

const cases = [];
for (const text of fixed) cases.push(text);
for (let i = 0; i < 400; ++i) {
  const n = 1 + Math.floor(rand() * 40);
  let s = '';
  for (let k = 0; k < n; ++k) s += pick(pool);
  cases.push(s);
}

// Decode cases: random ids, including single-byte tokens that form broken UTF-8.
const byteTokens = [];
for (const [t, id] of Object.entries(vocab.model.vocab)) if ([...t].length === 1) byteTokens.push(id);
const addedIds = (vocab.added_tokens || []).map((t) => t.id).slice(0, 20);
const maxId = Object.values(vocab.model.vocab).reduce((a, b) => Math.max(a, b), 0);

(async () => {
  const out = { producer: 'tests/data/tokenizer/tools/gen_extra_cases.js (tokenizers 0.22.2 via @anush008/tokenizers 0.6.0)', cases: [], decode_cases: [] };
  for (const text of cases) {
    const e = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(e.getIds());
    out.cases.push({ text, ids, decoded: await tok.decode(ids, false) });
  }
  for (let i = 0; i < 200; ++i) {
    const n = 1 + Math.floor(rand() * 12);
    const ids = [];
    for (let k = 0; k < n; ++k) {
      const r = rand();
      ids.push(r < 0.6 ? pick(byteTokens) : r < 0.8 && addedIds.length ? pick(addedIds) : Math.floor(rand() * (maxId + 1)));
    }
    out.decode_cases.push({ ids, decoded: await tok.decode(ids, false), decoded_skip_special: await tok.decode(ids, true) });
  }
  fs.writeFileSync(outPath, JSON.stringify(out, null, 1) + '\n');
  console.log(`wrote ${out.cases.length} encode and ${out.decode_cases.length} decode cases to ${outPath}`);
})();

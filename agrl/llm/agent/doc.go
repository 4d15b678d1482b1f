// Package agent plays agrl environments with a pretrained Hugging Face model — Qwen2.5, Qwen3
// or Llama 3.x, run by agrl/llm — in the model's own chat and tool-call format (agrl/chat),
// and records multi-turn episodes token in, token out, ready for agrl's rubrics and for
// GRPO.
//
// # The policy
//
// A Policy is a model (or a LoRA view of it), its byte-level BPE tokenizer (agrl/bpe) and its
// chat.Format. Load reads a model directory (config.json, the safetensors weights,
// tokenizer.json) and takes the format from tokenizer_config.json's chat_template, when it is
// one agrl/chat is verified against, or else from the model family; LoadFormat takes the
// format as an argument and New takes the three parts. The tokenizer must fit the model's
// vocabulary and have the format's end-of-turn token.
//
// # An episode, as tokens
//
// Rollout plays one episode per task:
//
//	ids  = encode(Render([system, user: prompt], tools) + GenerationPrompt)   mask 0
//	loop:
//	    sample an action until a stop token (<|im_end|>, <|eot_id|>, <|eom_id|>, …),
//	        Sampling.MaxActionTokens or the token budget                       mask 1
//	    action = Format.ParseTurn(decode(action ids))   tool call | answer | invalid
//	    step the environment (agrl's turn loop)
//	    ids += encode(Format.AppendObservation(observation))                   mask 0
//	until an answer, the turn limit, too many invalid actions or the budget
//
// The prompt is encoded once and each observation on its own; the sampled ids are kept as
// they were drawn. The transcript is never re-rendered nor re-encoded: encoding the decoded
// text of an action can give other ids (a merge the model did not take, a byte sequence cut
// in the middle of a character), and training must see the ids the model chose, with the
// log-probabilities recorded when it chose them (agrl's DESIGN rule 2). Episode.LogProbs
// holds, for every sampled id, its log-probability under the full distribution at the
// sampling temperature (temperature 1 when decoding greedily), which Policy.Score
// recomputes from the model.
//
// A malformed tool call — bad JSON, an unknown tool, a missing or non-string argument,
// several calls in one turn — is an invalid action: the environment does not see it, and the
// model gets "invalid action: <reason>" as the tool's reply. So is an action cut off before
// its end-of-turn token; the end-of-turn token is then appended (mask 0) before the reply.
//
// # Sampling
//
// agrl.Sampling sets the temperature (0: greedy), top-k, top-p, the seed and the cap on each
// action's tokens. Episode i draws from its own stream (Seed, i), so a rollout gives the same
// episodes however many run at once (Policy.Workers). Tasks with the same prompt, such as the
// G samples of a GRPO group, share one forward pass of the prompt: its KV cache is cloned.
//
// The model runs in agrl/llm's forward pass, float32 on the CPU. The episodes being played
// advance together: each round, every one's next step (a sampled id, or an observation) goes
// through the model as one batch (llm.Model.NextBatch), one pass over the weights for all of
// them, each getting the bits it would get alone; the distinct prompts are prefilled the same
// way. The products, attention and LoRA terms run in scalar Go unless a faster kernel is
// installed (agrl/learn installs its vector kernels in GOEXPERIMENT=simd builds).
package agent

// Package llm runs pretrained open decoders — Llama 3.x, SmolLM2, Qwen2/2.5 and Qwen3 — from
// their Hugging Face checkpoints, in pure Go (the standard library and agrl/hf). It is the
// reference forward pass for agrl's learner: simple, float32, checked against an independent
// PyTorch implementation, not fast.
//
// # The model
//
// Load reads config.json and the safetensors weights of a model directory (one file or
// sharded), checks the tensors against what the config implies, and converts them to float32.
// The three families share one decoder:
//
//	x = embed_tokens[ids]                                  // [T, hidden]
//	for each layer:
//	    h = rms_norm(x)                                    // x·rsqrt(mean(x²)+eps)·w
//	    q, k, v = q_proj(h), k_proj(h), v_proj(h)          // [T, heads·d], [T, kv·d] ×2
//	    q, k = q_norm(q), k_norm(k)                        // Qwen3 only: per head, over d
//	    q, k = rope(q), rope(k)                            // rotate-half layout
//	    x += o_proj(softmax(q·kᵀ/√d + causal mask)·v)      // kv head j serves query heads j·g … j·g+g−1
//	    h = rms_norm(x)
//	    x += down_proj(silu(gate_proj(h)) · up_proj(h))    // SwiGLU
//	logits = lm_head(rms_norm(x))                          // lm_head = embed_tokens when tied
//
// with g = num_attention_heads/num_key_value_heads (grouped-query attention). The families
// differ only in tensors: Qwen2 has q, k and v biases; Qwen3 has q_norm and k_norm and a
// head_dim of its own (its heads may be wider than the hidden size); Llama may have
// attention_bias (q, k, v, o) and mlp_bias, which Llama 3 and SmolLM2 checkpoints leave off.
// RoPE uses rope_theta and the config's rope_scaling: Llama 3.1's "llama3", "linear", or
// "yarn" (Qwen2.5 and Qwen3's long-context setting), whose attention factor multiplies cos and
// sin (hf.Config.InvFreq, hf.Config.RopeAttentionFactor). Dimension i of a head turns with
// dimension i + d/2, as in every Hugging Face checkpoint (not the interleaved pairs of Meta's
// original code).
//
// Everything is computed in float32, as transformers does for a float32 model: a bfloat16
// checkpoint is converted exactly, then run in float32, so the logits are close to, but not
// the same as, the model's in bfloat16 arithmetic.
//
// # Running it
//
// Logits runs a whole sequence and gives the logits at every position. For generation, a
// Cache keeps each layer's keys and values: Step appends tokens and returns their logits,
// Next returns only the last position's (skipping the LM head elsewhere), and Clone forks a
// prefix for several continuations: the clones share the prefix's keys and values instead of
// copying them, and NextBatch's decoding steps over a prefix that several of its sequences
// share read it once for several sequences at a time (SetSharedAttention), with the bits
// each gets alone. A token costs one pass over the weights plus attention over the tokens
// before it; Step of a prompt then one token at a time gives the same logits as Logits of
// the whole sequence. Sequences are limited to max_position_embeddings.
//
// A model holds its weights in float32, one copy. Share hands it a tensor that another owner
// holds in memory already (a GoMLX store on the go backend, whose buffers are Go memory), a
// projection possibly as its transpose [in, out], and the model drops its own copy: the values
// must be the same bits, and the logits do not change.
//
// # LoRA adapters and saving
//
// AddLoRA makes low-rank adapters for a model's projections (LoRAConfig: rank, alpha, dropout
// and target modules, with the meanings and names of PEFT's LoraConfig), initialised as PEFT
// initialises them (A Kaiming-uniform, B zero), so that at first they change nothing.
// WithAdapters gives a view of the model that runs with them, each adapted projection
// computing
//
//	y = W x + b + (alpha/r) · B (A x)                      // A [r, in], B [out, r]
//
// while sharing the model's weights: the model itself stays at hand, unadapted, as GRPO's
// reference policy. Params exposes the matrices, by their PEFT names, for a trainer to update
// in place. Adapters.Save and LoadAdapters write and read PEFT's adapter directory
// (adapter_config.json and adapter_model.safetensors), and Model.Save writes a Hugging Face
// model directory with the adapters merged into the weights, W + (alpha/r)·B·A, as float32,
// bfloat16 or float16. The forward pass is for inference: dropout is recorded, not applied.
//
// # Gradients of the adapters
//
// Trace runs one sequence forward as Logits does (the same bits) and keeps what a backward
// pass needs; Hidden and Head give the final hidden states and the LM head's matrix, from
// which the caller computes its loss over the logits and that loss's gradient with respect to
// the hidden states; Backward takes it back through the frozen decoder and adds the adapters'
// gradients to an Adapters made by NewGradients (PEFT's layout and names); BackwardWeights
// adds every weight's instead (full fine-tuning). TraceWith checkpoints a trace or applies
// LoRA dropout; TraceAfter continues a trace made with TraceOptions.Prefix, so that sequences
// that share a beginning trace it once. agrl/learn trains a pretrained policy this way on the
// CPU. SetMul and SetExpSum install faster kernels for the backward pass, as SetLinear does
// for the forward one.
//
// # Test models
//
// WriteRandom writes a model of any supported configuration with seeded random weights,
// laid out as transformers saves one (config.json, model.safetensors or index and shards), and
// Tiny gives small configurations of each family. The checkpoints in testdata were made that
// way; scripts/llm_reference.py computed their expected logits with PyTorch, and the tests
// compare against those without Python (see testdata/README.md). One adapter there, for the
// Qwen3 checkpoint, has expected logits from scripts/lora_reference.py.
package llm

package bpe_test

import (
	"fmt"
	"strings"
	"testing"

	"agrl.dev/agrl/bpe"
)

// Qwen3's tokenizer on one chat turn: the markers are single tokens, the rest is byte-level BPE.
func Example() {
	tok, err := bpe.Load("testdata/qwen3.tokenizer.json.gz")
	if err != nil {
		panic(err)
	}
	ids := tok.Encode("<|im_start|>user\nWhat is 12*(3+4)?<|im_end|>\n")
	fmt.Println(ids)
	for _, id := range ids[:4] {
		fmt.Printf("%d %q\n", id, tok.Token(id))
	}
	fmt.Println(tok.Decode(ids) == "<|im_start|>user\nWhat is 12*(3+4)?<|im_end|>\n")
	end, _ := tok.TokenID("<|im_end|>")
	fmt.Println(end, tok.IsSpecial(end))
	// Output:
	// [151644 872 198 3838 374 220 16 17 6599 18 10 19 11843 151645 198]
	// 151644 "<|im_start|>"
	// 872 "user"
	// 198 "Ċ"
	// 3838 "What"
	// true
	// 151645 true
}

// BenchmarkEncode measures encoding an agent transcript with Qwen3's and Llama 3's tokenizers.
func BenchmarkEncode(b *testing.B) {
	turn := "<|im_start|>user\nWhat is 12*(3+4)? Please show your work.<|im_end|>\n" +
		"<|im_start|>assistant\n<think>\nI'll compute 3+4 = 7 first, then 12*7.\n</think>\n\n" +
		"<tool_call>\n{\"name\": \"calc\", \"arguments\": {\"expr\": \"12*(3+4)\"}}\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\n<tool_response>\n84\n</tool_response><|im_end|>\n" +
		"<|im_start|>assistant\nThe answer is 84. Zürich, 東京, café — naïve résumé.<|im_end|>\n"
	text := strings.Repeat(turn, 50)
	for _, name := range []string{"qwen3", "llama3"} {
		tok, err := bpe.Load("testdata/" + name + ".tokenizer.json.gz")
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			n := 0
			for b.Loop() {
				n += len(tok.Encode(text))
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	tok, err := bpe.Load("testdata/llama3.tokenizer.json.gz")
	if err != nil {
		b.Fatal(err)
	}
	ids := tok.Encode(strings.Repeat("The answer is 84. Zürich, 東京, café — naïve résumé.\n", 100))
	for b.Loop() {
		_ = tok.Decode(ids)
	}
	b.ReportMetric(float64(len(ids)*b.N)/b.Elapsed().Seconds(), "tokens/s")
}

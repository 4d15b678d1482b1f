package filesearch

import (
	"fmt"

	"agrl.dev/agrl"
)

// Tokenizer returns the tokenizer of the recipe's policy: TinyLM's (ASCII with DigitPairs) with a
// word for each key the questions ask about ("port", "level", …) and one for each directory name
// of the trees as a path component ("/srv", "/prod", "/eu", …). A path of three directories and
// a service is then 8 tokens instead of 17 ("/srv/prod/eu/kemo"; a service whose name starts
// with a directory's letters, "/saku", takes that word too). Such paths are what the small model
// copies from find's listing into ls and cat: with the former recipe's demonstrations the
// warm start got better (test success 48.4% → 56.2%, hard trees 5% → 16%; 54.7% with the
// Skimmer's) and its SFT about 30% faster (docs/experiments.md, "File search, third session").
func Tokenizer() *agrl.Tokenizer {
	words := agrl.DigitPairs()
	for _, k := range keys {
		words = append(words, k.name)
	}
	for _, pool := range levelPools {
		for _, name := range pool {
			words = append(words, "/"+name)
		}
	}
	t, err := agrl.ASCIITokenizer().Words(words...)
	if err != nil { // the words are this package's constants (no name repeats): TestTokenizer
		panic(fmt.Sprintf("filesearch: tokenizer: %v", err))
	}
	return t
}

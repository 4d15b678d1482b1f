package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// TestGoldenEpisodes pins the JSON of expert episodes of every environment: tasks, turns,
// observations and reward breakdowns. A change here changes what run directories store and
// what the trajectory viewer reads, so it must be deliberate (go test -run Golden -update).
func TestGoldenEpisodes(t *testing.T) {
	for _, env := range []string{"calc", "multihop", "filesearch"} {
		code, out, errOut := runCLI("sample", "--env", env, "-n", "2", "--seed", "1", "--json")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", env, code, errOut)
		}
		path := filepath.Join("..", "..", "..", "testdata", "golden", "sample-"+env+".jsonl")
		if *update {
			if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./agrl/cmd/agrl -run Golden -update to create it)", err)
		}
		if string(want) != out {
			t.Errorf("%s: episodes differ from %s:\ngot:\n%s\nwant:\n%s", env, path, out, want)
		}
	}
}

package hf

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeHub serves repositories from local directories at the hub's file route,
// /<owner>/<name>/resolve/<revision>/<file>, and counts the requests. A repository in gated
// answers 401 without the token "secret"; truncate cuts every body short of its length.
type fakeHub struct {
	repos    map[string]string // id -> directory
	gated    map[string]bool
	truncate bool
	mu       sync.Mutex
	requests []string
}

func (h *fakeHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, r.URL.Path)
	h.mu.Unlock()
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) != 5 || parts[2] != "resolve" || parts[3] != "main" {
		http.NotFound(w, r)
		return
	}
	id := parts[0] + "/" + parts[1]
	dir, ok := h.repos[id]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if h.gated[id] && r.Header.Get("Authorization") != "Bearer secret" {
		http.Error(w, "gated", http.StatusUnauthorized)
		return
	}
	data, err := os.ReadFile(filepath.Join(dir, parts[4]))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	if h.truncate {
		data = data[:len(data)/2]
	}
	w.Write(data)
}

// hubRepo copies a test checkpoint into a directory with a tokenizer.json beside it.
func hubRepo(t *testing.T, fixture string) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(filepath.Join("..", "llm", "testdata", fixture))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join("..", "llm", "testdata", fixture, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), []byte(`{"model":{"type":"BPE"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDownload: a single-file and a sharded checkpoint arrive byte for byte and open as
// checkpoints; a finished download is reused without a request; gated models need the token;
// missing repositories, truncated transfers and hostile indexes are errors that leave no
// file claiming to be complete.
func TestDownload(t *testing.T) {
	single, sharded := hubRepo(t, "qwen3"), hubRepo(t, "llama-sharded")
	hub := &fakeHub{repos: map[string]string{"agrl/qwen3": single, "agrl/sharded": sharded, "agrl/gated": single},
		gated: map[string]bool{"agrl/gated": true}}
	srv := httptest.NewServer(hub)
	defer srv.Close()
	cache := t.TempDir()
	opt := HubOptions{Endpoint: srv.URL, CacheDir: cache, Token: "-"}
	var progress []string
	opt.Progress = func(file string, done, total int64) {
		if done == total {
			progress = append(progress, file)
		}
	}
	ctx := context.Background()
	for id, src := range map[string]string{"agrl/qwen3": single, "agrl/sharded": sharded} {
		dir, err := Download(ctx, id, opt)
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := os.ReadDir(src)
		for _, e := range entries {
			want, _ := os.ReadFile(filepath.Join(src, e.Name()))
			got, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if e.Name() == "expected.json" { // not a file Download asks for
				if err == nil {
					t.Errorf("%s: expected.json downloaded", id)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: %s differs from the hub's (%v)", id, e.Name(), err)
			}
		}
		ck, err := OpenDir(dir)
		if err != nil {
			t.Fatalf("%s: the download does not open as a checkpoint: %v", id, err)
		}
		ck.Close()
	}
	if !strings.Contains(strings.Join(progress, " "), "model-00002-of-00002.safetensors") {
		t.Errorf("progress reported %v, want every file, the shards included", progress)
	}

	// Reused without the hub; Cached finds it (and only it, and only at its revision).
	before := len(hub.requests)
	srv.Close()
	got, err := Download(ctx, "agrl/qwen3", opt)
	if err != nil {
		t.Fatalf("a finished download, hub down: %v", err)
	}
	if dir, ok := Cached("agrl/qwen3", HubOptions{CacheDir: cache}); !ok || dir != got {
		t.Errorf("Cached(agrl/qwen3) = %q, %v; want %q", dir, ok, got)
	}
	for _, c := range []struct{ id, rev string }{{"agrl/gated", ""}, {"agrl/qwen3", "v2"}, {"agrl/qwen3", "../main"}, {"not an id", ""}} {
		if dir, ok := Cached(c.id, HubOptions{CacheDir: cache, Revision: c.rev}); ok {
			t.Errorf("Cached(%q, revision %q) = %q, want none", c.id, c.rev, dir)
		}
	}
	if len(hub.requests) != before {
		t.Error("a finished download contacted the hub")
	}

	srv2 := httptest.NewServer(hub)
	defer srv2.Close()
	opt.Endpoint = srv2.URL
	if _, err := Download(ctx, "agrl/gated", opt); err == nil || !strings.Contains(err.Error(), "gated or private") {
		t.Errorf("gated without the token: %v", err)
	}
	opt.Token = "secret"
	if _, err := Download(ctx, "agrl/gated", opt); err != nil {
		t.Errorf("gated with the token: %v", err)
	}
	if _, err := Download(ctx, "agrl/nothing", opt); err == nil || !strings.Contains(err.Error(), "not on the hub") {
		t.Errorf("a missing repository: %v", err)
	}

	hub.truncate = true
	hub.repos["agrl/cut"] = single
	if _, err := Download(ctx, "agrl/cut", opt); err == nil || !strings.Contains(err.Error(), "downloading config.json") {
		t.Errorf("a truncated transfer: %v", err)
	}
	cut := filepath.Join(cache, "agrl--cut", "main")
	if _, err := os.Stat(filepath.Join(cut, hubComplete)); err == nil {
		t.Error("a truncated download is marked complete")
	}
	if _, err := os.Stat(filepath.Join(cut, "config.json")); err == nil {
		t.Error("a truncated file was kept under its name")
	}
	hub.truncate = false
	if _, err := Download(ctx, "agrl/cut", opt); err != nil {
		t.Errorf("resuming after the truncated transfer: %v", err)
	}

	hostile := hubRepo(t, "llama-sharded")
	os.WriteFile(filepath.Join(hostile, IndexFile), []byte(`{"weight_map":{"a":"../../etc/passwd"}}`), 0o644)
	hub.repos["agrl/hostile"] = hostile
	if _, err := Download(ctx, "agrl/hostile", opt); err == nil || !strings.Contains(err.Error(), "not a file name") {
		t.Errorf("an index naming a path: %v", err)
	}
	for _, id := range []string{"../x", "a/b/c", "/abs", "a/..", "noslash", ""} {
		if _, err := Download(ctx, id, opt); err == nil {
			t.Errorf("id %q accepted", id)
		}
	}
	if _, err := Download(ctx, "agrl/qwen3", HubOptions{Endpoint: srv2.URL, CacheDir: cache, Revision: "../x"}); err == nil {
		t.Error("a revision with .. accepted")
	}
}

// TestDownloadBeforeWeights: a BeforeWeights error stops a download after the config and
// tokenizer files, before the weights are requested, and is returned; the next call without
// it finishes the download.
func TestDownloadBeforeWeights(t *testing.T) {
	hub := &fakeHub{repos: map[string]string{"agrl/qwen3": hubRepo(t, "qwen3")}}
	srv := httptest.NewServer(hub)
	defer srv.Close()
	opt := HubOptions{Endpoint: srv.URL, CacheDir: t.TempDir(), Token: "-"}
	refuse := errors.New("too large")
	var sawConfig bool
	opt.BeforeWeights = func(dir string) error {
		_, err := LoadConfig(filepath.Join(dir, "config.json"))
		sawConfig = err == nil
		return refuse
	}
	if _, err := Download(context.Background(), "agrl/qwen3", opt); !errors.Is(err, refuse) || !sawConfig {
		t.Fatalf("Download with a refusing BeforeWeights: %v (config readable there: %v)", err, sawConfig)
	}
	for _, r := range hub.requests {
		if strings.HasSuffix(r, ".safetensors") || strings.HasSuffix(r, ".index.json") {
			t.Errorf("%s requested after BeforeWeights refused", r)
		}
	}
	if _, ok := Cached("agrl/qwen3", opt); ok {
		t.Error("a refused download is marked complete")
	}
	opt.BeforeWeights = nil
	dir, err := Download(context.Background(), "agrl/qwen3", opt)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := OpenDir(dir)
	if err != nil {
		t.Fatalf("the finished download: %v", err)
	}
	ck.Close()
}

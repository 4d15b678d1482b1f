package hf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Hub downloads.
//
// Download fetches the files a decoder checkpoint needs from a Hugging Face hub (or a mirror,
// HF_ENDPOINT) into a local cache and returns the directory, which Load-style readers take as
// any checkpoint directory. It asks for each file by name at
// <endpoint>/<id>/resolve/<revision>/<file>, the hub's plain file route, so no API listing is
// needed: config.json and tokenizer.json (required), tokenizer_config.json,
// generation_config.json and special_tokens_map.json (if the repository has them), and the
// weights — model.safetensors, or model.safetensors.index.json and every shard its weight_map
// names.

// HubOptions are Download's settings; the zero value uses the environment's defaults.
type HubOptions struct {
	// Endpoint is the hub's URL: "" means $HF_ENDPOINT, else https://huggingface.co.
	Endpoint string
	// Revision is a branch, tag or commit: "" means "main".
	Revision string
	// Token is sent as a bearer token (gated and private models): "" means $HF_TOKEN.
	Token string
	// CacheDir holds the downloads: "" means $AGRL_HUB_CACHE, else <user cache dir>/agrl/hub.
	CacheDir string
	// Progress, when set, is called as each file arrives: its name, the bytes so far and the
	// total (-1 when the server does not say), at most a few times a second and at the end.
	Progress func(file string, done, total int64)
	// Client is the HTTP client (nil: one without an overall timeout, as files are gigabytes).
	Client *http.Client
	// BeforeWeights, when set, is called with the download's directory once config.json and
	// the tokenizer files are there, before any weights are fetched; an error from it stops
	// the download (returned wrapped; the files so far stay for a later call) — for a check,
	// such as whether the model fits this machine, that needs only the config.
	BeforeWeights func(dir string) error
}

// hubFiles are the files Download fetches besides the weights; required ones fail the
// download when the hub does not have them.
var hubFiles = []struct {
	name     string
	required bool
}{
	{"config.json", true}, {"tokenizer.json", true}, {"tokenizer_config.json", false},
	{"generation_config.json", false}, {"special_tokens_map.json", false},
}

// hubComplete marks a cache directory whose download finished: Download then returns it
// without contacting the hub.
const hubComplete = ".agrl-complete"

// maxIndexBytes bounds an index file (a real one is tens of kilobytes).
const maxIndexBytes = 16 << 20

var (
	hubIDPattern  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)
	revPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	errHubMissing = errors.New("not on the hub")
)

// IsHubID reports whether s has the shape of a hub model id, "owner/name" (letters, digits,
// '.', '_', '-'; no "..", no other '/'). A local directory of that name takes precedence where
// callers accept both.
func IsHubID(s string) bool {
	return hubIDPattern.MatchString(s) && !strings.Contains(s, "..")
}

// Download fetches model id (for instance "Qwen/Qwen3-0.6B") into the cache and returns its
// directory (see the section comment). A finished download is reused without contacting the
// hub; an interrupted one starts again from the first file not complete (files already
// complete are kept; a partial file is downloaded again). A token is never sent over plain
// http except to this machine. Errors
// name the file and the reason: a gated or private model without a token (401/403), a
// repository or required file that does not exist (404), a hub that cannot be reached, a
// truncated transfer, an index whose shards are not plain file names.
func Download(ctx context.Context, id string, opt HubOptions) (string, error) {
	if !IsHubID(id) {
		return "", fmt.Errorf("hf: %q is not a hub model id (owner/name)", id)
	}
	if opt.Revision == "" {
		opt.Revision = "main"
	}
	if !revPattern.MatchString(opt.Revision) || strings.Contains(opt.Revision, "..") {
		return "", fmt.Errorf("hf: revision %q: want a branch, tag or commit name", opt.Revision)
	}
	if opt.Endpoint == "" {
		opt.Endpoint = os.Getenv("HF_ENDPOINT")
	}
	if opt.Endpoint == "" {
		opt.Endpoint = "https://huggingface.co"
	}
	opt.Endpoint = strings.TrimSuffix(opt.Endpoint, "/")
	if u, err := url.Parse(opt.Endpoint); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", fmt.Errorf("hf: hub endpoint %q is not an http(s) URL", opt.Endpoint)
	}
	if opt.Token == "" {
		opt.Token = os.Getenv("HF_TOKEN")
	}
	if u, _ := url.Parse(opt.Endpoint); opt.Token != "" && u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return "", fmt.Errorf("hf: refusing to send the hub token over plain http to %s (use https)", u.Host)
	}
	dir, err := cacheDir(id, &opt)
	if err != nil {
		return "", err
	}
	if opt.Client == nil {
		opt.Client = &http.Client{}
	}
	if _, err := os.Stat(filepath.Join(dir, hubComplete)); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	d := hubDownload{ctx: ctx, id: id, opt: opt, dir: dir}
	for _, f := range hubFiles {
		if err := d.fetch(f.name); err != nil {
			if errors.Is(err, errHubMissing) && !f.required {
				continue
			}
			return "", err
		}
	}
	if opt.BeforeWeights != nil {
		if err := opt.BeforeWeights(dir); err != nil {
			return "", fmt.Errorf("hf: %s: before its weights: %w", id, err)
		}
	}
	switch err := d.fetch(IndexFile); {
	case errors.Is(err, errHubMissing):
		if err := d.fetch(SingleFile); err != nil {
			if errors.Is(err, errHubMissing) {
				return "", fmt.Errorf("hf: %s has neither %s nor %s", id, SingleFile, IndexFile)
			}
			return "", err
		}
	case err != nil:
		return "", err
	default:
		data, err := readLimited(filepath.Join(dir, IndexFile), maxIndexBytes)
		if err != nil {
			return "", fmt.Errorf("hf: %s %s: %w", id, IndexFile, err)
		}
		index, err := parseIndex(data)
		if err != nil {
			os.Remove(filepath.Join(dir, IndexFile))
			return "", fmt.Errorf("hf: %s %s: %w", id, IndexFile, err)
		}
		for _, shard := range slices.Compact(slices.Sorted(maps.Values(index))) {
			if err := d.fetch(shard); err != nil {
				if errors.Is(err, errHubMissing) {
					return "", fmt.Errorf("hf: %s: shard %s, named by its index, is not on the hub", id, shard)
				}
				return "", err
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, hubComplete), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("hf: %w", err)
	}
	return dir, nil
}

// cacheDir returns the directory Download keeps model id in, filling opt's CacheDir and
// Revision with their defaults.
func cacheDir(id string, opt *HubOptions) (string, error) {
	if opt.Revision == "" {
		opt.Revision = "main"
	}
	if opt.CacheDir == "" {
		opt.CacheDir = os.Getenv("AGRL_HUB_CACHE")
	}
	if opt.CacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("hf: no cache directory for hub downloads (set AGRL_HUB_CACHE): %w", err)
		}
		opt.CacheDir = filepath.Join(base, "agrl", "hub")
	}
	return filepath.Join(opt.CacheDir, strings.ReplaceAll(id, "/", "--"), opt.Revision), nil
}

// Cached returns the directory of model id if Download has finished fetching it into the
// cache opt names (its CacheDir and Revision, or their defaults), without contacting the hub;
// ok is false when it has not.
func Cached(id string, opt HubOptions) (dir string, ok bool) {
	if rev := cmp.Or(opt.Revision, "main"); !IsHubID(id) || !revPattern.MatchString(rev) || strings.Contains(rev, "..") {
		return "", false
	}
	dir, err := cacheDir(id, &opt)
	if err != nil {
		return "", false
	}
	if _, err := os.Stat(filepath.Join(dir, hubComplete)); err != nil {
		return "", false
	}
	return dir, true
}

// isLoopback reports whether host names this machine (a local mirror or a test server).
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("larger than %d bytes", limit)
	}
	return data, err
}

// hubDownload is one Download's state.
type hubDownload struct {
	ctx context.Context
	id  string
	opt HubOptions
	dir string
}

// fetch downloads one file into the cache directory (a temporary file of its own, renamed
// once complete, so that two downloads of one model never write the same file). A file that
// is there already is kept: it was renamed into place only when complete.
func (d *hubDownload) fetch(name string) error {
	dst := filepath.Join(d.dir, name)
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	u := fmt.Sprintf("%s/%s/resolve/%s/%s", d.opt.Endpoint, d.id, url.PathEscape(d.opt.Revision), url.PathEscape(name))
	req, err := http.NewRequestWithContext(d.ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("hf: %s: %w", name, err)
	}
	if d.opt.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.opt.Token)
	}
	resp, err := d.opt.Client.Do(req)
	if err != nil {
		return fmt.Errorf("hf: downloading %s of %s: %w (without network access, download the model elsewhere and pass its directory)", name, d.id, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("hf: %s of %s: %w", name, d.id, errHubMissing)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		hint := "set HF_TOKEN to a token that may read it"
		if d.opt.Token != "" {
			hint = "the token given may not read it (accept the model's licence on the hub?)"
		}
		return fmt.Errorf("hf: %s of %s: %s: the model is gated or private: %s", name, d.id, resp.Status, hint)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("hf: %s of %s: the hub answered %s", name, d.id, resp.Status)
	}
	f, err := os.CreateTemp(d.dir, name+".*.part")
	if err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	part := f.Name()
	w := &progressWriter{file: name, total: resp.ContentLength, fn: d.opt.Progress}
	n, err := io.Copy(f, io.TeeReader(resp.Body, w))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("got %d of %d bytes", n, resp.ContentLength)
	}
	if err != nil {
		os.Remove(part)
		return fmt.Errorf("hf: downloading %s of %s: %w", name, d.id, err)
	}
	w.report(true)
	if err := os.Rename(part, dst); err != nil {
		return fmt.Errorf("hf: %w", err)
	}
	return nil
}

// progressWriter counts the bytes of one file and reports them at most every 200 ms.
type progressWriter struct {
	file  string
	done  int64
	total int64
	last  time.Time
	fn    func(file string, done, total int64)
}

func (w *progressWriter) Write(p []byte) (int, error) {
	w.done += int64(len(p))
	w.report(false)
	return len(p), nil
}

func (w *progressWriter) report(final bool) {
	if w.fn == nil || (!final && time.Since(w.last) < 200*time.Millisecond) {
		return
	}
	w.last = time.Now()
	w.fn(w.file, w.done, w.total)
}

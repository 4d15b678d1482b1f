// Package hubtest serves model directories at the Hugging Face hub's file route,
// <server>/<owner>/<name>/resolve/main/<file>, for tests of hub downloads (hf.Download and
// what builds on it) without the network.
package hubtest

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Server is a test hub: each repository id maps to a local directory whose files it serves
// (404 for anything else). It counts the requests it answers.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
}

// Serve starts a hub serving repos (id → directory); the test's cleanup closes it.
func Serve(t testing.TB, repos map[string]string) *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests++
		s.mu.Unlock()
		for id, dir := range repos {
			name, ok := strings.CutPrefix(r.URL.Path, "/"+id+"/resolve/main/")
			if ok && name != "" && !strings.Contains(name, "/") {
				http.ServeFile(w, r, filepath.Join(dir, name))
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// Requests is the number of requests answered so far.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

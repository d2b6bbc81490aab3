package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sglmock/sglmock/mockserver/api"
	"github.com/sglmock/sglmock/mockserver/profile"
)

// bench --backend vllm can be rehearsed offline: against the mock, the
// method's flushes go to vLLM's POST /reset_prefix_cache, which empties
// the cache, so flush+nonce rows and plain flush rows come out clean (were
// the reset not to empty it, flush's leg b would be served from the cache
// and the row POISONED).
func TestBenchVLLMBackendAgainstMock(t *testing.T) {
	p, err := profile.Load("default")
	if err != nil {
		t.Fatal(err)
	}
	m, err := startLocalMock(p, 20, api.Config{EnableCacheReport: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, method := range []string{"flush+nonce", "flush"} {
		var stdout, stderr bytes.Buffer
		before := len(m.srv.Engine().FlushHistory())
		code := run([]string{"bench", "twopoint", "--backend", "vllm", "--url", m.URL, "--ctx", "1024,2048", "--method", method}, &stdout, &stderr)
		if code != 0 || !strings.Contains(stdout.String(), "method "+method) || strings.Contains(stdout.String(), "POISONED") {
			t.Fatalf("--method %s: exit %d, want 0 and clean rows\n%s%s", method, code, stdout.String(), stderr.String())
		}
		flushes := m.srv.Engine().FlushHistory()[before:]
		if len(flushes) < 4 {
			t.Fatalf("--method %s: %d resets, want one before each of 4 legs", method, len(flushes))
		}
		for _, f := range flushes {
			if f.Err != nil {
				t.Errorf("--method %s: a reset was refused: %v", method, f.Err)
			}
		}
	}
}
